"""Mode ``both``: explorer, trainer and experience buffer as Ray actors.

The coordinator (this module, in the launching process) owns no model. It starts the
actors, then drives them with non-blocking calls::

    explorer actor:  [sync v] explore 1 → [sync v] explore 2 → …   writes → buffer actor
    trainer actor:   train 1 → [hand out weights] → train 2 → …       reads ← buffer actor
    weights:         trainer → Ray object store → explorer (``sync_method: memory``)
                     trainer → broadcast group → explorer / replicas (``nccl``)
                     trainer → checkpoint → explorer (``checkpoint``)

- Train step ``t`` is started once explore step ``t`` is done (its data is there), so a
  waiting trainer never holds weights the explorer waits for.
- Before each explore step the sync policy (:mod:`rft.distributed.sync_policy`) says
  whether the explorer first loads handed-out weights, waits for them, or asks for them.
- When the explorer is idle (waiting, or done) the buffer is told no writer is active, so
  a batch that came out short (failed tasks) is trained as it is.
- Monitors, evaluation schedule, checkpoints and ``summary.json`` work as in colocate
  (one :class:`~rft.modes.stage.StageLifecycle` decides what is due).

Resuming (``continue_from_checkpoint``): a checkpoint of step ``t`` holds the trainer (and
its process's random generators), the explorer's state after explore step ``t`` (task
selectors, engine seed sequence, random generators, experiences written) and the
experience buffer's state when the explorer had written nothing past step ``t``. The
trainer resumes from the newest *readable* checkpoint, the buffer settles its leases with
it (``sql``: reads after ``t`` are handed out again; a redone explore step does not write
twice), the explorer gets the checkpoint's weights and state and goes on at step ``t + 1``,
and the monitors forget what was logged after ``t``. A checkpoint is written after the
evaluation due at its step, and before the trainer's next step. With ``sync_style:
fixed``, ``sync_offset: 0`` and checkpoints at sync points the resumed run is, on CPU,
the uninterrupted one bit for bit (``docs/faults.md`` says what holds otherwise).

No silent hangs: the explorer waits at most ``synchronizer.sync_timeout`` for weights, the
trainer at most ``experience_buffer.max_read_timeout`` for experiences, and a dead actor
ends the run at once with a one-line error naming it (after the trainer's last completed
step is checkpointed, when the trainer is alive).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from rft.checkpoint import check_writable
from rft.config import Stage
from rft.config.schema import RftConfig
from rft.distributed.buffer_actor import BUFFER_CONCURRENCY, BufferService
from rft.distributed.cluster import ray_cluster
from rft.distributed.placement import actor_gpus, detect_from_ray
from rft.distributed.sync_policy import SYNC_POLICIES, Decision, SyncPolicy
from rft.distributed.timeline import timeline_file
from rft.distributed.workers import ExplorerService, ResumePoint, TrainerService
from rft.errors import RftError
from rft.modes.builders import steps_over_tasks
from rft.modes.run_state import RunState, check_resumable
from rft.modes.stage import Resumed, StageLifecycle, StageResult, announce_resume
from rft.monitor.preview import ROLLOUT_EXAMPLES

log = logging.getLogger("rft.distributed")

POLL_S = 0.5
"""Seconds between checks of the explorer's sync wait while nothing completes."""

BROADCAST_GROUP = "broadcast"
"""The trainer actor's concurrency group for weight broadcasts (``sync_method: nccl``)."""


@dataclass
class Call:
    """A call in flight: which actor, what, for which step."""

    role: str
    what: str
    step: int


@dataclass
class Progress:
    """Where the run is."""

    explored: int = 0
    trained: int = 0
    explorer_version: int = 0
    resumed: int = 0
    """The checkpoint's step a resumed run went on from: the explorer syncs to it first."""
    handed_out: dict[int, Any] = field(default_factory=dict)
    """Version → object ref of the trainer's weights (newest few)."""
    explored_state: dict[int, RunState] = field(default_factory=dict)
    """Explore step → the explorer's state after it (for checkpoints)."""
    deferred_save: tuple[int, Any] | None = None
    """A checkpoint waiting for the evaluation due at its step: (step, buffer state)."""
    waiting_since: float | None = None
    waiting_for: int = 0
    idle_declared: bool = False
    last_saved: int = 0


