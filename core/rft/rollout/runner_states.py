"""``explorer.runner_state_report_interval``: the workflow runners' states, logged every
N seconds by a daemon thread (0: off).

:class:`RunnerStates` counts what :class:`~rft.rollout.runner.WorkflowRunner` does
(tasks running, tasks ended ok / failed); :class:`StateReporter` logs
:meth:`RunnerStates.line` every ``interval`` seconds until closed.
"""

from __future__ import annotations

import logging
import threading


class RunnerStates:
    """Thread-safe counts of a runner pool of ``workers`` runners (``runner_per_model``)."""

    def __init__(self, workers: int) -> None:
        self.workers = workers
        self._lock = threading.Lock()
        self.running = 0
        self.ok = 0
        self.failed = 0

    def started(self) -> None:
        """A task started (its first attempt)."""
        with self._lock:
            self.running += 1

    def ended(self, ok: bool) -> None:
        """A task ended (after its retries), ``ok`` or not."""
        with self._lock:
            self.running -= 1
            if ok:
                self.ok += 1
            else:
                self.failed += 1

    def line(self) -> str:
        """``runner states: R running, I idle (of W runners); tasks done D (ok O, failed
        F)``; idle = max(W − R, 0) (multi-threading / asynchronous modes may run more tasks
        at once than ``runner_per_model``)."""
        with self._lock:
            running, ok, failed = self.running, self.ok, self.failed
        idle = max(self.workers - running, 0)
        return (f"runner states: {running} running, {idle} idle (of {self.workers} runners); "
                f"tasks done {ok + failed} (ok {ok}, failed {failed})")


class StateReporter:
    """Logs ``states.line()`` at INFO every ``interval`` seconds on a daemon thread."""

    def __init__(self, states: RunnerStates, interval: float, log: logging.Logger) -> None:
        self.states = states
        self.interval = float(interval)
        self.log = log
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="rft-runner-states",
                                        daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.log.info(self.states.line())

    def close(self) -> None:
        """Stop reporting (returns at once; the thread ends within its wait)."""
        self._stop.set()


def start_reporter(states: RunnerStates, interval: float,
                   log: logging.Logger) -> StateReporter | None:
    """A :class:`StateReporter` when ``interval > 0`` (``explorer.runner_state_report_interval``),
    else ``None``."""
    return StateReporter(states, interval, log) if interval > 0 else None
