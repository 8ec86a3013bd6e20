"""What a ``both`` stage's checkpoint holds and when it is written.

A checkpoint of step ``t`` is written by the trainer actor, queued ahead of its next step:
its run state is the explorer's after explore step ``t`` (the trainer adds its own part),
the evaluations, and — when the explorer had written nothing past step ``t`` — the
buffer's state. While the evaluation due at ``t`` runs, the checkpoint waits for it (it
holds what a resumed run does not redo).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable

from rft.config.schema import RftConfig
from rft.errors import RftError
from rft.modes.both.progress import InFlight, Progress
from rft.modes.run_state import RunState
from rft.modes.runtime import BothActors, Call, Ref
from rft.modes.stage import StageLifecycle

log = logging.getLogger("rft.modes.both")

LogTrained = Callable[[int, dict[str, float], Ref], None]
"""Logs a train step with the buffer's counts (the ref of the call that counts them)."""


class Checkpoints:
    """The checkpoints of one ``both`` stage (the coordinator's progress and calls in
    flight, shared)."""

    def __init__(self, config: RftConfig, actors: BothActors, lifecycle: StageLifecycle,
                 progress: Progress, pending: InFlight) -> None:
        self.config = config
        self.actors = actors
        self.lifecycle = lifecycle
        self.progress = progress
        self.pending = pending

    def state(self, step: int, *, final: bool = False) -> RunState:
        """The run state of checkpoint ``step``: the explorer's after explore step ``step``
        (or the newest before it; the trainer adds its own part), the evaluations."""
        p, result = self.progress, self.lifecycle.result
        done = [s for s in p.explored_state if s <= step]
        explored = p.explored_state[max(done)] if done else RunState()
        return dataclasses.replace(
            explored, model_version=step, eval_before=result.eval_before,
            eval_after=result.eval_after if final and self.lifecycle.has_eval else None)

    def buffer_state(self, step: int) -> Ref | None:
        """The buffer's state (taken now) when it is the state after train step ``step``
        with nothing written past explore step ``step``; else ``None`` (a checkpoint then
        keeps the counts only, and the resumed explorer redoes the steps after ``step``)."""
        if self.progress.explored != step or self.pending.busy("explorer", "explore") or \
                self.pending.busy("trainer", "train"):
            return None
        ref = self.actors.call("buffer", "state_dict")
        self.actors.settle(ref)  # taken before the explorer's next step may write
        return ref

    def start(self, step: int, *, final: bool, buffer: Ref | None = None,
              export_hf: bool | None = None) -> Ref:
        """Start checkpointing the trainer at ``step``, with the buffer's state ``buffer``
        (``None``: the counts in ``state.json`` only)."""
        if export_hf is None:
            export_hf = final or self.config.trainer.save_hf_checkpoint == "always"
        return self.actors.call("trainer", "save", step, self.state(step, final=final),
                                export_hf, buffer)

    def save(self, step: int, *, final: bool, buffer: Ref | None = None,
             timeout: float | None = None) -> None:
        """Checkpoint the trainer at ``step`` (blocking: its result matters)."""
        ref = self.start(step, final=final, buffer=buffer)
        self.actors.get(ref, Call("trainer", "save", step), timeout)
        self.progress.last_saved = step

    def save_or_defer(self, step: int) -> Ref | None:
        """Start the checkpoint of ``step``, or — while the evaluation due at ``step`` runs
        — keep it for when that ends (``None``); the trainer's next step waits for it."""
        buffer = self.buffer_state(step)
        if self.pending.evaluating(step):
            self.progress.deferred_save = (step, buffer)
            return None
        return self.start(step, final=False, buffer=buffer)

    def after_evaluation(self) -> None:
        """Write the checkpoint that waited for an evaluation, once none due at its step
        runs."""
        p = self.progress
        if p.deferred_save is not None and not self.pending.evaluating(p.deferred_save[0]):
            step, buffer = p.deferred_save
            p.deferred_save = None
            self.save(step, final=False, buffer=buffer)

    def after_failure(self, log_trained: LogTrained) -> None:
        """Keep the trainer's last completed step when the run fails (trainer alive). A
        train step in flight is waited for first (its data is in the buffer): the save
        would otherwise follow it in the trainer's queue and hold its state."""
        p = self.progress
        if not self.actors.alive("trainer"):
            return
        timeout = self.config.synchronizer.sync_timeout
        in_flight = [(ref, call) for ref, call in self.pending.items()
                     if call.role == "trainer" and call.what == "train"]
        self.pending.clear()
        for ref, call in in_flight:
            try:
                metrics = self.actors.get(ref, call, timeout)
            except RftError as exc:
                log.warning("could not save the trainer's state: %s", exc)
                return
            p.trained = call.step
            try:
                log_trained(call.step, metrics, self.actors.call("buffer", "counts"))
            except (RftError, KeyError):  # the buffer is gone: the step without its counts
                self.lifecycle.log("trainer", metrics, call.step)
        if p.trained <= p.last_saved:
            return
        deferred = p.deferred_save
        buffer = deferred[1] if deferred is not None and deferred[0] == p.trained else None
        try:
            self.save(p.trained, final=False, buffer=buffer, timeout=timeout)
            log.warning("saved the trainer's state at step %d before stopping", p.trained)
        except RftError as exc:
            log.warning("could not save the trainer's state: %s", exc)


__all__ = ["Checkpoints", "LogTrained"]
