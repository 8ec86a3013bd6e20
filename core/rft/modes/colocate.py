"""Mode ``colocate``: explorer and trainer in one process, taking turns (and mode ``train``
for train-only algorithms, which has no explorer but the same loop).

One step::

    explore (batch_size tasks × repeat_times) → experience buffer → sample strategy
    → trainer.train_step → engine.update_weights (model_version = step) → monitors

around which :class:`~rft.modes.stage.StageLifecycle` evaluates every ``eval_interval``
and checkpoints every ``save_interval``. A checkpoint holds all a step depends on — the
trainer, the task selectors, the experience buffer's contents and counters, the engine's
seed sequence and the random generators — so on CPU a run killed anywhere and resumed
ends with the same weights, bit for bit, as the run uninterrupted (``docs/faults.md``).
A ``train_only`` algorithm (e.g. SFT) skips exploring: the experience buffer is the
offline dataset. Evaluation still runs (on startup, every ``eval_interval``, at the end)
when eval tasksets are configured, so every stage reports held-out accuracy before and
after it.

Where the rollout engine runs is a :class:`RolloutEngines`: by default one engine in this
process (:class:`LocalEngine`), whose weights are copied from the trainer after each step;
on N devices (``trainer.ranks > 1``) one engine in each trainer rank
(:class:`rft.distributed.colocate_ranks.RankEngines`, veRL's hybrid engine). Either way an
engine that can (vLLM's sleep mode on a GPU) releases its device memory while the trainer
steps (:mod:`rft.engines.engine_sleep`), and in one process, where the engine is built
first, also while the trainer loads (:meth:`RolloutEngines.make_room`).
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Iterator
from typing import Any

from rft.buffer.factory import open_experience_buffer
from rft.buffer.sft_data import DatasetStorage
from rft.buffer.storage import ExperienceStorage, explore_step_key
from rft.checkpoint import check_writable, set_rng_state
from rft.config import Stage
from rft.errors import RftError
from rft.engines.engine import InferenceEngine
from rft.engines.engine_factory import build_engine, default_sampling
from rft.engines.engine_sleep import EngineSleep
from rft.rollout.explorer import Explorer
from rft.rollout.model_wrapper import ModelWrapper
from rft.modes.builders import (
    build_trainer,
    held_state,
    offline_storage,
    quiet_libraries,
    restore_held,
    resume_checkpoint,
    resumed_state,
    sample_step,
    save_stage_checkpoint,
    steps_over_data,
    steps_over_tasks,
)
from rft.modes.run_state import RunState, check_resumable
from rft.modes.runtime import Distributed, RolloutEngines
from rft.modes.stage import Resumed, StageLifecycle, StageResult, run_stage
from rft.monitor.preview import ROLLOUT_EXAMPLES, Previewer
from rft.monitor.rollout_record import recorder_of
from rft.synchronizer import MemorySynchronizer
from rft.trainer.base import Trainer

log = logging.getLogger("rft.modes.colocate")


class LocalEngine:
    """One engine in this process; the trainer's weights are copied into it in memory."""

    def __init__(self, engine: InferenceEngine) -> None:
        self._engine = engine
        self.sleeper = EngineSleep(engine)
        self.synchronizer: MemorySynchronizer | None = None

    @property
    def engine(self) -> InferenceEngine:
        return self._engine

    def make_room(self) -> None:
        """The engine, built first, sleeps while the trainer loads (vLLM's sleep mode)."""
        self.sleeper.sleep()

    def attach(self, trainer: Trainer) -> None:
        self.synchronizer = MemorySynchronizer(trainer, [self.sleeper])
        self.sleeper.wake()

    @contextlib.contextmanager
    def training(self) -> Iterator[None]:
        assert self.synchronizer is not None, "attach() first"
        self.synchronizer.sleep()
        yield

    def sync(self, version: int) -> dict[str, float]:
        assert self.synchronizer is not None, "attach() first"
        return self.synchronizer.sync(version)

    def close(self) -> None:
        """The engine lives as long as the process (as before)."""


