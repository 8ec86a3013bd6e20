"""The embedded run: explorer and trainer in one process (modes ``colocate`` and, for
train-only algorithms, ``train``).

One step of ``colocate``::

    explore (batch_size tasks × repeat_times) → experience buffer → sample strategy
    → trainer.train_step → engine.update_weights (model_version = step) → monitors
    → evaluation every eval_interval → checkpoint every save_interval

A ``train_only`` algorithm (e.g. SFT, in ``colocate`` or ``train`` mode) skips exploring:
the experience buffer is the offline dataset (``train`` with an RL algorithm is
:mod:`rft.modes.train`: the trainer alone, fed by another process's explorer). Evaluation still runs (on startup, every
``eval_interval``, at the end) when eval tasksets are configured, so every stage reports
held-out accuracy before and after it.
"""

from __future__ import annotations

import logging
import math
import os
import time
from dataclasses import dataclass, field
from typing import Any

from rft.buffer.sampling import SampleStrategy, TrainerBuffers
from rft.buffer.sft_data import DatasetStorage, row_to_sft_experience
from rft.buffer.factory import open_experience_buffer
from rft.buffer.storage import BufferEmpty, ExperienceStorage
from rft.buffer.taskset import read_rows
from rft.checkpoint import (
    check_writable,
    list_checkpoints,
    load_checkpoint,
    save_checkpoint,
)
from rft.config import Stage
from rft.config.schema import ExperienceBufferConfig, RftConfig, TasksetConfig
from rft.config.validate import Validation
from rft.errors import RftError
from rft.experience import Experience
from rft.explorer.engine import InferenceEngine, SamplingArgs
from rft.explorer.explorer import Explorer
from rft.explorer.model_wrapper import ModelWrapper
from rft.monitor.base import Monitor
from rft.synchronizer import MemorySynchronizer
from rft.trainer.base import Trainer

log = logging.getLogger("rft.embedded")


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


def build_engine(config: RftConfig, engine_cls: type[InferenceEngine]) -> InferenceEngine:
    """The rollout engine of a stage (an engine class may provide ``from_config``)."""
    factory = getattr(engine_cls, "from_config", None)
    if factory is not None:
        return factory(config)
    m, rm = config.model, config.explorer.rollout_model
    return engine_cls(
        rm.model_path or m.model_path, dtype=rm.dtype, trust_remote_code=m.trust_remote_code,
        max_model_len=rm.max_model_len or m.max_model_len,
        max_prompt_tokens=rm.max_prompt_tokens or m.max_prompt_tokens,
        max_response_tokens=rm.max_response_tokens or m.max_response_tokens,
        enable_prompt_truncation=(m.enable_prompt_truncation if rm.enable_prompt_truncation is None
                                  else rm.enable_prompt_truncation),
        chat_template=rm.chat_template or m.custom_chat_template or _read_template(m.chat_template_path),
        enable_thinking=rm.enable_thinking if rm.enable_thinking is not None else m.enable_thinking,
        seed=rm.seed,
    )


def _read_template(path: str | None) -> str | None:
    if not path:
        return None
    with open(os.path.expanduser(path), encoding="utf-8") as handle:
        return handle.read()


def default_sampling(config: RftConfig) -> SamplingArgs:
    """Sampling defaults from the ``model`` section, with the rollout model's overrides."""
    m, rm = config.model, config.explorer.rollout_model

    def pick(override: Any, default: Any) -> Any:
        return default if override is None else override

    return SamplingArgs(temperature=m.temperature, top_p=m.top_p, top_k=m.top_k,
                        max_tokens=pick(rm.max_response_tokens, m.max_response_tokens),
                        min_tokens=pick(rm.min_response_tokens, m.min_response_tokens),
                        repetition_penalty=pick(rm.repetition_penalty, m.repetition_penalty),
                        ignore_eos=rm.ignore_eos)


def open_monitors(stage: Stage, role: str) -> list[Monitor]:
    """The configured monitor for ``role`` plus the console (always on)."""
    config, selected = stage.config, stage.validation.selected["monitor.monitor_type"]
    log_dir = os.path.join(config.checkpoint_job_dir or ".", "monitor")
    monitors = [selected.implementation(config.project, config.name, role, log_dir, selected.args)]
    if selected.name != "console":
        console = stage.validation.registry.get("monitor", "console")
        monitors.append(console(config.project, config.name, role, log_dir))
    return monitors


def log_all(monitors: list[Monitor], metrics: dict[str, float], step: int) -> None:
    for monitor in monitors:
        monitor.log(metrics, step)


