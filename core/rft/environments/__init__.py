"""Running environments (:mod:`rft.environment`) safely: per-call time-outs, failures as
one line, out-of-process hosting.

- :mod:`~rft.environments.guarded` — :class:`GuardedEnvironment`: an in-process instance
  whose calls run under a time-out and whose exceptions and contract breaches become
  :class:`~rft.environment.EnvironmentFailure`;
- :mod:`~rft.environments.process_host` — :class:`ProcessEnvironment`: an instance in a
  child process of its own (``Environment.out_of_process``), killed on a time-out, on
  close, and at interpreter exit;
- :func:`open_environment` — the right one of the two for an environment class.
"""

from __future__ import annotations

from typing import Any

from rft.environment import Environment
from rft.environments.guarded import GuardedEnvironment, environment_name
from rft.environments.process_host import ProcessEnvironment


def open_environment(env_class: type[Environment], args: Any = None, *,
                     timeout: float | None = None) -> Environment:
    """An instance of ``env_class`` built with ``args``, every call under ``timeout``
    seconds (``None``: no limit): in a child process when the class declares
    ``out_of_process``, else in this one.

    :raises EnvironmentFailure: building it raised or timed out (one line naming it).
    """
    if env_class.out_of_process:
        return ProcessEnvironment(env_class, args, timeout=timeout)
    return GuardedEnvironment(env_class, args, timeout=timeout)


__all__ = ["GuardedEnvironment", "ProcessEnvironment", "environment_name", "open_environment"]
