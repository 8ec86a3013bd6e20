"""``train`` mode: the trainer alone, in this process (no Ray but a shared queue's).

A ``train_only`` algorithm (SFT, DPO, …) reads the experience buffer as its dataset:
that is mode colocate's loop (:func:`rft.modes.colocate.run_colocate`). Any other algorithm reads
what an ``explore`` run of the same config writes to the ``sql`` experience buffer (or a
``queue`` shared on a Ray cluster, :mod:`rft.distributed.shared_queue`); one
step::

    read train_batch_size experiences (wait ≤ max_read_timeout, then a timeout error
    naming the buffer) → sample strategy → trainer.train_step → monitors (role "trainer")
    → every sync_interval steps: checkpoint global_step_N with the actor in hf/ (the
      explorer loads it as model version N)

The checkpoint folder is written under a temporary name and renamed when complete, so
the explorer never reads a partial one. A restarted trainer (``continue_from_checkpoint``)
resumes from the newest readable checkpoint.

**Reads are leases.** The experiences of step ``s`` are read as leases of ``s``
(:meth:`~rft.buffer.storage.ExperienceStorage.lease_reads`); they become final when the
checkpoint covering ``s`` is saved. A trainer killed between a read and its next
checkpoint loses nothing: restarted, it resumes from its newest checkpoint ``N`` and the
buffer hands out the experiences of steps after ``N`` again, in the same order, so the
restarted trainer redoes exactly those steps and saves ``N + 1`` … — the checkpoints an
explorer waiting with ``wait_for_checkpoint`` expects.
"""

from __future__ import annotations

import contextlib
import logging
import os

from rft.buffer.factory import BufferOpener, open_experience_buffer
from rft.buffer.taskset import read_rows
from rft.chat_template import load_tokenizer
from rft.checkpoint import check_writable, set_rng_state
from rft.config import Stage
from rft.config.schema import RftConfig
from rft.errors import RftError
from rft.modes.builders import (
    build_trainer,
    held_state,
    quiet_libraries,
    restore_held,
    resume_checkpoint,
    resumed_state,
    save_stage_checkpoint,
    steps_over_tasks,
)
from rft.modes.colocate import run_colocate
from rft.modes.run_state import RunState, check_resumable
from rft.modes.runtime import Distributed
from rft.modes.stage import Resumed, StageLifecycle, StageResult, run_stage
from rft.monitor.preview import ROLLOUT_EXAMPLES, Previewer

log = logging.getLogger("rft.modes.train")


def run_train(stage: Stage, open_buffer: BufferOpener | None = None) -> StageResult:
    """The trainer of one stage: offline for train-only algorithms, else fed by an explorer
    process (see the module docstring) through the buffer ``open_buffer`` opens (default:
    the storage the config selects)."""
    if stage.plan.train_only:
        return run_colocate(stage)
    return run_trainer_alone(stage, open_buffer)


def trainer_total_steps(config: RftConfig) -> int:
    """``trainer.total_steps``, else ``buffer.total_steps``, else ``total_epochs`` passes
    over the training tasksets the explorer draws from."""
    fixed = config.trainer.total_steps or config.buffer.total_steps
    if fixed:
        return fixed
    ei = config.buffer.explorer_input
    tasksets = ([ei.taskset] if ei.taskset is not None else []) + list(ei.tasksets)
    if not tasksets:
        raise RftError("buffer.total_steps: mode 'train' cannot tell how many steps to train: "
                       "set it (or trainer.total_steps), or give the explorer's taskset")
    return steps_over_tasks(config, sum(len(read_rows(t)) for t in tasksets))