def offline_storage(stage: Stage, tokenizer: Any) -> ExperienceStorage:
    """The experience buffer of a train-only stage: the dataset rows as experiences."""
    config = stage.config
    buffer = config.buffer.trainer_input.experience_buffer or ExperienceBufferConfig()
    dataset = TasksetConfig(name=buffer.name, storage_type="sql" if buffer.storage_type == "sql"
                            else "file", path=buffer.path, split=buffer.split,
                            subset_name=buffer.subset_name, format=buffer.format)
    where = f"experience buffer {buffer.name!r} ({buffer.path})"
    experiences = [row_to_sft_experience(row, i, buffer.format, tokenizer, where)
                   for i, row in enumerate(read_rows(dataset))]
    epochs = config.buffer.total_epochs
    fixed_steps = config.trainer.total_steps or config.buffer.total_steps
    if fixed_steps:  # total steps win over epochs: pass over the data as often as needed
        needed = fixed_steps * (config.buffer.train_batch_size or 1)
        epochs = math.ceil(needed / len(experiences))
    return DatasetStorage(buffer.name, experiences, epochs)


def sample_step(strategy: SampleStrategy, step: int, model_version: int,
                explorer: Explorer | None) -> tuple[list[Experience], dict[str, float]]:
    """The step's training batch; when the explorer produced nothing because its tasks
    failed, a one-line error that says so."""
    try:
        return strategy.sample(step, model_version)
    except BufferEmpty as exc:
        if explorer is not None and explorer.failed_tasks:
            raise RftError(f"step {step}: no experiences to train on; "
                           f"{len(explorer.failed_tasks)} task(s) failed so far, the last: "
                           f"{explorer.failed_tasks[-1]}") from exc
        raise


def steps_over_tasks(config: RftConfig, tasks: int) -> int:
    """``trainer.total_steps``, else ``buffer.total_steps``, else
    ``total_epochs × ⌈tasks / batch_size⌉`` (explore steps over ``tasks`` training tasks)."""
    return (config.trainer.total_steps or config.buffer.total_steps
            or config.buffer.total_epochs * math.ceil(tasks / config.buffer.batch_size))


