"""``sync_method: checkpoint``, explorer side: the trainer's newest checkpoint → engines.

The trainer (another process) writes ``<job dir>/global_step_N/`` atomically every
``sync_interval`` steps; :class:`CheckpointSynchronizer` loads the newest complete one
into the explorer's engines as model version ``N``. With ``wait_for_checkpoint`` the
explorer blocks until the checkpoint of its sync point appears (:meth:`~CheckpointSynchronizer.
wait_for`), for at most ``sync_timeout`` seconds, then fails with a one-line error naming
the job dir and the version it waited for; it loads that checkpoint itself, not a newer
one, so the weights of a step do not depend on timing or on a restart of either side.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from rft.adapter import AdapterWeights
from rft.checkpoint import (
    Checkpoint,
    CheckpointError,
    list_checkpoints,
    load_sync_weights,
    newest_checkpoint,
)
from rft.errors import RftError
from rft.engines.engine import InferenceEngine, load_weights


class SyncTimeout(RftError):
    """No newer checkpoint appeared within ``synchronizer.sync_timeout``."""


class CheckpointSynchronizer:
    """Loads checkpoints of ``job_dir`` into ``engines``.

    :param job_dir: the run's checkpoint folder (``<root>/<project>/<name>``).
    :param engines: the explorer's inference engines.
    :param timeout: seconds :meth:`wait_newer` waits (``synchronizer.sync_timeout``).
    :param poll_interval: seconds between looks at the job dir while waiting.
    """

    LOAD_ATTEMPTS = 3
    """Tries of one load: the trainer may prune the checkpoint being read."""

    def __init__(self, job_dir: str, engines: Sequence[InferenceEngine], *, timeout: float,
                 poll_interval: float = 0.2,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.job_dir = job_dir
        self.engines = list(engines)
        self.timeout = timeout
        self.poll_interval = poll_interval
        self._clock = clock
        self._sleep = sleep
        self.version = 0
        """Step of the checkpoint the engines hold (0: the initial model)."""
        self.loaded: Checkpoint | None = None
        """That checkpoint, once one was loaded."""

    def load_newest(self) -> dict[str, float]:
        """Load the newest checkpoint if it is newer than :attr:`version`; return metrics
        (empty when there was nothing newer)."""
        chosen = self._newer(newest_checkpoint(self.job_dir))
        return self._load(chosen) if chosen is not None else {}

    def wait_newer(self) -> dict[str, float]:
        """Wait for a checkpoint newer than :attr:`version`, then load the newest.

        :raises SyncTimeout: none appeared within :attr:`timeout` seconds.
        """
        return self._wait_and_load(self._newer)

    def wait_for(self, target: int) -> dict[str, float]:
        """Wait until a checkpoint of step ``>= target`` exists, then load ``global_step_
        <target>`` itself (the newest when that one is gone): the version a step gets does
        not depend on how far ahead the trainer is — after a restart of either process the
        explorer samples with the weights it would have had.

        :raises SyncTimeout: none appeared within :attr:`timeout` seconds.
        """
        if self.version >= target:
            return {}

        def exact(newest: Checkpoint | None) -> Checkpoint | None:
            if newest is None or newest.step < target:
                return None
            return next((c for c in list_checkpoints(self.job_dir) if c.step == target), newest)

        return self._wait_and_load(exact)

    def _newer(self, newest: Checkpoint | None) -> Checkpoint | None:
        """``newest`` when it is newer than :attr:`version`."""
        return newest if newest is not None and newest.step > self.version else None

    def _wait_and_load(self, choose: Callable[[Checkpoint | None], Checkpoint | None]
                       ) -> dict[str, float]:
        """Look at the job dir every :attr:`poll_interval` s until ``choose`` (given the
        newest checkpoint) picks one, then load it; the metrics include the wait.

        :raises SyncTimeout: nothing was picked within :attr:`timeout` seconds.
        """
        started = self._clock()
        deadline = started + self.timeout
        while True:
            chosen = choose(newest_checkpoint(self.job_dir))
            if chosen is not None:
                metrics = self._load(chosen)
                metrics["timing_s/wait_for_checkpoint"] = self._clock() - started
                return metrics
            if self._clock() >= deadline:
                raise SyncTimeout(
                    f"synchronizer.sync_timeout: waited {self.timeout:g} s for a checkpoint "
                    f"newer than global_step_{self.version} (model version > {self.version}) "
                    f"in {self.job_dir}; is the train run alive and saving every "
                    "sync_interval steps?")
            self._sleep(self.poll_interval)

    def load_step(self, step: int) -> dict[str, float]:
        """Load ``global_step_<step>`` (a resumed explorer's version), else the newest."""
        if step <= 0:
            return {}
        exact = next((c for c in list_checkpoints(self.job_dir) if c.step == step), None)
        if exact is None:
            return self.load_newest()
        return self._load(exact)

    def _load(self, checkpoint: Checkpoint) -> dict[str, float]:
        started = self._clock()
        for attempt in range(self.LOAD_ATTEMPTS):
            try:
                weights = load_sync_weights(checkpoint)  # LoRA: the adapter
                break
            except CheckpointError:
                newer = newest_checkpoint(self.job_dir)
                if attempt + 1 == self.LOAD_ATTEMPTS or newer is None or \
                        newer.path == checkpoint.path:
                    raise
                checkpoint = newer  # pruned while we read it: take the one that replaced it
        for engine in self.engines:
            load_weights(engine, weights if isinstance(weights, AdapterWeights)
                         else weights.items(), checkpoint.step)
        self.version = checkpoint.step
        self.loaded = checkpoint
        return {"timing_s/update_weights": self._clock() - started,
                "sync/model_version": float(checkpoint.step)}