class TrainAloneStage:
    """The :class:`~rft.modes.stage.StageBody` of mode ``train`` fed by an explorer
    process: checkpoints at every sync point carry the weights to it."""

    def __init__(self, stage: Stage, lifecycle: StageLifecycle,
                 cleanup: contextlib.ExitStack, open_buffer: BufferOpener | None = None) -> None:
        self.plan = stage.plan
        self.lifecycle = lifecycle
        self.steps = trainer_total_steps(self.plan.config)
        self.storage = (open_buffer(self.plan) if open_buffer is not None else
                        open_experience_buffer(self.plan.experience_buffer, self.plan.priority_fn))
        cleanup.callback(self.storage.close)
        self.trainer, self.strategy = build_trainer(self.plan, self.storage, self.steps)
        cleanup.callback(self.trainer.close)
        self.version = self.read_before = self.last_saved = 0
        config = self.plan.config
        self.previewer = (Previewer(lambda: load_tokenizer(config))
                          if config.trainer.enable_preview else None)

    def resume(self) -> Resumed:
        """Resume from the newest readable checkpoint (step 0: none) and settle the buffer's
        leases with it: reads it covers become final, later ones go back to the buffer and
        are read again, in the same order (see the module docstring)."""
        loaded = resume_checkpoint(self.plan)
        step = 0
        if loaded is not None:
            state = resumed_state(loaded)
            self.trainer.read_checkpoint(loaded.checkpoint.path, loaded.trainer_state)
            step = self.version = self.last_saved = state.step
            self.read_before = state.experiences_read
            restore_held(self.strategy, state)
            if state.rng is not None:
                set_rng_state(state.rng)
            log.info("resumed from %s", loaded.checkpoint.path)
        _, returned = self.storage.recover_leases(step)
        if returned:
            log.warning("experience buffer %r: %d experience(s) read after global_step_%d "
                        "by a trainer that stopped are read again", self.storage.name,
                        returned, step)
        return Resumed(step, checkpoint=loaded.checkpoint.path if loaded is not None else None)

    def step(self, step: int) -> None:
        self.storage.lease_reads(step)
        experiences, metrics = self.strategy.sample(step, self.version)
        metrics = {**metrics, **self.trainer.train_step(experiences)}
        sync_due = step % self.plan.config.synchronizer.sync_interval == 0 or step == self.steps
        if sync_due:
            metrics["sync/model_version"] = float(step)
        # logged before the checkpoint: a crash in between leaves a line that the resumed
        # run drops (monitors rewind) and logs again, so each step is recorded once
        self.lifecycle.log("trainer", metrics, step)
        if self.previewer is not None:
            self.lifecycle.log_table("trainer", ROLLOUT_EXAMPLES,
                                     self.previewer.rows(experiences, step), step)
        if sync_due or self.lifecycle.save_due(step):
            self._save(step, export_hf=sync_due)
            if sync_due:
                self.version = step

    def _save(self, step: int, *, export_hf: bool) -> None:
        always_hf = self.plan.config.trainer.save_hf_checkpoint == "always"
        save_stage_checkpoint(self.plan, self.trainer, step,
                              RunState(experiences_read=self.read_before + self.storage.read_count,
                                       held_experiences=held_state(self.strategy)),
                              export_hf=export_hf or always_hf)
        self.storage.commit_leases(step)  # the checkpoint covers the reads of steps <= step
        self.last_saved = step

    def evaluate(self) -> dict[str, float]:
        raise RftError("mode 'train' has no explorer to evaluate with")

    def save(self, step: int, *, final: bool) -> None:
        if step != self.last_saved:  # sync points already saved in step()
            self._save(step, export_hf=final)

    def finish(self, result: StageResult) -> None:
        result.final_model_path = os.path.join(self.plan.job_dir, f"global_step_{self.steps}", "hf")


def run_trainer_alone(stage: Stage, open_buffer: BufferOpener | None = None) -> StageResult:
    """Train on experiences written by another process (see the module docstring)."""
    quiet_libraries()
    check_writable(stage.plan.job_dir)
    check_resumable(stage.plan.job_dir, stage.plan.config.continue_from_checkpoint)
    return run_stage(stage, ("trainer",), has_eval=False,
                     open_body=lambda lifecycle, cleanup: TrainAloneStage(
                         stage, lifecycle, cleanup, open_buffer))


def run_train_mode(stage: Stage, runtime: Distributed) -> StageResult:
    """Mode ``train``: :func:`run_train`, over the queue an explore process writes when the
    stage reads one (``runtime``: :meth:`Distributed.run_sharing_queue`)."""
    if runtime.shares_queue(stage.config, stage.plan.train_only):
        return runtime.run_sharing_queue(stage, "trainer",
                                         lambda open_buffer: run_train(stage, open_buffer))
    return run_train(stage)
