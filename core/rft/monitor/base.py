"""The monitor interface.

A monitor is a plugin (``register_monitors``) selected by ``monitor.monitor_type``. The
explorer and the trainer each open their own monitor (``role`` ``"explorer"`` or
``"trainer"``), shown as two runs named ``<name>_explorer`` and ``<name>_trainer``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any


class Monitor(ABC):
    """Receives ``{metric_name: value}`` once per step.

    :param project: the config's ``project``.
    :param name: the config's ``name`` (the experiment).
    :param role: ``"explorer"`` or ``"trainer"``; the run is ``<name>_<role>``.
    :param log_dir: ``<checkpoint_job_dir>/monitor``, where file-based monitors write.
    :param args: instance of the monitor's ``Args`` dataclass (``monitor.monitor_args``).
    """

    Args: type | None = None

    def __init__(self, project: str, name: str, role: str, log_dir: str,
                 args: Any = None) -> None:
        self.project = project
        self.name = name
        self.role = role
        self.log_dir = log_dir
        self.args = args

    @property
    def run_name(self) -> str:
        return f"{self.name}_{self.role}"

    def start(self, total_steps: int) -> None:
        """Called once before the first step with the number of steps of the run."""

    @abstractmethod
    def log(self, metrics: Mapping[str, float], step: int) -> None:
        """Record the metrics of one step."""

    def log_table(self, name: str, rows: Sequence[Mapping[str, Any]], step: int) -> None:
        """Record a small table of ``step`` (``rows``: dicts with the same keys), e.g. the
        rollout preview ``rollout_examples`` (``trainer.enable_preview``,
        :mod:`rft.monitor.preview`). Default: ignored (monitors without tables)."""

    def rewind(self, step: int) -> None:
        """A resumed run goes on after ``step`` (``-1``: from the very start): forget what
        an interrupted run recorded for later steps, which are logged again, so that each
        step is recorded once. Called after :meth:`start`, before the first :meth:`log`.
        Monitors that cannot forget (a service whose resumed run is a new run) keep this
        no-op."""

    def close(self) -> None:
        """Flush and release resources; called once at the end of a run."""
