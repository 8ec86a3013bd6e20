"""One stage's lifecycle, shared by every mode.

Every mode runs a stage through the same steps::

    open monitors (per role) → resume from the newest readable checkpoint (the monitors
    forget what an interrupted run logged after it) → evaluate before (first step,
    ``explorer.eval_on_startup``) → steps, with an evaluation every
    ``explorer.eval_interval`` and a checkpoint every ``trainer.save_interval`` (neither at
    the last step) → evaluate after → final checkpoint → close

:class:`StageLifecycle` owns the monitors, the result and those decisions. A mode whose
steps run one after the other (``colocate``, ``train``, ``explore``) implements
:class:`StageBody` and calls :meth:`StageLifecycle.drive`; mode ``both``, whose explorer
and trainer run at once, asks the same lifecycle what is due as its calls finish.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from rft.config import Stage
from rft.modes.builders import open_monitors
from rft.monitor.base import Monitor


@dataclass
class CheckpointEval:
    """Evaluation of one checkpoint (``bench`` mode)."""

    step: int
    """The checkpoint's training step (``global_step_<step>``)."""
    path: str
    """The checkpoint folder."""
    metrics: dict[str, float] = field(default_factory=dict)
    """``eval/<taskset>/…`` metrics of its weights."""


@dataclass
class StageResult:
    """What a stage leaves behind for the next one and for ``summary.json``."""

    name: str | None
    steps: int
    eval_before: dict[str, float] = field(default_factory=dict)
    eval_after: dict[str, float] = field(default_factory=dict)
    final_model_path: str | None = None
    failed_tasks: int = 0
    seconds: float = 0.0
    checkpoint_evals: list[CheckpointEval] = field(default_factory=list)
    """``bench`` mode: one evaluation per checkpoint, oldest first."""


@dataclass(frozen=True)
class Resumed:
    """Where a resumed stage goes on from."""

    step: int = 0
    """Last step done (0: a fresh start)."""
    eval_before: dict[str, float] = field(default_factory=dict)
    """The evaluation before the first step, as the interrupted run recorded it."""
    initial_weights: bool = True
    """The engine holds the stage's initial model (``False``: it loaded a trainer's newer
    weights, so there is no "before" to evaluate)."""
    eval_after: dict[str, float] | None = None
    """The evaluation after the last step, when the interrupted run got that far (its
    final checkpoint holds it): a finished stage run again is not evaluated again."""
    checkpoint: str | None = None
    """The checkpoint folder it went on from (``None``: a fresh start)."""


def resume_line(run_name: str, resumed: Resumed, steps: int) -> str | None:
    """The console line of a stage that goes on from a checkpoint: which one and from which
    step, or that the stage is already finished and where; ``None`` for a fresh start."""
    if resumed.checkpoint is None:
        return None
    if resumed.step >= steps:
        return (f"[{run_name}] already finished: {resumed.checkpoint} holds step "
                f"{resumed.step} of {steps}; nothing to redo (a new run needs another "
                "name or continue_from_checkpoint: false)")
    return (f"[{run_name}] resumed from {resumed.checkpoint}: step {resumed.step} of "
            f"{steps} done, going on at step {resumed.step + 1}")


def announce_resume(run_name: str, resumed: Resumed, steps: int) -> None:
    """Print :func:`resume_line` (when there is one) on the console."""
    line = resume_line(run_name, resumed, steps)
    if line is not None:
        print(line, file=sys.stdout, flush=True)


class StageBody(Protocol):
    """What a mode with sequential steps plugs into :meth:`StageLifecycle.drive`."""

    steps: int
    """Steps of the stage (known once the body is built)."""

    def resume(self) -> Resumed:
        """Restore the newest checkpoint (when continuing); say where to go on from."""

    def step(self, step: int) -> None:
        """Do step ``step`` and log its metrics (through the lifecycle)."""

    def evaluate(self) -> dict[str, float]:
        """Evaluate the current weights on the eval tasksets."""

    def save(self, step: int, *, final: bool) -> None:
        """Checkpoint after ``step`` (``final``: the stage's last, with the HF export)."""

    def finish(self, result: StageResult) -> None:
        """Fill in what only the mode knows: final model path, failed tasks."""