def run_both(stage: Stage) -> StageResult:
    """Run one ``both`` stage on Ray (see the module docstring)."""
    config = stage.config
    keep, offset = config.trainer.max_checkpoints_to_keep, config.synchronizer.sync_offset
    if config.synchronizer.sync_method == "checkpoint" and keep is not None and keep < offset + 2:
        raise RftError(f"trainer.max_checkpoints_to_keep: {keep} could delete a checkpoint before "
                       f"the explorer loads it (sync_offset {offset}); keep at least {offset + 2}")
    check_writable(stage.plan.job_dir)
    check_resumable(stage.plan.job_dir, config.continue_from_checkpoint)
    with ray_cluster(config, timeline_file(stage.plan)):
        return Coordinator(stage).run()


class Coordinator:
    """Drives the actors of one ``both`` stage."""

    def __init__(self, stage: Stage) -> None:
        self.stage = stage
        self.plan = stage.plan
        self.config: RftConfig = stage.config
        s = self.config.synchronizer
        self.policy: SyncPolicy = SYNC_POLICIES[s.sync_style](s.sync_interval, s.sync_offset)
        self.progress = Progress()
        self.pending: dict[Any, Call] = {}
        self.actors: dict[str, Any] = {}
        self.lifecycle = StageLifecycle(stage, ("explorer", "trainer"),
                                        has_eval=bool(self.plan.eval_tasksets))
        self.result = self.lifecycle.result
        self.broadcasting = s.sync_method == "nccl"

    # ---- set-up ----------------------------------------------------------------------

    def _actor(self, role: str, name: str, cls: type, *args: Any, **options: Any) -> Any:
        import ray

        groups = options.pop("concurrency_groups", None)  # a class option, not a call option
        remote_cls = ray.remote(concurrency_groups=groups)(cls) if groups else ray.remote(cls)
        try:
            actor = remote_cls.options(name=name, num_cpus=0, **options).remote(*args)
        except ValueError as exc:  # a live actor of that name in this namespace
            raise RftError(f"{role} actor {name!r}: {str(exc).splitlines()[0]} (another run "
                           f"in Ray namespace {self.config.ray_namespace!r}?)") from exc
        self.actors[role] = actor
        return actor

    def _start_actors(self) -> None:
        import ray

        c = self.config
        detect_from_ray(c)  # cluster.gpu_per_node unset: from the cluster's resources
        gpus = actor_gpus(c)
        buffer = self._actor("buffer", self.plan.experience_buffer.name, BufferService,
                             self.plan.experience_buffer, self.plan.priority_fn,
                             max_concurrency=BUFFER_CONCURRENCY)
        # explorer.env_vars travel in the plan, set by the actor itself (rft.distributed.
        # actor_env): Ray's runtime_env would write their values to a world-readable log
        explorer = self._actor("explorer", c.explorer.name, ExplorerService, self.plan, buffer,
                               num_gpus=gpus.explorer)
        train_size = self._get(explorer.train_size.remote(), Call("explorer", "start-up", 0))
        steps = steps_over_tasks(c, train_size)
        if steps <= 0:
            raise RftError("buffer.total_steps: the run has no step to do (empty data or 0 "
                           "steps)")
        self.steps = self.result.steps = steps
        extra: dict[str, Any] = {}
        if self.broadcasting:  # broadcasts run beside train steps, in a thread of their own
            extra["concurrency_groups"] = {BROADCAST_GROUP: 1}
        trainer = self._actor("trainer", c.trainer.name, TrainerService, self.plan, buffer, steps,
                              num_gpus=gpus.trainer, **extra)
        placement = self._get(trainer.placement.remote(), Call("trainer", "start-up", 0))
        if placement is not None:
            print(f"rft: {placement}", file=sys.stderr, flush=True)
        ray.get(buffer.counts.remote())
        if self.broadcasting:
            self._join_weight_group(trainer, explorer)

    def _join_weight_group(self, trainer: Any, explorer: Any) -> None:
        """``sync_method: nccl``: the trainer (rank 0) and the engine holders join one group."""
        c = self.config
        world = 1 + self._get(explorer.weight_group_ranks.remote(),
                              Call("explorer", "weight-group set-up", 0))
        address = self._get(trainer.host_weight_group.remote(world, c.synchronizer.sync_timeout),
                            Call("trainer", "weight-group set-up", 0))
        joins = [(trainer.join_weight_group.remote(), Call("trainer", "weight-group set-up", 0)),
                 (explorer.join_weight_group.remote(address),
                  Call("explorer", "weight-group set-up", 0))]
        for ref, call in joins:
            self._get(ref, call)
        log.info("weight-broadcast group: %d ranks over %s at %s:%d", world, address.backend,
                 address.host, address.port)

    def _resume(self) -> Resumed:
        """Continue from the newest readable checkpoint (when continuing): the trainer, the
        buffer (leases settled, contents and counters), the explorer's state; the explorer
        loads the checkpoint's weights at its first step."""
        trainer, buffer = self.actors["trainer"], self.actors["buffer"]
        found: ResumePoint | None = self._get(trainer.resume.remote(),
                                              Call("trainer", "resume", 0))
        step = found.step if found is not None else 0
        # a durable buffer (sql) hands out again what was read after the checkpoint
        self._get(buffer.recover_leases.remote(step), Call("buffer", "resume", step))
        if found is None:
            return Resumed()
        for line in found.skipped:
            log.warning("resume: %s", line)
        state = found.state
        counters = {"written": state.experiences_written, "read": state.experiences_read}
        self._get(buffer.load_state_dict.remote(found.buffer if found.buffer is not None
                                                else counters), Call("buffer", "resume", step))
        self._get(self.actors["explorer"].restore.remote(state),
                  Call("explorer", "resume", step))
        p = self.progress
        p.explored = p.trained = p.last_saved = p.resumed = step
        p.explored_state[step] = state.explorer_part()
        # the explorer holds the initial model: its next step syncs to the checkpoint's
        # weights first, as the uninterrupted run's did (and reports it alike)
        p.handed_out[step] = self._resumed_weights(step, found.path)
        self.result.eval_before = state.eval_before
        log.info("resumed from %s", found.path)
        return Resumed(step, self.result.eval_before, initial_weights=False,
                       eval_after=state.eval_after, checkpoint=found.path)

    def _resumed_weights(self, step: int, path: str) -> Any:
        """What the resumed explorer loads first: the checkpoint itself when it holds the
        ``hf/`` export (``sync_method: checkpoint``, as handed out), a broadcast of the
        trainer's weights (``nccl``), else the trainer's weights through the object store
        (a sharded checkpoint without ``hf/`` is no engine's to read)."""
        checkpoint_sync = self.config.synchronizer.sync_method == "checkpoint"
        if checkpoint_sync and os.path.isdir(os.path.join(path, "hf")):
            return path
        if self.broadcasting:
            return self._hand_out(step)
        return self.actors["trainer"].weights.remote()

    # ---- the run ---------------------------------------------------------------------

    def run(self) -> StageResult:
        try:
            self._start_actors()
            self.lifecycle.start(self.steps)
            resumed = self._resume()
            announce_resume(self.lifecycle.label, resumed, self.steps)
            self.lifecycle.rewind(resumed.step)
            if resumed.step >= self.steps:  # a finished stage run again
                self._finish_again(resumed)
                return self.result
            if self.lifecycle.evaluates_before(resumed):
                self.result.eval_before = self._get(self.actors["explorer"].evaluate.remote(),
                                                    Call("explorer", "evaluate", 0))
                self.lifecycle.log("explorer", self.result.eval_before, 0)
            while self.progress.trained < self.steps:
                self._schedule()
                self._wait()
            self._finish(self.lifecycle.has_eval)
        except (RftError, KeyboardInterrupt):  # KeyboardInterrupt: also SIGTERM (rft.cli)
            self._save_after_failure()
            raise
        finally:
            self._close()
        return self.result

    def _schedule(self) -> None:
        """Start whatever can start now."""
        self._schedule_explorer()
        self._schedule_trainer()
        p = self.progress
        if not self._busy("explorer") and not p.idle_declared:
            self.actors["buffer"].writers_idle.remote()
            p.idle_declared = True

    def _schedule_explorer(self) -> None:
        p = self.progress
        step = p.explored + 1
        if self._busy("explorer") or step > self.steps:
            return
        decision = self.policy.before_explore(step, p.explorer_version, sorted(p.handed_out))
        if p.explorer_version < p.resumed:  # a resumed explorer: the checkpoint's weights
            decision = Decision("sync", p.resumed)
        weights, version = None, None
        if decision.action == "wait":
            if p.waiting_since is None:
                p.waiting_since, p.waiting_for = time.monotonic(), decision.version
            return
        if decision.action == "sync":
            weights, version = p.handed_out[decision.version], decision.version
        elif decision.action == "request":
            version = p.trained + (1 if self._busy("trainer", "train") else 0)
            if version > p.explorer_version:
                weights = self._hand_out(version)
            else:
                version = None
        p.waiting_since = None
        if version is not None:
            p.explorer_version = version
            self._prune_weights(version)
        p.idle_declared = False
        ref = self.actors["explorer"].explore_step.remote(step, weights, version)
        self.pending[ref] = Call("explorer", "explore", step)
        if weights is not None and version is not None:
            self._start_broadcast(version)

    def _start_broadcast(self, version: int) -> None:
        """``sync_method: nccl``: the trainer sends snapshot ``version`` while the explorer
        receives it (in the trainer's broadcast thread, beside a train step)."""
        if not self.broadcasting:
            return
        method = self.actors["trainer"].broadcast_weights
        ref = method.options(concurrency_group=BROADCAST_GROUP).remote(
            version, self.config.synchronizer.sync_timeout)
        self.pending[ref] = Call("trainer", "broadcast", version)

    def _schedule_trainer(self) -> None:
        p = self.progress
        step = p.trained + 1
        if (self._busy("trainer", "train") or step > self.steps or p.explored < step
                or p.deferred_save is not None):  # a checkpoint of the trainer's state is due
            return
        ref = self.actors["trainer"].train_step.remote(step)
        self.pending[ref] = Call("trainer", "train", step)

    def _busy(self, role: str, what: str | None = None) -> bool:
        return any(c.role == role and (what is None or c.what == what)
                   for c in self.pending.values())

    def _prune_weights(self, version: int) -> None:
        """Drop handed-out weights older than what the explorer now holds."""
        for old in [v for v in self.progress.handed_out if v < version]:
            del self.progress.handed_out[old]
        if self.broadcasting:
            self.actors["trainer"].drop_snapshots.remote(version)

    def _wait(self) -> None:
        """Wait for one call to finish (or the poll interval) and act on it."""
        import ray

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
        ready, _ = ray.wait(list(self.pending), num_returns=1, timeout=POLL_S)
        for ref in ready:
            call = self.pending.pop(ref)
            self._done(call, self._get(ref, call))

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
                ref = self.actors["explorer"].evaluate.remote()
                self.pending[ref] = Call("explorer", "evaluate", call.step)
        elif call.what == "evaluate":
            self.lifecycle.log("explorer", value, call.step)
            if p.deferred_save is not None and not self._evaluating(p.deferred_save[0]):
                step, buffer = p.deferred_save
                p.deferred_save = None
                self._save(step, final=False, buffer=buffer)
        elif call.what == "broadcast":
            pass  # the explorer's step reports the sync
        elif call.what == "train":
            p.trained = call.step
            # the buffer's counts after this step, asked before the explorer goes on
            counts = self.actors["buffer"].counts.remote()
            # the step's rollout preview, asked before the trainer's next step is submitted
            preview = (self.actors["trainer"].rollout_examples.remote(call.step)
                       if self.config.trainer.enable_preview else None)
            if self.policy.hands_out_after(call.step) or call.step == self.steps:
                if p.explored >= self.steps:  # only the final evaluation needs weights now
                    p.handed_out.clear()
                p.handed_out[call.step] = self._hand_out(call.step)
            saving = None
            if self.lifecycle.save_due(call.step) and call.step != p.last_saved:
                saving = self._save_or_defer(call.step)  # before the trainer's next step
            self._schedule()  # the explorer may go on at once; the bookkeeping comes after
            self._log_trained(call.step, value, counts, preview)
            if saving is not None:
                self._get(saving, Call("trainer", "save", call.step))
                p.last_saved = call.step

    def _log_trained(self, step: int, metrics: dict[str, float], counts: Any,
                     preview: Any = None) -> None:
        """Log train step ``step`` with the buffer's counts (``counts``: their object ref)
        and its rollout preview (``preview``: the ref of its rows; ``None``: off)."""
        counted = self._get(counts, Call("buffer", "counts", step))
        self.lifecycle.log("trainer", {**metrics, "buffer/written": float(counted["written"]),
                                       "buffer/read": float(counted["read"])}, step)
        if preview is not None:
            rows = self._get(preview, Call("trainer", "rollout_examples", step))
            self.lifecycle.log_table("trainer", ROLLOUT_EXAMPLES, rows, step)

    def _evaluating(self, step: int) -> bool:
        """An evaluation due at ``step`` (or before) is still running."""
        return any(c.what == "evaluate" and c.step <= step for c in self.pending.values())

    def _save_or_defer(self, step: int) -> Any:
        """Start the checkpoint of ``step`` (its object ref), or — while the evaluation due
        at ``step`` runs — keep it for when that ends (``None``); the trainer's next step
        waits for it (a checkpoint holds what a resumed run does not redo)."""
        buffer = self._buffer_state(step)
        if self._evaluating(step):
            self.progress.deferred_save = (step, buffer)
            return None
        return self._start_save(step, final=False, buffer=buffer)

    def _buffer_state(self, step: int) -> Any:
        """The buffer's state (an object ref, taken now) when it is the state after train
        step ``step`` with nothing written past explore step ``step``; else ``None`` (a
        checkpoint then keeps the counts only, and the resumed explorer redoes the steps
        after ``step``)."""
        import ray

        p = self.progress
        if p.explored != step or self._busy("explorer", "explore") or \
                self._busy("trainer", "train"):
            return None
        ref = self.actors["buffer"].state_dict.remote()
        ray.wait([ref])  # taken before the explorer's next step may write
        return ref

    def _hand_out(self, step: int) -> Any:
        """Object ref of what the explorer loads as version ``step``: the trainer's weights
        (``sync_method: memory``), what to receive from its broadcast of a snapshot taken now
        (``nccl``) or the path of checkpoint ``global_step_<step>`` with its ``hf/`` export
        (``checkpoint``)."""
        if self.config.synchronizer.sync_method == "memory":
            return self.actors["trainer"].weights.remote()
        if self.broadcasting:
            return self.actors["trainer"].snapshot_weights.remote(step)
        self.progress.last_saved = step
        return self._start_save(step, final=False, buffer=self._buffer_state(step),
                                export_hf=True)

    def _finish_pending(self) -> None:
        while self.pending:
            ref = next(iter(self.pending))
            call = self.pending.pop(ref)
            self._done(call, self._get(ref, call))

    def _checkpoint_state(self, step: int, *, final: bool = False) -> RunState:
        """The run state of checkpoint ``step``: the explorer's after explore step ``step``
        (or the newest before it; the trainer adds its own part), the evaluations."""
        p = self.progress
        done = [s for s in p.explored_state if s <= step]
        explored = p.explored_state[max(done)] if done else RunState()
        return dataclasses.replace(
            explored, model_version=step, eval_before=self.result.eval_before,
            eval_after=self.result.eval_after if final and self.lifecycle.has_eval else None)

    def _start_save(self, step: int, *, final: bool, buffer: Any = None,
                    export_hf: bool | None = None) -> Any:
        """Start checkpointing the trainer at ``step``, with the buffer's state ``buffer``
        (an object ref, or ``None``: the counts in ``state.json`` only); the call's object
        ref."""
        if export_hf is None:
            export_hf = final or self.config.trainer.save_hf_checkpoint == "always"
        return self.actors["trainer"].save.remote(
            step, self._checkpoint_state(step, final=final), export_hf, buffer)

    def _save(self, step: int, *, final: bool, buffer: Any = None,
              timeout: float | None = None) -> None:
        """Checkpoint the trainer at ``step`` (blocking: its result matters)."""
        ref = self._start_save(step, final=final, buffer=buffer)
        self._get(ref, Call("trainer", "save", step), timeout)
        self.progress.last_saved = step

    def _finish(self, has_eval: bool) -> None:
        """Final evaluation on the last weights, final checkpoint with the HF model."""
        self._finish_pending()  # the explorer may still evaluate
        final = self.progress.handed_out[self.steps]
        if has_eval:
            ref = self.actors["explorer"].evaluate.remote(final, self.steps)
            self._start_broadcast(self.steps)
            self.result.eval_after = self._get(ref, Call("explorer", "evaluate", self.steps))
            self._finish_pending()
            self.lifecycle.log("explorer", self.result.eval_after, self.steps)
        checkpoint_sync = self.config.synchronizer.sync_method == "checkpoint"
        if checkpoint_sync:  # handed out = saved with hf/
            self._get(final, Call("trainer", "save", self.steps))
        if not checkpoint_sync or has_eval:  # (again: with the evaluation after)
            self._save(self.steps, final=True, buffer=self._buffer_state(self.steps))
        self._record_final()

    def _finish_again(self, resumed: Resumed) -> None:
        """A finished stage run again: nothing is redone or logged twice, but the
        evaluation after the last step when its final checkpoint lacks it."""
        if self.lifecycle.has_eval:
            if resumed.eval_after is not None:
                self.result.eval_after = dict(resumed.eval_after)
            else:
                ref = self.actors["explorer"].evaluate.remote(
                    self.progress.handed_out[self.steps], self.steps)
                self._start_broadcast(self.steps)
                self.result.eval_after = self._get(ref, Call("explorer", "evaluate", self.steps))
                self._finish_pending()
                self.lifecycle.log("explorer", self.result.eval_after, self.steps)
                self._save(self.steps, final=True, buffer=self._buffer_state(self.steps))
        self._record_final()

    def _record_final(self) -> None:
        import ray

        self.result.final_model_path = os.path.join(self.plan.job_dir,
                                                    f"global_step_{self.steps}", "hf")
        failed = ray.get(self.actors["explorer"].failed_tasks.remote())
        self.result.failed_tasks = len(failed)

    # ---- failures and clean-up -------------------------------------------------------

    def _get(self, ref: Any, call: Call, timeout: float | None = None) -> Any:
        """``ray.get`` with Ray's failures turned into one-line errors naming the actor."""
        import ray
        from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError

        try:
            return ray.get(ref, timeout=timeout)
        except GetTimeoutError:
            raise RftError(f"{call.role} {self._actor_name(call.role)!r}: {call.what} "
                           f"{call.step} did not finish within {timeout:g} s") from None
        except RayTaskError as exc:  # before RayActorError: a task that failed because an
            # actor it called died raises an error of both classes (Ray's error class takes
            # its cause's); the caller is alive, the actor it called is not
            cause = exc.cause if exc.cause is not None else exc
            name = self._actor_name(call.role)
            if isinstance(cause, RayActorError):
                raise self._died(cause, call, seen_by=f"{call.role} {name!r}") from None
            raise RftError(f"{call.role} {name!r}, {call.what} {call.step}: "
                           f"{_first_line(cause)}") from None
        except RayActorError as exc:
            raise self._died(exc, call) from None

    def _died(self, exc: Exception, call: Call, seen_by: str | None = None) -> RftError:
        """The one-line error of a dead actor, naming the actor that died: the one
        ``exc`` says (by its id), else the one called."""
        refused = _refusal(exc)
        if refused is not None:  # the actor refused to start: its own line names it
            if seen_by is None:
                self.actors.pop(call.role, None)
            return RftError(refused)
        dead_id = getattr(exc, "actor_id", None)
        role = next((r for r, actor in self.actors.items()
                     if dead_id and _actor_id(actor) == dead_id), None)
        if role is None and seen_by is not None:  # an actor of its own (an engine replica)
            return RftError(f"{seen_by}, {call.what} {call.step}: a Ray actor it called "
                            f"died: {_first_line(exc)}")
        role = role or call.role
        self.actors.pop(role, None)
        where = (f"(found by {seen_by}, {call.what} {call.step})" if seen_by is not None
                 and role != call.role else f"during {call.what} {call.step}")
        return RftError(f"{role} actor {self._actor_name(role)!r} died {where}: "
                        f"{_first_line(exc)}")

    def _actor_name(self, role: str) -> str:
        c = self.config
        return {"explorer": c.explorer.name, "trainer": c.trainer.name,
                "buffer": self.plan.experience_buffer.name}[role]

    def _save_after_failure(self) -> None:
        """Keep the trainer's last completed step when the run fails (trainer alive). A
        train step in flight is waited for first (its data is in the buffer): the save
        would otherwise follow it in the trainer's queue and hold its state."""
        p = self.progress
        if "trainer" not in self.actors:
            return
        timeout = self.config.synchronizer.sync_timeout
        in_flight = [(ref, call) for ref, call in self.pending.items()
                     if call.role == "trainer" and call.what == "train"]
        self.pending.clear()
        for ref, call in in_flight:
            try:
                metrics = self._get(ref, call, timeout)
            except RftError as exc:
                log.warning("could not save the trainer's state: %s", exc)
                return
            p.trained = call.step
            try:
                self._log_trained(call.step, metrics, self.actors["buffer"].counts.remote())
            except (RftError, KeyError):  # the buffer is gone: the step without its counts
                self.lifecycle.log("trainer", metrics, call.step)
        if p.trained <= p.last_saved:
            return
        deferred = p.deferred_save
        buffer = deferred[1] if deferred is not None and deferred[0] == p.trained else None
        try:
            self._save(p.trained, final=False, buffer=buffer, timeout=timeout)
            log.warning("saved the trainer's state at step %d before stopping", p.trained)
        except RftError as exc:
            log.warning("could not save the trainer's state: %s", exc)

    def _close(self) -> None:
        import ray

        self.lifecycle.close()
        closing = [actor.close.remote() for role, actor in self.actors.items()]
        try:
            ray.wait(closing, num_returns=len(closing), timeout=60)
        except Exception:  # noqa: BLE001 (dead actors: nothing left to close)
            pass
        for actor in self.actors.values():
            ray.kill(actor)
        self.actors.clear()


def _actor_id(actor: Any) -> str | None:
    """The hex id of an actor handle (what Ray's actor errors carry)."""
    actor_id = getattr(actor, "_actor_id", None)
    return actor_id.hex() if actor_id is not None else None


def _refusal(exc: BaseException) -> str | None:
    """The message of an :class:`RftError` an actor's ``__init__`` raised (Ray keeps only
    its traceback's text, whose last line is ``rft.errors.<class>: <message>``); ``None``
    when the actor died otherwise."""
    if not getattr(exc, "actor_init_failed", False):
        return None
    lines = str(exc).strip().splitlines()
    last = lines[-1] if lines else ""
    kind, _, message = last.partition(": ")
    return message if kind.startswith("rft.errors.") and message else None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[-1] if "Traceback" in text else (text.splitlines() or [""])[0]
