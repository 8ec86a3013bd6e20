"""``explore`` mode: the explorer alone, in this process (with
``explorer.rollout_model.engine_num > 1`` its engines are actors on the run's cluster,
made by the runtime :func:`run_explore_mode` is handed; on Ray:
:mod:`rft.distributed.explore_engines`).

One step::

    [sync point: load the trainer's newest checkpoint — waiting for a newer one with
     synchronizer.wait_for_checkpoint] → explore (batch_size tasks × repeat_times)
    → experience buffer (sql / file / a queue shared on Ray) → monitors (role "explorer")
    → rollout record every monitor.rollout_record_every-th step → eval every eval_interval

Sync points are the steps ``s`` with ``s − 1 − sync_offset`` a positive multiple of
``sync_interval``: the explorer runs ``sync_offset`` steps ahead of the trainer; with
``wait_for_checkpoint`` it loads exactly ``global_step_<s − 1 − sync_offset>``. Each
experience carries the model version (checkpoint step) that sampled it. After every
step ``<job dir>/explorer_state.json`` records the step, the task selectors, the model
version, the engine's seed, the random generators and the counts, so a restarted
explorer (``continue_from_checkpoint``) goes on where it stopped; a step redone after a
crash that had already written its experiences does not write them again (keyed writes,
:meth:`~rft.buffer.storage.ExperienceStorage.idempotent_writes`).

A remote engine (``external``: a model behind an OpenAI-compatible server) takes no
weights: there are no sync points, the hosted model is explored as it is served (model
version 0), e.g. to evaluate it on rft's tasksets and keep its rollouts.
"""

from __future__ import annotations

import contextlib
import logging
import os

from rft.buffer.factory import BufferOpener, open_experience_buffer
from rft.buffer.storage import ExperienceStorage, explore_step_key
from rft.checkpoint import check_writable, rng_state, set_rng_state
from rft.config import Stage
from rft.config.schema import RftConfig
from rft.rollout.auxiliary import AuxiliaryEngineBuilder, one_engine
from rft.engines.engine_factory import build_engine, default_sampling
from rft.rollout.explorer import Explorer
from rft.rollout.model_wrapper import ModelWrapper
from rft.modes.builders import quiet_libraries, steps_over_tasks
from rft.modes.checkpoint_sync import CheckpointSynchronizer
from rft.modes.run_state import EXPLORER_STATE_FILE, RunState, check_resumable
from rft.modes.runtime import Distributed, EngineBuilder
from rft.modes.stage import Resumed, StageLifecycle, StageResult, run_stage
from rft.monitor.rollout_record import recorder_of

log = logging.getLogger("rft.modes.explore")

STATE_FILE = EXPLORER_STATE_FILE
"""The explorer's progress (a :class:`~rft.modes.run_state.RunState`), in the job dir."""


def read_progress(job_dir: str) -> RunState | None:
    """The explorer's saved progress, ``None`` when there is none.

    :raises RftError: a corrupt file, or one of a layout this rft does not read (one line
        naming it).
    """
    return RunState.read(os.path.join(job_dir, STATE_FILE), "explorer state")


def is_sync_step(step: int, config: RftConfig) -> bool:
    """Whether the explorer loads weights before ``step`` (see the module docstring)."""
    s = config.synchronizer
    done = step - 1 - s.sync_offset
    return done > 0 and done % s.sync_interval == 0