class StageLifecycle:
    """Monitors, evaluation and checkpoint schedule, and the result of one stage.

    :param stage: the validated stage.
    :param roles: the monitor roles this mode logs under (``explorer``, ``trainer``, …).
    :param has_eval: the stage evaluates (eval tasksets are configured and the mode has an
        explorer).
    """

    def __init__(self, stage: Stage, roles: Sequence[str], *, has_eval: bool) -> None:
        self.stage = stage
        self.plan = stage.plan
        self.roles = tuple(roles)
        self.has_eval = has_eval
        self.result = StageResult(stage.name, 0)
        self.monitors: dict[str, list[Monitor]] = {}
        self._started = time.monotonic()

    # ---- monitors --------------------------------------------------------------------

    def start(self, steps: int) -> None:
        """Open the monitors of every role for a stage of ``steps`` steps."""
        self.result.steps = steps
        for role in self.roles:
            self.monitors[role] = open_monitors(self.plan, role)
            for monitor in self.monitors[role]:
                monitor.start(steps)

    def log(self, role: str, metrics: dict[str, float], step: int) -> None:
        """Log ``metrics`` of ``step`` to ``role``'s monitors."""
        for monitor in self.monitors.get(role, []):
            monitor.log(metrics, step)

    def log_table(self, role: str, name: str, rows: list[dict[str, Any]], step: int) -> None:
        """Log a table of ``step`` (the rollout preview) to ``role``'s monitors."""
        if rows:
            for monitor in self.monitors.get(role, []):
                monitor.log_table(name, rows, step)

    def rewind(self, step: int) -> None:
        """The stage goes on after ``step`` (0: from the start): every monitor forgets what
        an interrupted run logged after it (at step 0 too: the evaluation before the first
        step is redone), so each step is recorded once. Only a continued run rewinds."""
        if not self.plan.config.continue_from_checkpoint:
            return
        for monitors in self.monitors.values():
            for monitor in monitors:
                monitor.rewind(step if step > 0 else -1)

    def close(self) -> StageResult:
        """Close every monitor; return the result with its duration."""
        for monitors in self.monitors.values():
            for monitor in monitors:
                monitor.close()
        self.monitors.clear()
        self.result.seconds = time.monotonic() - self._started
        return self.result

    # ---- the schedule ----------------------------------------------------------------

    @property
    def steps(self) -> int:
        return self.result.steps

    @property
    def label(self) -> str:
        """The stage's run name (``<name>_<stage>`` in a run with stages), as the console
        monitor's lines are prefixed."""
        return self.plan.config.name

    def evaluates_before(self, resumed: Resumed) -> bool:
        """Evaluate before step 1: nothing was done yet, the engine holds the initial model
        and ``explorer.eval_on_startup``."""
        return (self.has_eval and resumed.step == 0 and resumed.initial_weights
                and self.plan.config.explorer.eval_on_startup)

    def eval_due(self, step: int) -> bool:
        """An evaluation after ``step``: every ``eval_interval`` steps, not at the last
        (the final evaluation follows it)."""
        interval = self.plan.config.explorer.eval_interval
        return self.has_eval and step % interval == 0 and step != self.steps

    def save_due(self, step: int) -> bool:
        """A checkpoint after ``step``: every ``save_interval`` steps, not at the last (the
        final checkpoint follows it)."""
        interval = self.plan.config.trainer.save_interval
        return bool(interval) and step % interval == 0 and step != self.steps

    # ---- sequential modes ------------------------------------------------------------

    def drive(self, body: StageBody, explorer_role: str = "explorer") -> None:
        """Run the stage's steps through ``body`` (monitors already started)."""
        resumed = body.resume()
        announce_resume(self.label, resumed, self.steps)
        self.rewind(resumed.step)
        self.result.eval_before = dict(resumed.eval_before)
        if self.evaluates_before(resumed):
            self.result.eval_before = body.evaluate()
            self.log(explorer_role, self.result.eval_before, 0)
        for step in range(resumed.step + 1, self.steps + 1):
            body.step(step)
            if self.eval_due(step):
                self.log(explorer_role, body.evaluate(), step)
            if self.save_due(step):
                body.save(step, final=False)
        if self.has_eval:
            if resumed.step >= self.steps and resumed.eval_after is not None:
                self.result.eval_after = dict(resumed.eval_after)  # logged by the first run
            else:
                self.result.eval_after = body.evaluate()
                self.log(explorer_role, self.result.eval_after, self.steps)
        body.save(self.steps, final=True)
        body.finish(self.result)


BodyFactory = Callable[[StageLifecycle, contextlib.ExitStack], StageBody]
"""Builds a mode's body; what it opens it registers on the exit stack to be closed."""


def run_stage(stage: Stage, roles: Sequence[str], *, has_eval: bool,
              open_body: BodyFactory) -> StageResult:
    """Run a sequential stage: build its body, start the monitors, drive the steps, and
    close everything (monitors last), however it ends."""
    lifecycle = StageLifecycle(stage, roles, has_eval=has_eval)
    try:
        with contextlib.ExitStack() as cleanup:
            body = open_body(lifecycle, cleanup)
            lifecycle.start(body.steps)
            lifecycle.drive(body)
    finally:
        result = lifecycle.close()
    return result


__all__ = ["BodyFactory", "CheckpointEval", "Resumed", "StageBody", "StageLifecycle",
           "StageResult", "announce_resume", "resume_line", "run_stage"]