class ColocateStage:
    """The :class:`~rft.modes.stage.StageBody` of mode ``colocate``."""

    def __init__(self, stage: Stage, lifecycle: StageLifecycle,
                 cleanup: contextlib.ExitStack, engines: RolloutEngines | None = None) -> None:
        plan = self.plan = stage.plan
        config = plan.config
        self.lifecycle = lifecycle
        self.explores = config.mode == "colocate" and not plan.train_only
        self.engines: RolloutEngines = engines or LocalEngine(
            build_engine(config, plan.rollout_model.engine.implementation))
        self.engine: InferenceEngine = self.engines.engine
        model = ModelWrapper(self.engine, default_sampling(config))
        self.storage: ExperienceStorage = (
            open_experience_buffer(plan.experience_buffer, plan.priority_fn) if self.explores
            else offline_storage(plan, self.engine.tokenizer))
        cleanup.callback(self.storage.close)
        self.explorer: Explorer | None = None
        if self.explores or lifecycle.has_eval:
            self.explorer = Explorer(plan, model, self.storage)
            cleanup.callback(self.explorer.close)
        steps = (steps_over_tasks(config, self.explorer.train_size)
                 if self.explores and self.explorer is not None
                 else steps_over_data(config, self.storage))
        if steps <= 0:
            raise RftError("buffer.total_steps: the run has no step to do (empty data or 0 steps)")
        self.engines.make_room()  # an engine built already sleeps while the trainer loads
        self.trainer, self.strategy = build_trainer(plan, self.storage, steps,
                                                    self.engine.tokenizer)
        cleanup.callback(self.trainer.close)
        for auxiliary in self.strategy.buffers.auxiliary.values():
            cleanup.callback(auxiliary.close)
        cleanup.callback(self.engines.close)  # before the trainer's: engines may live in its ranks
        self.engines.attach(self.trainer)
        self.steps = steps
        self.saved_step = -1
        self.saved_eval_after: dict[str, float] | None = None
        self.previewer = (Previewer(lambda: self.engine.tokenizer)
                          if config.trainer.enable_preview else None)
        monitor = config.monitor
        self.recorder = recorder_of(monitor, plan.job_dir,
                                    lambda ids: self.engine.tokenizer.decode(ids),
                                    explores=self.explores)

    def resume(self) -> Resumed:
        """Restore everything a step depends on from the newest readable checkpoint: the
        trainer, the task selectors, the experience buffer (contents and counters), the
        engine's weights and seed sequence, and the random generators (restored last, so
        that nothing done here draws from them)."""
        loaded = resume_checkpoint(self.plan, extra=("buffer",))
        # a durable buffer (sql) hands out again what was read after the checkpoint
        self.storage.recover_leases(loaded.step if loaded is not None else 0)
        if self.recorder is not None:  # the record forgets the steps that are redone
            self.recorder.rewind(loaded.step if loaded is not None else 0)
        if loaded is None:
            return Resumed()
        state = resumed_state(loaded)
        self.trainer.read_checkpoint(loaded.checkpoint.path, loaded.trainer_state)
        if self.explorer is not None:
            for selector, selector_state in zip(self.explorer.selectors, state.selectors,
                                                strict=False):
                selector.load_state_dict(selector_state)
        if isinstance(self.storage, DatasetStorage) and state.dataset is not None:
            self.storage.load_state_dict(state.dataset)
        elif loaded.extra.get("buffer") is not None:
            self.storage.load_state_dict(loaded.extra["buffer"])
        else:  # a checkpoint of an older rft: the counters only
            self.storage.load_state_dict({"written": state.experiences_written,
                                          "read": state.experiences_read})
        restore_held(self.strategy, state)
        for name, auxiliary_state in state.auxiliary_buffers.items():
            if name in self.strategy.buffers.auxiliary:
                self.strategy.buffers.auxiliary[name].load_state_dict(auxiliary_state)
        self.engines.sync(state.step)
        if state.engine_seed is not None:
            self.engine.restore_seed(state.engine_seed)
        if state.rng is not None:
            set_rng_state(state.rng)
        self.saved_step = state.step
        self.saved_eval_after = state.eval_after
        log.info("resumed from %s", loaded.checkpoint.path)
        return Resumed(state.step, state.eval_before,
                       eval_after=self.saved_eval_after, checkpoint=loaded.checkpoint.path)

    def step(self, step: int) -> None:
        if self.explores and self.explorer is not None:
            # a step redone after a crash does not write twice to a durable buffer or mirror
            with self.storage.idempotent_writes(explore_step_key(self.plan.job_dir, step)):
                metrics = self.explorer.explore_step(step)
            self.lifecycle.log("explorer", metrics, step)
            self.storage.writers_idle()  # one process: nothing more arrives before training
        self.storage.lease_reads(step)  # final once the checkpoint covering it is saved
        failed = self.explorer.failed_tasks if self.explorer is not None else []
        experiences, sample_metrics = sample_step(self.strategy, step, self.engine.model_version,
                                                  failed)
        with self.engines.training():
            metrics = {**sample_metrics, **self.trainer.train_step(experiences)}
        metrics.update(self.engines.sync(step))
        self.lifecycle.log("trainer", metrics, step)
        if self.previewer is not None:
            self.lifecycle.log_table("trainer", ROLLOUT_EXAMPLES,
                                     self.previewer.rows(experiences, step), step)
        if self.recorder is not None and self.explorer is not None:
            self.recorder.record(step, self.explorer.last_step, self.trainer.last_advantages)

    def evaluate(self) -> dict[str, float]:
        assert self.explorer is not None
        return self.explorer.evaluate()

    def save(self, step: int, *, final: bool) -> None:
        if final and step == self.saved_step and (
                self.saved_eval_after is not None or not self.lifecycle.has_eval):
            return  # a finished stage run again: its final checkpoint is there
        # the final model is always exported: the next stage and the user start from it
        always = self.plan.config.trainer.save_hf_checkpoint == "always"
        state = RunState(
            selectors=[s.state_dict() for s in self.explorer.selectors] if self.explorer else [],
            eval_before=self.lifecycle.result.eval_before,
            experiences_written=self.storage.written,
            experiences_read=self.storage.read_count,
            engine_seed=self.engine.seed_state(),
            auxiliary_buffers={name: auxiliary.state_dict() for name, auxiliary
                               in self.strategy.buffers.auxiliary.items()},
            held_experiences=held_state(self.strategy))
        if final and self.lifecycle.has_eval:
            state.eval_after = self.lifecycle.result.eval_after
        extra: dict[str, Any] = {}
        if isinstance(self.storage, DatasetStorage):
            state.dataset = self.storage.state_dict()
        else:
            extra["buffer"] = self.storage.state_dict()
        save_stage_checkpoint(self.plan, self.trainer, step, state, export_hf=final or always,
                              extra=extra)
        self.storage.commit_leases(step)
        self.saved_step = step

    def finish(self, result: StageResult) -> None:
        result.final_model_path = os.path.join(self.plan.job_dir, f"global_step_{self.steps}", "hf")
        result.failed_tasks = len(self.explorer.failed_tasks) if self.explorer is not None else 0


