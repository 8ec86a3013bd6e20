"""``train`` mode: the trainer alone, in this process (no Ray).

A ``train_only`` algorithm (SFT, DPO, …) reads the experience buffer as its dataset:
that is the embedded run (:func:`rft.embedded.run_embedded`). Any other algorithm reads
what an ``explore`` run of the same config writes to the ``sql`` experience buffer; one
step::

    read train_batch_size experiences (wait ≤ max_read_timeout, then a timeout error
    naming the buffer) → sample strategy → trainer.train_step → monitors (role "trainer")
    → every sync_interval steps: checkpoint global_step_N with the actor in hf/ (the
      explorer loads it as model version N)

The checkpoint folder is written under a temporary name and renamed when complete, so
the explorer never reads a partial one. A restarted trainer (``continue_from_checkpoint``)
resumes from the newest checkpoint; the buffer remembers which experiences were read.
"""

from __future__ import annotations

import logging
import os
import time

from rft.buffer.factory import open_experience_buffer
from rft.buffer.taskset import read_rows
from rft.checkpoint import check_writable, list_checkpoints, load_checkpoint
from rft.config import Stage
from rft.config.schema import ExperienceBufferConfig, RftConfig
from rft.embedded import (
    StageResult,
    build_trainer,
    close_monitors,
    log_all,
    open_monitors,
    quiet_libraries,
    run_embedded,
    save_stage_checkpoint,
    steps_over_tasks,
)
from rft.errors import RftError
from rft.monitor.base import Monitor
from rft.trainer.base import Trainer

log = logging.getLogger("rft.modes.train")


def run_train(stage: Stage) -> StageResult:
    """The trainer of one stage: offline for train-only algorithms, else fed by an explorer
    process (see the module docstring)."""
    preset = stage.validation.preset
    if preset is not None and preset.train_only:
        return run_embedded(stage)
    return run_trainer_alone(stage)


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


def run_trainer_alone(stage: Stage) -> StageResult:
    """Train on experiences written by another process (see the module docstring)."""
    quiet_libraries()
    started = time.monotonic()
    config, validation = stage.config, stage.validation
    job_dir = config.checkpoint_job_dir or "."
    check_writable(job_dir)
    buffer_cfg = config.buffer.trainer_input.experience_buffer or ExperienceBufferConfig()
    steps = trainer_total_steps(config)
    storage = open_experience_buffer(buffer_cfg)
    trainer: Trainer | None = None
    monitors: list[Monitor] = []
    try:  # whatever set-up opened is closed again, however it ends
        trainer, strategy = build_trainer(config, validation, storage, steps)
        monitors = open_monitors(stage, "trainer")
        for monitor in monitors:
            monitor.start(steps)
        result = StageResult(stage.name, steps)
        first_step, version, read_before = 1, 0, 0
        checkpoints = list_checkpoints(job_dir) if config.continue_from_checkpoint else []
        if checkpoints:
            trainer_state, state = load_checkpoint(checkpoints[-1])
            trainer.load_state_dict(trainer_state)
            first_step, version = state["step"] + 1, state["step"]
            read_before = int(state.get("experiences_read", 0))
            log.info("resumed from %s", checkpoints[-1].path)
        interval = config.synchronizer.sync_interval
        save_interval = config.trainer.save_interval
        always_hf = config.trainer.save_hf_checkpoint == "always"
        for step in range(first_step, steps + 1):
            experiences, metrics = strategy.sample(step, version)
            metrics = {**metrics, **trainer.train_step(experiences)}
            sync_due = step % interval == 0 or step == steps
            if sync_due or (save_interval and step % save_interval == 0):
                saving = time.monotonic()
                save_stage_checkpoint(stage, trainer, step,
                                      {"experiences_read": read_before + storage.read_count},
                                      export_hf=sync_due or always_hf)
                metrics["timing_s/save_checkpoint"] = time.monotonic() - saving
                if sync_due:
                    version = step
                    metrics["sync/model_version"] = float(version)
            log_all(monitors, metrics, step)
        result.final_model_path = os.path.join(job_dir, f"global_step_{steps}", "hf")
    finally:
        close_monitors(monitors)
        storage.close()
        if trainer is not None:
            trainer.close()
    result.seconds = time.monotonic() - started
    return result