class ExploreStage:
    """The :class:`~rft.modes.stage.StageBody` of mode ``explore``: progress goes to
    ``explorer_state.json`` after every step; no checkpoint is written."""

    def __init__(self, stage: Stage, lifecycle: StageLifecycle,
                 cleanup: contextlib.ExitStack, build: EngineBuilder = build_engine,
                 open_buffer: BufferOpener | None = None,
                 auxiliary_build: AuxiliaryEngineBuilder = one_engine) -> None:
        plan = self.plan = stage.plan
        config = plan.config
        self.lifecycle = lifecycle
        self.engine = build(config, plan.rollout_model.engine.implementation)
        close = getattr(self.engine, "close", None)
        if close is not None:  # last: the explorer (closed before it) may still call it
            cleanup.callback(close)
        self.storage: ExperienceStorage = (
            open_buffer(plan) if open_buffer is not None
            else open_experience_buffer(plan.experience_buffer, plan.priority_fn))
        cleanup.callback(self.storage.close)
        self.explorer = Explorer(plan, ModelWrapper(self.engine, default_sampling(config)),
                                 self.storage, auxiliary_build)
        cleanup.callback(self.explorer.close)
        # a remote engine (external) takes no weights: it is explored as it is served
        self.takes_weights = not self.engine.remote
        self.sync = CheckpointSynchronizer(plan.job_dir, [self.engine],
                                           timeout=config.synchronizer.sync_timeout)
        self.steps = steps_over_tasks(config, self.explorer.train_size)
        self.progress = RunState()
        # no trainer here: a sample's advantage is the explorer's, or "computed by the trainer"
        self.recorder = recorder_of(config.monitor, plan.job_dir,
                                    lambda ids: self.engine.tokenizer.decode(ids))

    def resume(self) -> Resumed:
        """Go on after the last step recorded in ``explorer_state.json``: its selectors, its
        engine seed and random generators, and the very checkpoint it sampled with (the
        newest one when starting afresh, as a trainer may be ahead)."""
        if self.plan.config.continue_from_checkpoint:
            self.progress = read_progress(self.plan.job_dir) or self.progress
        progress = self.progress
        if self.recorder is not None:  # the record forgets the steps that are redone
            self.recorder.rewind(progress.step)
        for selector, state in zip(self.explorer.selectors, progress.selectors,
                                   strict=False):
            selector.load_state_dict(state)
        if self.takes_weights and progress.step > 0:
            self.sync.load_step(progress.model_version)
        elif self.takes_weights:
            self.sync.load_newest()  # a trainer that is ahead
        if self.sync.loaded is not None:
            log.info("explorer starts from %s", self.sync.loaded.path)
        if progress.engine_seed is not None:
            self.engine.restore_seed(progress.engine_seed)
        if progress.rng is not None:
            set_rng_state(progress.rng)
        return Resumed(progress.step, progress.eval_before,
                       initial_weights=self.sync.version == 0, eval_after=progress.eval_after,
                       checkpoint=self.plan.job_dir if progress.step > 0 else None)

    def step(self, step: int) -> None:
        config, progress = self.plan.config, self.progress
        metrics: dict[str, float] = {}
        if self.takes_weights and is_sync_step(step, config):
            if config.synchronizer.wait_for_checkpoint:
                metrics.update(self.sync.wait_for(step - 1 - config.synchronizer.sync_offset))
            else:
                metrics.update(self.sync.load_newest())
        written_before = self.storage.written
        # a step redone after a crash finds its experiences already written: not twice
        with self.storage.idempotent_writes(explore_step_key(self.plan.job_dir, step)):
            metrics.update(self.explorer.explore_step(step))
        if self.recorder is not None:
            self.recorder.record(step, self.explorer.last_step)
        metrics["sync/model_version"] = float(self.sync.version)
        progress.step, progress.model_version = step, self.sync.version
        progress.selectors = [s.state_dict() for s in self.explorer.selectors]
        progress.experiences_written += self.storage.written - written_before
        progress.eval_before = self.lifecycle.result.eval_before
        # logged before the progress is recorded: a crash in between leaves a line that the
        # resumed run drops (monitors rewind) and logs again
        self.lifecycle.log("explorer", metrics, step)
        self._write_progress()

    def _write_progress(self) -> None:
        self.progress.engine_seed = self.engine.seed_state()
        self.progress.rng = rng_state()
        self.progress.write(os.path.join(self.plan.job_dir, STATE_FILE))

    def evaluate(self) -> dict[str, float]:
        return self.explorer.evaluate()

    def save(self, step: int, *, final: bool) -> None:
        """Nothing but the evaluation after the last step: the explorer's progress is
        written after every step."""
        if final and self.lifecycle.has_eval and self.progress.eval_after is None:
            self.progress.eval_after = self.lifecycle.result.eval_after
            self._write_progress()

    def finish(self, result: StageResult) -> None:
        result.failed_tasks = len(self.explorer.failed_tasks)
        result.final_model_path = _model_path(self.plan.config, self.sync)


def run_explore(stage: Stage, build: EngineBuilder = build_engine,
                open_buffer: BufferOpener | None = None,
                auxiliary_build: AuxiliaryEngineBuilder = one_engine) -> StageResult:
    """Run the explorer of one stage in this process (see the module docstring), its
    rollout engine made by ``build`` (default: one engine in this process;
    :func:`run_explore_mode` passes the runtime's pool of engine actors for
    ``engine_num > 1``, and ``auxiliary_build`` for auxiliary models' ``engine_num > 1``),
    its experience buffer opened by ``open_buffer`` (default: the storage the config
    selects; the runtime's shared queue passes its own)."""
    quiet_libraries()
    check_writable(stage.plan.job_dir)
    check_resumable(stage.plan.job_dir, stage.plan.config.continue_from_checkpoint,
                    explorer_file=True)
    return run_stage(stage, ("explorer",), has_eval=bool(stage.plan.eval_tasksets),
                     open_body=lambda lifecycle, cleanup: ExploreStage(
                         stage, lifecycle, cleanup, build, open_buffer, auxiliary_build))


def run_explore_mode(stage: Stage, runtime: Distributed) -> StageResult:
    """Mode ``explore``: one engine in this process, or with ``engine_num > 1`` a pool of
    engine actors on the run's cluster (``runtime``; the same for each auxiliary model with
    ``engine_num > 1``); over a ``queue``, the queue shared with the train process."""
    config = stage.config
    pooled = config.explorer.rollout_model.engine_num > 1
    auxiliary_pooled = any(aux.engine_num > 1 for aux in config.explorer.auxiliary_models)
    build = runtime.engine_pool(config) if pooled else build_engine
    auxiliary_build = runtime.auxiliary_pools(config) if auxiliary_pooled else one_engine
    if runtime.shares_queue(config):
        return runtime.run_sharing_queue(stage, "explorer", lambda open_buffer: run_explore(
            stage, build, open_buffer, auxiliary_build))
    if not pooled and not auxiliary_pooled:
        return run_explore(stage)
    with runtime.cluster(stage):
        stage = runtime.detect_resources(stage)
        return run_explore(stage, build, auxiliary_build=auxiliary_build)


def _model_path(config: RftConfig, sync: CheckpointSynchronizer) -> str | None:
    """The weights the explorer ended with: the loaded checkpoint's ``hf/``, else the
    configured model."""
    if sync.loaded is not None:
        hf = os.path.join(sync.loaded.path, "hf")
        return hf if os.path.isdir(hf) else None
    return config.explorer.rollout_model.model_path or config.model.model_path
