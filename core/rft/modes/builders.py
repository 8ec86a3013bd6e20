"""What several modes build from a run plan: monitors, the trainer and its sample
strategy, the offline dataset of a train-only stage, step counts, checkpoints."""

from __future__ import annotations

import dataclasses
import math
import os
from typing import Any

from rft.buffer.offline import dataset_experiences, row_format
from rft.buffer.retry import storage_retry
from rft.buffer.sampling import SampleStrategy, TrainerBuffers
from rft.buffer.sft_data import DatasetStorage
from rft.buffer.staleness import gate_strategy
from rft.buffer.streaming import assembler_of, stream_strategy
from rft.buffer.storage import BufferEmpty, ExperienceStorage, open_storage
from rft.chat_template import load_tokenizer
from rft.checkpoint import (
    LoadedCheckpoint,
    newest_readable_checkpoint,
    rng_state,
    save_checkpoint,
)
from rft.config.plan import RunPlan
from rft.config.schema import RftConfig
from rft.errors import RftError
from rft.experience import Experience
from rft.modes.run_state import RunState
from rft.monitor.base import Monitor
from rft.trainer.base import Trainer
from rft.trainer.ranks import RankedTrainer


def quiet_libraries() -> None:
    """No per-call progress bars from transformers / datasets in the run's output."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()


def monitor_dir(plan: RunPlan) -> str:
    """``<job dir>/monitor``: where file-writing monitors put their files."""
    return os.path.join(plan.job_dir, "monitor")


def open_monitors(plan: RunPlan, role: str) -> list[Monitor]:
    """The configured monitor for ``role`` plus the console (always on)."""
    config, chosen = plan.config, plan.monitor
    log_dir = monitor_dir(plan)
    monitors = [chosen.implementation(config.project, config.name, role, log_dir, chosen.args)]
    if chosen.name != plan.console.name:
        monitors.append(plan.console.implementation(config.project, config.name, role, log_dir))
    return monitors


def offline_storage(plan: RunPlan, tokenizer: Any) -> DatasetStorage:
    """The experience buffer of a train-only stage: the dataset rows as experiences (SFT
    rows, or preference pairs for a ``dpo`` preset; :mod:`rft.buffer.offline`)."""
    config, buffer = plan.config, plan.experience_buffer
    where = f"experience buffer {buffer.name!r} ({buffer.path})"
    experiences = dataset_experiences(buffer, tokenizer,
                                      row_format(plan.preset.experience_format), where)
    epochs = config.buffer.total_epochs
    fixed_steps = config.trainer.total_steps or config.buffer.total_steps
    if fixed_steps:  # total steps win over epochs: pass over the data as often as needed
        needed = fixed_steps * (config.buffer.train_batch_size or 1)
        epochs = math.ceil(needed / len(experiences))
    return DatasetStorage(buffer.name, experiences, epochs)


def open_auxiliary_buffers(plan: RunPlan, steps: int, tokenizer: Any = None
                           ) -> dict[str, ExperienceStorage]:
    """``buffer.trainer_input.auxiliary_buffers`` by name, for the sample strategy
    (:class:`~rft.buffer.sampling.TrainerBuffers`): a ``file`` buffer is a dataset of SFT
    rows (its ``format``; expert data for ``mix``) served ``total_epochs`` times, unset: as
    often as ``steps`` full batches need; a ``sql`` buffer holds experiences another run
    wrote. ``tokenizer``: the policy's (loaded from the model when ``None`` and needed)."""
    config = plan.config
    opened: dict[str, ExperienceStorage] = {}
    for name, cfg in config.buffer.trainer_input.auxiliary_buffers.items():
        if cfg.storage_type != "file":
            opened[name] = open_storage(cfg.storage_type, cfg.name or name, cfg.path,
                                        storage_retry(cfg.max_retry_times, cfg.max_retry_interval))
            continue
        if tokenizer is None:
            tokenizer = load_tokenizer(config)
        where = f"buffer.trainer_input.auxiliary_buffers.{name} ({cfg.path})"
        experiences = dataset_experiences(cfg, tokenizer, "sft", where)
        epochs = cfg.total_epochs or math.ceil(
            max(1, steps) * (config.buffer.train_batch_size or 1) / len(experiences))
        opened[name] = DatasetStorage(cfg.name or name, experiences, epochs)
    return opened


