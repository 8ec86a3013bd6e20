"""Run services: processes a run owns beside its explorer and trainer (``service.<name>``).

A service is a plugin (``register_services``) registered under the name of its section in
``service`` (``service.data_juicer`` → the service registered as ``data_juicer``).
Validation resolves every section that is set; the launcher starts each resolved service
before a stage's mode runs and stops it after, whatever way the stage ends::

    service = ServiceClass(section, job_dir)   # section: the service.<name> dataclass
    variables = service.start()                # e.g. {"RFT_DATA_JUICER_URL": "http://…"}
    ...                                        # the stage runs with ``variables`` set
    service.close()

``start`` returns the environment variables through which the run's own code (operators,
workflows, worker processes spawned by this process) reaches the service; the launcher
sets them in this process while the stage runs and restores the environment afterwards,
and adds them to the stage's ``explorer.env_vars`` (:func:`with_service_env`), which the
explorer's Ray actors of mode ``both`` set in their own processes.
A service that starts a process keeps it in a process group of its own and makes it exit
when this process disappears (see :mod:`rft.environments.process_host` for the pattern).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from rft.scoped_environ import scoped_environ

if TYPE_CHECKING:
    from rft.config import Stage
    from rft.config.plan import Selected


class RunService(ABC):
    """Base class of run services.

    :param config: the ``service.<name>`` section (its dataclass from the schema).
    :param job_dir: the run's ``checkpoint_job_dir`` (logs of the service go there).
    """

    def __init__(self, config: Any, job_dir: str) -> None:
        self.config = config
        self.job_dir = job_dir

    @abstractmethod
    def start(self) -> dict[str, str]:
        """Start (or connect to) the service; the environment variables the run reaches it
        through. Raises :class:`~rft.errors.RftError` (one line naming the config key) when
        it cannot."""

    @abstractmethod
    def close(self) -> None:
        """Stop what :meth:`start` started (idempotent); nothing of it is left running."""


@contextmanager
def run_services(selected: Sequence[Selected[type[RunService]]],
                 job_dir: str) -> Iterator[dict[str, str]]:
    """Start every selected service in order, with the variables they return set in
    ``os.environ``; yields those variables. On the way out (normal end or error) close them
    in reverse order and restore the environment."""
    started: list[RunService] = []
    variables: dict[str, str] = {}
    try:
        for chosen in selected:
            service = chosen.implementation(chosen.args, job_dir)
            started.append(service)
            with scoped_environ(variables):  # a later service reaches the earlier ones
                variables.update(service.start())
        with scoped_environ(variables):
            yield variables
    finally:
        for service in reversed(started):
            service.close()


def with_service_env(stage: Stage, variables: dict[str, str]) -> Stage:
    """``stage`` with ``variables`` added to its ``explorer.env_vars`` (the user's values
    win), so that explorer processes started elsewhere (Ray actors) reach the services."""
    if not variables:
        return stage
    config = stage.plan.config
    env_vars = {**variables, **(config.explorer.env_vars or {})}
    config = replace(config, explorer=replace(config.explorer, env_vars=env_vars))
    return replace(stage, plan=replace(stage.plan, config=config))


__all__ = ["RunService", "run_services", "with_service_env"]
