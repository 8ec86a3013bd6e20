"""``explore`` mode: the explorer alone, in this process (no Ray).

One step::

    [sync point: load the trainer's newest checkpoint — waiting for a newer one with
     synchronizer.wait_for_checkpoint] → explore (batch_size tasks × repeat_times)
    → experience buffer (sql / file) → monitors (role "explorer") → eval every eval_interval

Sync points are the steps ``s`` with ``s − 1 − sync_offset`` a positive multiple of
``sync_interval``: the explorer runs ``sync_offset`` steps ahead of the trainer. Each
experience carries the model version (checkpoint step) that sampled it. After every
step ``<job dir>/explorer_state.json`` records the step, the task selectors and the
counts, so a restarted explorer (``continue_from_checkpoint``) goes on where it stopped.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from rft.buffer.factory import open_experience_buffer
from rft.buffer.storage import ExperienceStorage
from rft.checkpoint import check_writable
from rft.config import Stage
from rft.config.schema import ExperienceBufferConfig, RftConfig
from rft.embedded import (
    StageResult,
    build_engine,
    close_monitors,
    default_sampling,
    log_all,
    open_monitors,
    quiet_libraries,
    total_steps,
)
from rft.errors import RftError
from rft.explorer.explorer import Explorer
from rft.explorer.model_wrapper import ModelWrapper
from rft.modes.checkpoint_sync import CheckpointSynchronizer
from rft.monitor.base import Monitor

log = logging.getLogger("rft.modes.explore")

STATE_FILE = "explorer_state.json"
"""The explorer's progress, in the job dir."""


@dataclass
class ExplorerProgress:
    """What ``explorer_state.json`` holds."""

    step: int = 0
    """Last explore step done."""
    model_version: int = 0
    """Checkpoint step the engine held then."""
    selectors: list[dict[str, Any]] = field(default_factory=list)
    """Task-selector states, one per training taskset."""
    experiences_written: int = 0
    """Experiences written to the buffer by every explore run of this job."""
    eval_before: dict[str, float] = field(default_factory=dict)
    """Evaluation of the initial model (kept for the summary)."""

    @staticmethod
    def read(job_dir: str) -> ExplorerProgress | None:
        """The saved progress, ``None`` when there is none.

        :raises RftError: a corrupt file (one line naming it).
        """
        path = os.path.join(job_dir, STATE_FILE)
        if not os.path.exists(path):
            return None
        try:
            with open(path, encoding="utf-8") as handle:
                return ExplorerProgress(**json.load(handle))
        except (OSError, ValueError, TypeError) as exc:
            raise RftError(f"explorer state {path} is corrupt: {exc}") from exc

    def write(self, job_dir: str) -> None:
        """Replace the file atomically."""
        path = os.path.join(job_dir, STATE_FILE)
        with open(path + ".tmp", "w", encoding="utf-8") as handle:
            json.dump(asdict(self), handle)
        os.replace(path + ".tmp", path)


def is_sync_step(step: int, config: RftConfig) -> bool:
    """Whether the explorer loads weights before ``step`` (see the module docstring)."""
    s = config.synchronizer
    done = step - 1 - s.sync_offset
    return done > 0 and done % s.sync_interval == 0


def run_explore(stage: Stage) -> StageResult:
    """Run the explorer of one stage in this process (see the module docstring)."""
    quiet_libraries()
    started = time.monotonic()
    config, validation = stage.config, stage.validation
    job_dir = config.checkpoint_job_dir or "."
    check_writable(job_dir)
    with contextlib.ExitStack() as cleanup:  # closed in reverse, however set-up ends
        engine = build_engine(
            config, validation.selected["explorer.rollout_model.engine_type"].implementation)
        storage = open_experience_buffer(config.buffer.trainer_input.experience_buffer
                                         or ExperienceBufferConfig())
        cleanup.callback(storage.close)
        explorer = Explorer(config, validation, ModelWrapper(engine, default_sampling(config)),
                            storage)
        cleanup.callback(explorer.close)
        sync = CheckpointSynchronizer(job_dir, [engine],
                                      timeout=config.synchronizer.sync_timeout)
        steps = total_steps(config, explorer, storage)
        monitors = open_monitors(stage, "explorer")
        cleanup.callback(close_monitors, monitors)
        for monitor in monitors:
            monitor.start(steps)
        progress = (ExplorerProgress.read(job_dir) if config.continue_from_checkpoint
                    else None) or ExplorerProgress()
        result = _explore(stage, explorer, storage, sync, monitors, progress, steps)
    result.seconds = time.monotonic() - started
    return result


def _explore(stage: Stage, explorer: Explorer, storage: ExperienceStorage,
             sync: CheckpointSynchronizer, monitors: list[Monitor], progress: ExplorerProgress,
             steps: int) -> StageResult:
    """The explore steps of :func:`run_explore`, from ``progress`` on."""
    config = stage.config
    job_dir = config.checkpoint_job_dir or "."
    for selector, state in zip(explorer.selectors, progress.selectors, strict=False):
        selector.load_state_dict(state)
    result = StageResult(stage.name, steps, eval_before=progress.eval_before)
    has_eval = bool(explorer.eval_sets)
    wait = config.synchronizer.wait_for_checkpoint
    sync.load_newest()  # a resumed run, or a trainer that is ahead
    if sync.loaded is not None:
        log.info("explorer starts from %s", sync.loaded.path)
    if has_eval and progress.step == 0 and sync.version == 0 \
            and config.explorer.eval_on_startup:
        result.eval_before = progress.eval_before = explorer.evaluate()
        log_all(monitors, result.eval_before, 0)
    for step in range(progress.step + 1, steps + 1):
        metrics: dict[str, float] = {}
        if is_sync_step(step, config):
            metrics.update(sync.wait_newer() if wait else sync.load_newest())
        written_before = storage.written
        metrics.update(explorer.explore_step(step))
        metrics["sync/model_version"] = float(sync.version)
        log_all(monitors, metrics, step)
        progress.step, progress.model_version = step, sync.version
        progress.selectors = [s.state_dict() for s in explorer.selectors]
        progress.experiences_written += storage.written - written_before
        progress.write(job_dir)
        if has_eval and step % config.explorer.eval_interval == 0 and step != steps:
            log_all(monitors, explorer.evaluate(), step)
    if has_eval:
        result.eval_after = explorer.evaluate()
        log_all(monitors, result.eval_after, steps)
    result.failed_tasks = len(explorer.failed_tasks)
    result.final_model_path = _model_path(config, sync)
    return result


def _model_path(config: RftConfig, sync: CheckpointSynchronizer) -> str | None:
    """The weights the explorer ended with: the loaded checkpoint's ``hf/``, else the
    configured model."""
    if sync.loaded is not None:
        hf = os.path.join(sync.loaded.path, "hf")
        return hf if os.path.isdir(hf) else None
    return config.explorer.rollout_model.model_path or config.model.model_path
