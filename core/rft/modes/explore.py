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
from dataclasses import asdict, dataclass, field
from typing import Any

from rft.buffer.factory import open_experience_buffer
from rft.buffer.storage import ExperienceStorage
from rft.checkpoint import check_writable
from rft.config import Stage
from rft.config.schema import RftConfig
from rft.errors import RftError
from rft.explorer.engine_factory import build_engine, default_sampling
from rft.explorer.explorer import Explorer
from rft.explorer.model_wrapper import ModelWrapper
from rft.modes.builders import quiet_libraries, steps_over_tasks
from rft.modes.checkpoint_sync import CheckpointSynchronizer
from rft.modes.stage import Resumed, StageLifecycle, StageResult, run_stage

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


class ExploreStage:
    """The :class:`~rft.modes.stage.StageBody` of mode ``explore``: progress goes to
    ``explorer_state.json`` after every step; no checkpoint is written."""

    def __init__(self, stage: Stage, lifecycle: StageLifecycle,
                 cleanup: contextlib.ExitStack) -> None:
        plan = self.plan = stage.plan
        config = plan.config
        self.lifecycle = lifecycle
        self.engine = build_engine(config, plan.rollout_model.engine.implementation)
        self.storage: ExperienceStorage = open_experience_buffer(plan.experience_buffer,
                                                                 plan.priority_fn)
        cleanup.callback(self.storage.close)
        self.explorer = Explorer(plan, ModelWrapper(self.engine, default_sampling(config)),
                                 self.storage)
        cleanup.callback(self.explorer.close)
        self.sync = CheckpointSynchronizer(plan.job_dir, [self.engine],
                                           timeout=config.synchronizer.sync_timeout)
        self.steps = steps_over_tasks(config, self.explorer.train_size)
        self.progress = ExplorerProgress()

    def resume(self) -> Resumed:
        if self.plan.config.continue_from_checkpoint:
            self.progress = ExplorerProgress.read(self.plan.job_dir) or self.progress
        for selector, state in zip(self.explorer.selectors, self.progress.selectors,
                                   strict=False):
            selector.load_state_dict(state)
        self.sync.load_newest()  # a resumed run, or a trainer that is ahead
        if self.sync.loaded is not None:
            log.info("explorer starts from %s", self.sync.loaded.path)
        return Resumed(self.progress.step, self.progress.eval_before,
                       initial_weights=self.sync.version == 0)

    def step(self, step: int) -> None:
        config, progress = self.plan.config, self.progress
        metrics: dict[str, float] = {}
        if is_sync_step(step, config):
            wait = config.synchronizer.wait_for_checkpoint
            metrics.update(self.sync.wait_newer() if wait else self.sync.load_newest())
        written_before = self.storage.written
        metrics.update(self.explorer.explore_step(step))
        metrics["sync/model_version"] = float(self.sync.version)
        self.lifecycle.log("explorer", metrics, step)
        progress.step, progress.model_version = step, self.sync.version
        progress.selectors = [s.state_dict() for s in self.explorer.selectors]
        progress.experiences_written += self.storage.written - written_before
        progress.eval_before = self.lifecycle.result.eval_before
        progress.write(self.plan.job_dir)

    def evaluate(self) -> dict[str, float]:
        return self.explorer.evaluate()

    def save(self, step: int, *, final: bool) -> None:
        """Nothing: the explorer's progress is written after every step."""

    def finish(self, result: StageResult) -> None:
        result.failed_tasks = len(self.explorer.failed_tasks)
        result.final_model_path = _model_path(self.plan.config, self.sync)


def run_explore(stage: Stage) -> StageResult:
    """Run the explorer of one stage in this process (see the module docstring)."""
    quiet_libraries()
    check_writable(stage.plan.job_dir)
    return run_stage(stage, ("explorer",), has_eval=bool(stage.plan.eval_tasksets),
                     open_body=lambda lifecycle, cleanup: ExploreStage(stage, lifecycle,
                                                                       cleanup))


def _model_path(config: RftConfig, sync: CheckpointSynchronizer) -> str | None:
    """The weights the explorer ended with: the loaded checkpoint's ``hf/``, else the
    configured model."""
    if sync.loaded is not None:
        hf = os.path.join(sync.loaded.path, "hf")
        return hf if os.path.isdir(hf) else None
    return config.explorer.rollout_model.model_path or config.model.model_path
