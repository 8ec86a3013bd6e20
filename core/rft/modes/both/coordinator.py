"""The coordinator of a ``both`` stage: what to start now, what a finished call leads to,
and the end (see :mod:`rft.modes.both`)."""

from __future__ import annotations

import logging
import os
import time
from typing import Any

from rft.config import Stage
from rft.config.schema import RftConfig
from rft.errors import RftError
from rft.modes.both.checkpoints import Checkpoints
from rft.modes.both.progress import POLL_S, InFlight, Progress
from rft.modes.both.setup import resume, start_actors
from rft.modes.runtime import BothActors, Call, Ref
from rft.modes.stage import Resumed, StageLifecycle, StageResult, announce_resume
from rft.modes.sync_policy import SYNC_POLICIES, Decision, SyncPolicy
from rft.monitor.preview import ROLLOUT_EXAMPLES

log = logging.getLogger("rft.modes.both")


class Coordinator:
    """Drives the actors of one ``both`` stage.

    :param stage: the validated stage.
    :param actors: its actors (not started yet), on the run's cluster.
    """

    def __init__(self, stage: Stage, actors: BothActors) -> None:
        self.stage = stage
        self.plan = stage.plan
        self.config: RftConfig = stage.config
        s = self.config.synchronizer
        self.policy: SyncPolicy = SYNC_POLICIES[s.sync_style](s.sync_interval, s.sync_offset)
        self.progress = Progress()
        self.pending = InFlight()
        self.actors = actors
        self.lifecycle = StageLifecycle(stage, ("explorer", "trainer"),
                                        has_eval=bool(self.plan.eval_tasksets))
        self.result = self.lifecycle.result
        self.broadcasting = s.sync_method == "nccl"
        self.partial = s.partial_rollout
        """``synchronizer.partial_rollout``: explore steps never wait for weights; handed-out
        weights are loaded at once, beside the running step (:meth:`_sync_partial`)."""
        self.checkpoints = Checkpoints(self.config, actors, self.lifecycle, self.progress,
                                       self.pending)
        self.steps = 0

    # ---- the run ---------------------------------------------------------------------

    def run(self) -> StageResult:
        try:
            self.steps = self.result.steps = start_actors(self.stage, self.actors,
                                                          broadcasting=self.broadcasting)
            self.lifecycle.start(self.steps)
            resumed = resume(self.stage, self.actors, self.progress, self.result,
                             broadcasting=self.broadcasting)
            announce_resume(self.lifecycle.label, resumed, self.steps)
            self.lifecycle.rewind(resumed.step)
            if resumed.step >= self.steps:  # a finished stage run again
                self._finish_again(resumed)
                return self.result
            if self.lifecycle.evaluates_before(resumed):
                self.result.eval_before = self.actors.get(self.actors.call("explorer", "evaluate"),
                                                          Call("explorer", "evaluate", 0))
                self.lifecycle.log("explorer", self.result.eval_before, 0)
            while self.progress.trained < self.steps:
                self._schedule()
                self._wait()
            self._finish(self.lifecycle.has_eval)
        except (RftError, KeyboardInterrupt):  # KeyboardInterrupt: also SIGTERM (rft.cli)
            self.checkpoints.after_failure(self._log_trained)
            raise
        finally:
            self.lifecycle.close()
            self.actors.close()
        return self.result

    def _schedule(self) -> None:
        """Start whatever can start now."""
        self._schedule_explorer()
        self._schedule_trainer()
        p = self.progress
        if not self.pending.busy("explorer") and not p.idle_declared:
            self.actors.call("buffer", "writers_idle")
            p.idle_declared = True

    def _schedule_explorer(self) -> None:
        p = self.progress
        step = p.explored + 1
        pending = self.pending
        busy = (pending.busy("explorer", "explore") or pending.busy("explorer", "evaluate")
                if self.partial else pending.busy("explorer"))  # partial: syncs run beside
        if busy or step > self.steps:
            return
        if self.partial and p.explorer_version >= p.resumed:
            self._explore_partial(step)
            return
        decision = self.policy.before_explore(step, p.explorer_version, sorted(p.handed_out))
        if p.explorer_version < p.resumed:  # a resumed explorer: the checkpoint's weights
            decision = Decision("sync", p.resumed)
        weights: Ref | None = None
        version: int | None = None
        if decision.action == "wait":
            if p.waiting_since is None:
                p.waiting_since, p.waiting_for = time.monotonic(), decision.version
            return
        if decision.action == "sync":
            weights, version = p.handed_out[decision.version], decision.version
        elif decision.action == "request":
            version = p.trained + (1 if self.pending.busy("trainer", "train") else 0)
            if version > p.explorer_version:
                weights = self._hand_out(version)
            else:
                version = None
        p.waiting_since = None
        if version is not None:
            p.explorer_version = version
            self._prune_weights(version)
        p.idle_declared = False
        ref = self.actors.call("explorer", "explore_step", step, weights, version)
        self.pending[ref] = Call("explorer", "explore", step)
        if weights is not None and version is not None:
            self._start_broadcast(version)

    def _explore_partial(self, step: int) -> None:
        """``partial_rollout``: explore step ``s`` starts once train step
        ``s − 2 − sync_offset`` is done (so the explorer generates while the trainer trains
        the step before), with whatever weights the explorer holds; new weights come
        mid-step (:meth:`_sync_partial`)."""
        p = self.progress
        if step > p.trained + 2 + self.config.synchronizer.sync_offset:
            return  # the trainer's next step will let it go on
        p.waiting_since = None
        p.idle_declared = False
        ref = self.actors.call("explorer", "explore_step", step, None, None)
        self.pending[ref] = Call("explorer", "explore", step)

    def _sync_partial(self, version: int) -> None:
        """``partial_rollout``: the explorer loads the handed-out weights ``version`` now,
        in its sync thread, interrupting and resuming its engine's calls in flight."""
        p = self.progress
        if version <= p.explorer_version:
            return
        p.explorer_version = version
        ref = self.actors.call("explorer", "sync_partial", p.handed_out[version], version,
                               broadcast=True)
        self.pending[ref] = Call("explorer", "sync", version)
        self._start_broadcast(version)
        self._prune_weights(version)

    def _start_broadcast(self, version: int) -> None:
        """``sync_method: nccl``: the trainer sends snapshot ``version`` while the explorer
        receives it (in the trainer's broadcast thread, beside a train step)."""
        if not self.broadcasting:
            return
        ref = self.actors.call("trainer", "broadcast_weights", version,
                               self.config.synchronizer.sync_timeout, broadcast=True)
        self.pending[ref] = Call("trainer", "broadcast", version)

    def _schedule_trainer(self) -> None:
        p = self.progress
        step = p.trained + 1
        if (self.pending.busy("trainer", "train") or step > self.steps or p.explored < step
                or p.deferred_save is not None):  # a checkpoint of the trainer's state is due
            return
        ref = self.actors.call("trainer", "train_step", step)
        self.pending[ref] = Call("trainer", "train", step)

    def _prune_weights(self, version: int) -> None:
        """Drop handed-out weights older than what the explorer now holds."""
        for old in [v for v in self.progress.handed_out if v < version]:
            del self.progress.handed_out[old]
        if self.broadcasting:
            self.actors.call("trainer", "drop_snapshots", version)

    def _wait(self) -> None:
        """Wait for one call to finish (or the poll interval) and act on it."""
        p = self.progress
        if p.waiting_since is not None:
            waited = time.monotonic() - p.waiting_since
            if waited > self.config.synchronizer.sync_timeout:
                raise RftError(
                    f"synchronizer: explorer {self.config.explorer.name!r} waited {waited:.0f} s "
                    f"for weights version {p.waiting_for} from trainer "
                    f"{self.config.trainer.name!r} (synchronizer.sync_timeout = "
                    f"{self.config.synchronizer.sync_timeout} s); the trainer is at step "
                    f"{p.trained}")
        if not self.pending:
            raise RftError(f"both mode: nothing can run (explored {p.explored}, trained "
                           f"{p.trained}, explorer holds version {p.explorer_version})")
        for ref in self.actors.ready(list(self.pending), POLL_S):
            call = self.pending.pop(ref)
            self._done(call, self.actors.get(ref, call))

    def _done(self, call: Call, value: Any) -> None:
        p = self.progress
        if call.what == "explore":
            metrics, explorer_state = value
            p.explored = call.step
            p.explored_state[call.step] = explorer_state
            for old in [s for s in p.explored_state if s < p.trained]:
                del p.explored_state[old]
            self.lifecycle.log("explorer", metrics, call.step)
            if self.lifecycle.eval_due(call.step):
                ref = self.actors.call("explorer", "evaluate")
                self.pending[ref] = Call("explorer", "evaluate", call.step)
        elif call.what == "evaluate":
            self.lifecycle.log("explorer", value, call.step)
            self.checkpoints.after_evaluation()
        elif call.what in ("broadcast", "sync"):
            pass  # the explorer's step reports the sync
        elif call.what == "train":
            self._trained(call.step, value)

    def _trained(self, step: int, metrics: dict[str, float]) -> None:
        """Train step ``step`` is done: hand out weights when due, checkpoint when due
        (before the trainer's next step), let the explorer go on, then log the step."""
        p = self.progress
        p.trained = step
        # the buffer's counts after this step, asked before the explorer goes on
        counts = self.actors.call("buffer", "counts")
        # the step's rollout preview, asked before the trainer's next step is submitted
        preview = (self.actors.call("trainer", "rollout_examples", step)
                   if self.config.trainer.enable_preview else None)
        if self.policy.hands_out_after(step) or step == self.steps:
            if p.explored >= self.steps:  # only the final evaluation needs weights now
                p.handed_out.clear()
            p.handed_out[step] = self._hand_out(step)
        if self.partial and step in p.handed_out and p.explored < self.steps:
            self._sync_partial(step)
        saving = None
        if self.lifecycle.save_due(step) and step != p.last_saved:
            saving = self.checkpoints.save_or_defer(step)  # before the trainer's next step
        self._schedule()  # the explorer may go on at once; the bookkeeping comes after
        self._log_trained(step, metrics, counts, preview)
        if saving is not None:
            self.actors.get(saving, Call("trainer", "save", step))
            p.last_saved = step

    def _log_trained(self, step: int, metrics: dict[str, float], counts: Ref,
                     preview: Ref | None = None) -> None:
        """Log train step ``step`` with the buffer's counts (``counts``: the call counting
        them) and its rollout preview (``preview``: the call taking its rows; ``None``:
        off)."""
        counted = self.actors.get(counts, Call("buffer", "counts", step))
        self.lifecycle.log("trainer", {**metrics, "buffer/written": float(counted["written"]),
                                       "buffer/read": float(counted["read"])}, step)
        if preview is not None:
            rows = self.actors.get(preview, Call("trainer", "rollout_examples", step))
            self.lifecycle.log_table("trainer", ROLLOUT_EXAMPLES, rows, step)

    def _hand_out(self, step: int) -> Ref:
        """What the explorer loads as version ``step``: the trainer's weights
        (``sync_method: memory``), what to receive from its broadcast of a snapshot taken now
        (``nccl``) or the path of checkpoint ``global_step_<step>`` with its ``hf/`` export
        (``checkpoint``)."""
        if self.config.synchronizer.sync_method == "memory":
            return self.actors.call("trainer", "weights")
        if self.broadcasting:
            return self.actors.call("trainer", "snapshot_weights", step)
        self.progress.last_saved = step
        return self.checkpoints.start(step, final=False,
                                      buffer=self.checkpoints.buffer_state(step), export_hf=True)

    def _finish_pending(self) -> None:
        while self.pending:
            ref = next(iter(self.pending))
            call = self.pending.pop(ref)
            self._done(call, self.actors.get(ref, call))

    # ---- the end ---------------------------------------------------------------------

    def _finish(self, has_eval: bool) -> None:
        """Final evaluation on the last weights, final checkpoint with the HF model."""
        self._finish_pending()  # the explorer may still evaluate
        final = self.progress.handed_out[self.steps]
        if has_eval:
            self._evaluate_after(final)
        checkpoint_sync = self.config.synchronizer.sync_method == "checkpoint"
        if checkpoint_sync:  # handed out = saved with hf/
            self.actors.get(final, Call("trainer", "save", self.steps))
        if not checkpoint_sync or has_eval:  # (again: with the evaluation after)
            self.checkpoints.save(self.steps, final=True,
                                  buffer=self.checkpoints.buffer_state(self.steps))
        self._record_final()

    def _finish_again(self, resumed: Resumed) -> None:
        """A finished stage run again: nothing is redone or logged twice, but the
        evaluation after the last step when its final checkpoint lacks it."""
        if self.lifecycle.has_eval:
            if resumed.eval_after is not None:
                self.result.eval_after = dict(resumed.eval_after)
            else:
                self._evaluate_after(self.progress.handed_out[self.steps])
                self.checkpoints.save(self.steps, final=True,
                                      buffer=self.checkpoints.buffer_state(self.steps))
        self._record_final()

    def _evaluate_after(self, final: Ref) -> None:
        """The evaluation after the last step, on the final weights ``final``."""
        ref = self.actors.call("explorer", "evaluate", final, self.steps)
        self._start_broadcast(self.steps)
        self.result.eval_after = self.actors.get(ref, Call("explorer", "evaluate", self.steps))
        self._finish_pending()
        self.lifecycle.log("explorer", self.result.eval_after, self.steps)

    def _record_final(self) -> None:
        self.result.final_model_path = os.path.join(self.plan.job_dir,
                                                    f"global_step_{self.steps}", "hf")
        failed = self.actors.get(self.actors.call("explorer", "failed_tasks"),
                                 Call("explorer", "failed_tasks", self.steps))
        self.result.failed_tasks = len(failed)


__all__ = ["Coordinator"]