def total_steps(config: RftConfig, explorer: Explorer | None, storage: ExperienceStorage) -> int:
    """``trainer.total_steps``, else ``buffer.total_steps``, else epochs over the data."""
    if explorer is not None:
        return steps_over_tasks(config, explorer.train_size)
    return (config.trainer.total_steps or config.buffer.total_steps
            or storage.available() // (config.buffer.train_batch_size or 1))


def close_monitors(monitors: list[Monitor]) -> None:
    """Close every monitor (flushes files, ends tracking runs)."""
    for monitor in monitors:
        monitor.close()


def build_trainer(config: RftConfig, validation: Validation, storage: ExperienceStorage,
                  steps: int) -> tuple[Trainer, SampleStrategy]:
    """The stage's trainer (for ``steps`` steps) and the sample strategy feeding it from
    ``storage`` (the experience buffer)."""
    selected = validation.selected
    trainer = selected["trainer.trainer_type"].implementation(config, validation,
                                                              total_steps=steps)
    buffer_cfg = config.buffer.trainer_input.experience_buffer or ExperienceBufferConfig()
    chosen = selected["algorithm.sample_strategy"]
    strategy = chosen.implementation(TrainerBuffers(storage),
                                     batch_size=config.buffer.train_batch_size,
                                     timeout=buffer_cfg.max_read_timeout, args=chosen.args)
    return trainer, strategy


def quiet_libraries() -> None:
    """No per-call progress bars from transformers / datasets in the run's output."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()


def run_embedded(stage: Stage) -> StageResult:
    """Run one stage in this process (see the module docstring)."""
    quiet_libraries()
    started = time.monotonic()
    config, validation = stage.config, stage.validation
    preset = validation.preset
    explores = config.mode == "colocate" and not (preset is not None and preset.train_only)
    job_dir = config.checkpoint_job_dir or "."
    check_writable(job_dir)

    selected = validation.selected
    engine = build_engine(config, selected["explorer.rollout_model.engine_type"].implementation)
    model = ModelWrapper(engine, default_sampling(config))
    has_eval = bool(config.buffer.explorer_input.eval_tasksets)
    buffer_cfg = config.buffer.trainer_input.experience_buffer or ExperienceBufferConfig()
    if explores:
        storage = open_experience_buffer(buffer_cfg)
    else:
        storage = offline_storage(stage, engine.tokenizer)
    explorer = Explorer(config, validation, model, storage) if (explores or has_eval) else None

    explorer_monitors: list[Monitor] = []
    trainer_monitors: list[Monitor] = []
    trainer: Trainer | None = None
    try:  # everything opened from here on is closed however the stage ends
        steps = total_steps(config, explorer if explores else None, storage)
        if steps <= 0:
            raise RftError("buffer.total_steps: the run has no step to do (empty data or 0 steps)")
        trainer, strategy = build_trainer(config, validation, storage, steps)
        explorer_monitors = open_monitors(stage, "explorer")
        trainer_monitors = open_monitors(stage, "trainer")
        synchronizer = MemorySynchronizer(trainer, [engine])
        for monitor in explorer_monitors + trainer_monitors:
            monitor.start(steps)
        result = StageResult(stage.name, steps)

        first_step = 1
        checkpoints = list_checkpoints(job_dir) if config.continue_from_checkpoint else []
        if checkpoints:
            trainer_state, state = load_checkpoint(checkpoints[-1])
            trainer.load_state_dict(trainer_state)
            if explorer is not None:
                for selector, selector_state in zip(explorer.selectors, state.get("selectors", []),
                                                    strict=False):
                    selector.load_state_dict(selector_state)
            if isinstance(storage, DatasetStorage) and "dataset" in state:
                storage.load_state_dict(state["dataset"])
            result.eval_before = state.get("eval_before", {})
            first_step = state["step"] + 1
            synchronizer.sync(state["step"])
            log.info("resumed from %s", checkpoints[-1].path)
        if (explorer is not None and has_eval and first_step == 1
                and config.explorer.eval_on_startup):
            result.eval_before = explorer.evaluate()
            log_all(explorer_monitors, result.eval_before, 0)
        for step in range(first_step, steps + 1):
            if explores:
                log_all(explorer_monitors, explorer.explore_step(step), step)
                storage.writers_idle()  # one process: nothing more arrives before training
            experiences, sample_metrics = sample_step(strategy, step, engine.model_version,
                                                      explorer)
            metrics = {**sample_metrics, **trainer.train_step(experiences)}
            metrics.update(synchronizer.sync(step))
            log_all(trainer_monitors, metrics, step)
            if explorer is not None and has_eval and step % config.explorer.eval_interval == 0 \
                    and step != steps:
                log_all(explorer_monitors, explorer.evaluate(), step)
            if config.trainer.save_interval and step % config.trainer.save_interval == 0 \
                    and step != steps:
                _save(stage, trainer, explorer, storage, step, result, final=False)
        if explorer is not None and has_eval:
            result.eval_after = explorer.evaluate()
            log_all(explorer_monitors, result.eval_after, steps)
        _save(stage, trainer, explorer, storage, steps, result, final=True)
        result.final_model_path = os.path.join(job_dir, f"global_step_{steps}", "hf")
        result.failed_tasks = len(explorer.failed_tasks) if explorer is not None else 0
    finally:
        close_monitors(explorer_monitors + trainer_monitors)
        if explorer is not None:
            explorer.close()
        storage.close()
        if trainer is not None:
            trainer.close()
    result.seconds = time.monotonic() - started
    return result


def _save(stage: Stage, trainer: Any, explorer: Explorer | None, storage: ExperienceStorage,
          step: int, result: StageResult, *, final: bool) -> None:
    # the final model is always exported: the next stage and the user start from it
    always = stage.config.trainer.save_hf_checkpoint == "always"
    state: dict[str, Any] = {
        "selectors": [s.state_dict() for s in explorer.selectors] if explorer else [],
        "eval_before": result.eval_before,
        "experiences_written": storage.written,
        "experiences_read": storage.read_count,
    }
    if isinstance(storage, DatasetStorage):
        state["dataset"] = storage.state_dict()
    save_stage_checkpoint(stage, trainer, step, state, export_hf=final or always)


def save_stage_checkpoint(stage: Stage, trainer: Any, step: int, state: dict[str, Any], *,
                          export_hf: bool) -> str:
    """Write ``global_step_<step>`` of the stage's job dir (``model_version = step``), with
    the actor exported to ``hf/`` when ``export_hf``; prune to
    ``trainer.max_checkpoints_to_keep``; return its path."""
    config = stage.config
    save_hf = (lambda path: _save_hf(config, trainer, path)) if export_hf else None
    return save_checkpoint(config.checkpoint_job_dir or ".", step, trainer.state_dict(),
                           {"model_version": step, **state},
                           max_to_keep=config.trainer.max_checkpoints_to_keep, save_hf=save_hf)


def _save_hf(config: RftConfig, trainer: Any, path: str) -> None:
    """The Hugging Face model folder *with its tokenizer* (the next stage loads both)."""
    from transformers import AutoTokenizer

    trainer.save_pretrained(path)
    AutoTokenizer.from_pretrained(config.model.model_path,
                                  trust_remote_code=config.model.trust_remote_code
                                  ).save_pretrained(path)