def steps_over_tasks(config: RftConfig, tasks: int) -> int:
    """``trainer.total_steps``, else ``buffer.total_steps``, else
    ``total_epochs × ⌈tasks / batch_size⌉`` (explore steps over ``tasks`` training tasks)."""
    return (config.trainer.total_steps or config.buffer.total_steps
            or config.buffer.total_epochs * math.ceil(tasks / config.buffer.batch_size))


def steps_over_data(config: RftConfig, storage: ExperienceStorage) -> int:
    """``trainer.total_steps``, else ``buffer.total_steps``, else one pass over what the
    (offline) experience buffer holds."""
    return (config.trainer.total_steps or config.buffer.total_steps
            or storage.available() // (config.buffer.train_batch_size or 1))


def build_trainer(plan: RunPlan, storage: ExperienceStorage, steps: int,
                  tokenizer: Any = None) -> tuple[Trainer, SampleStrategy]:
    """The stage's trainer (for ``steps`` steps) and the sample strategy feeding it from
    ``storage`` (the experience buffer) and the auxiliary buffers
    (:func:`open_auxiliary_buffers`; ``tokenizer`` reads their rows)."""
    auxiliary = open_auxiliary_buffers(plan, steps, tokenizer)
    trainer = plan.trainer.implementation(plan.trainer_plan(steps))
    chosen = plan.sample_strategy
    strategy = chosen.implementation(TrainerBuffers(storage, auxiliary),
                                     batch_size=plan.train_batch_size,
                                     timeout=plan.experience_buffer.max_read_timeout,
                                     args=chosen.args)
    sync = plan.config.synchronizer
    group = (plan.config.algorithm.repeat_times or 1) if sync.streaming_batches else None
    return trainer, gate_strategy(stream_strategy(strategy, group), sync.max_staleness)


def held_state(strategy: SampleStrategy) -> list[dict[str, Any]]:
    """What a checkpoint keeps of the experiences ``strategy`` holds back in incomplete
    groups (``synchronizer.streaming_batches``; empty without)."""
    assembler = assembler_of(strategy)
    return assembler.state() if assembler is not None else []


def restore_held(strategy: SampleStrategy, state: RunState) -> None:
    """Give ``strategy`` back the held-back experiences of a resumed checkpoint."""
    assembler = assembler_of(strategy)
    if assembler is not None:
        assembler.load(state.held_experiences)


def sample_step(strategy: SampleStrategy, step: int, model_version: int,
                failed_tasks: list[str]) -> tuple[list[Experience], dict[str, float]]:
    """The step's training batch; when the explorer produced nothing because its tasks
    failed (``failed_tasks``), a one-line error that says so."""
    try:
        return strategy.sample(step, model_version)
    except BufferEmpty as exc:
        if failed_tasks:
            raise RftError(f"step {step}: no experiences to train on; "
                           f"{len(failed_tasks)} task(s) failed so far, the last: "
                           f"{failed_tasks[-1]}") from exc
        raise


def save_stage_checkpoint(plan: RunPlan, trainer: Trainer, step: int, state: RunState, *,
                          export_hf: bool, extra: dict[str, Any] | None = None) -> str:
    """Write ``global_step_<step>`` of the stage's job dir with ``state`` as its
    ``state.json`` (its ``step`` and ``model_version`` set to ``step``, its ``rng`` to this
    process's random generators), the actor exported to ``hf/`` when
    ``export_hf``; prune to ``trainer.max_checkpoints_to_keep``; return its path.
    ``extra``: more objects saved as ``<name>.pt``. The trainer writes its part with
    :meth:`~rft.trainer.base.Trainer.write_checkpoint` (``trainer.pt``, and the files of a
    backend with its own layout). A sharded trainer
    (:class:`~rft.trainer.ranks.RankedTrainer`, any mode) writes sharded
    (``trainer_sharded/``, every rank its shards; ``trainer.pt`` a marker)."""
    config = plan.config
    written = dataclasses.replace(state, step=step, model_version=step, rng=rng_state())
    if isinstance(trainer, RankedTrainer):
        return _save_sharded_stage_checkpoint(plan, trainer, step, written.to_dict(),
                                              export_hf=export_hf, extra=extra)
    save_hf = (lambda path: save_hf_model(config, trainer, path)) if export_hf else None
    return save_checkpoint(plan.job_dir, step, trainer.write_checkpoint, written.to_dict(),
                           max_to_keep=config.trainer.max_checkpoints_to_keep, save_hf=save_hf,
                           extra=extra)


def _save_sharded_stage_checkpoint(plan: RunPlan, trainer: RankedTrainer, step: int,
                                   state: dict[str, Any], *, export_hf: bool,
                                   extra: dict[str, Any] | None = None) -> str:
    """``global_step_<step>`` of a sharded trainer, through :func:`rft.checkpoint.
    save_checkpoint` (atomic: written as ``….partial`` and renamed when complete):
    ``trainer.pt`` holds a marker, the ranks write ``trainer_sharded/`` (DCP) into the
    temporary folder, and the Hugging Face export goes to ``hf/`` when asked."""
    from rft.trainer.sharded_checkpoint import SHARDED_DIR, sharded_marker

    config = plan.config
    final = os.path.join(plan.job_dir, f"global_step_{step}")

    def write(hf_path: str) -> None:  # called with <partial folder>/hf
        trainer.save_sharded(os.path.join(os.path.dirname(hf_path), SHARDED_DIR))
        if export_hf:
            save_hf_model(config, trainer, hf_path)

    marker = sharded_marker(final, trainer.world_size, trainer.global_steps)
    return save_checkpoint(plan.job_dir, step, marker, state,
                           max_to_keep=config.trainer.max_checkpoints_to_keep, save_hf=write,
                           extra=extra)


def resume_checkpoint(plan: RunPlan, extra: tuple[str, ...] = ()) -> LoadedCheckpoint | None:
    """The checkpoint a stage resumes from: the newest readable one of its job dir when
    ``continue_from_checkpoint`` (newer unreadable ones are skipped with a warning), else
    ``None``."""
    if not plan.config.continue_from_checkpoint:
        return None
    return newest_readable_checkpoint(plan.job_dir, extra)


def resumed_state(loaded: LoadedCheckpoint) -> RunState:
    """The run state of a checkpoint read to resume from (its ``state.json``).

    :raises RftError: written by a layout this rft does not read (one line naming it).
    """
    return RunState.from_dict(loaded.state, os.path.join(loaded.checkpoint.path, "state.json"))


def save_hf_model(config: RftConfig, trainer: Trainer, path: str) -> None:
    """The Hugging Face model folder *with its tokenizer* (the next stage loads both) and,
    for a vision-language model, its processor files."""
    from transformers import AutoTokenizer

    from rft.multimodal.processor import copy_processor_files

    trainer.save_pretrained(path)
    AutoTokenizer.from_pretrained(config.model.model_path,
                                  trust_remote_code=config.model.trust_remote_code
                                  ).save_pretrained(path)
    copy_processor_files(config.model.model_path, path)


__all__ = ["build_trainer", "monitor_dir", "offline_storage",
           "open_auxiliary_buffers", "open_monitors",
           "quiet_libraries", "resume_checkpoint", "resumed_state", "sample_step",
           "save_hf_model", "save_stage_checkpoint", "steps_over_data", "steps_over_tasks"]