def run_colocate(stage: Stage,
                 engines: Callable[[], RolloutEngines] | None = None) -> StageResult:
    """Run one stage, its explorer and trainer taking turns (see the module docstring).

    :param engines: builds where the rollout engine runs; default: one engine in this
        process (:class:`LocalEngine`).
    """
    quiet_libraries()
    plan = stage.plan
    check_writable(plan.job_dir)
    check_resumable(plan.job_dir, plan.config.continue_from_checkpoint)
    return run_stage(stage, ("explorer", "trainer"), has_eval=bool(plan.eval_tasksets),
                     open_body=lambda lifecycle, cleanup: ColocateStage(
                         stage, lifecycle, cleanup, engines() if engines else None))


def run_colocate_mode(stage: Stage, runtime: Distributed) -> StageResult:
    """Mode ``colocate``: with ``trainer.ranks > 1`` and a stage that explores, an engine in
    each trainer rank on the run's cluster (``runtime``: :meth:`Distributed.rank_engines`,
    veRL's hybrid engine), else in one process (:func:`run_colocate`)."""
    plan = stage.plan
    if (plan.config.trainer.ranks or 1) <= 1 or plan.train_only:
        return run_colocate(stage)
    with runtime.cluster(stage):
        return run_colocate(stage, engines=lambda: runtime.rank_engines(plan))


__all__ = ["ColocateStage", "LocalEngine", "RolloutEngines", "run_colocate",
           "run_colocate_mode"]
