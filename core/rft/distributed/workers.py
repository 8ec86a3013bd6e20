"""What the explorer and trainer actors run.

Each actor rebuilds the stage's plugins from the (picklable) config in its own process:
plugin objects never travel between processes, only configs, experiences, metrics and
weights do.
"""

from __future__ import annotations

import copy
from typing import Any

import torch

from rft.checkpoint import Checkpoint, load_actor_weights, load_checkpoint
from rft.config import Stage
from rft.config.schema import ExperienceBufferConfig, RftConfig
from rft.config.validate import Validation, validate
from rft.distributed.buffer_actor import RemoteStorage
from rft.distributed.engine_pool import EnginePool
from rft.embedded import (build_engine, build_trainer, default_sampling, quiet_libraries,
                          save_stage_checkpoint)
from rft.errors import ConfigError
from rft.explorer.engine import InferenceEngine
from rft.explorer.explorer import Explorer
from rft.explorer.model_wrapper import ModelWrapper
from rft.plugins import PluginRegistry

Weights = list[tuple[str, torch.Tensor]] | str
"""What the trainer hands to the explorer: its weights (HF names, CPU; ``sync_method:
memory``, through the object store) or the path of the checkpoint holding them
(``sync_method: checkpoint``)."""


def revalidate(config: RftConfig) -> Validation:
    """The stage's plugins, resolved again in this process."""
    validation = validate(copy.deepcopy(config), PluginRegistry.create())
    if validation.problems:
        raise ConfigError(validation.problems)
    return validation


def buffer_config(config: RftConfig) -> ExperienceBufferConfig:
    return config.buffer.trainer_input.experience_buffer or ExperienceBufferConfig()


class ExplorerService:
    """The explorer actor: rollout engine, workflows, selectors; writes to the buffer."""

    def __init__(self, config: RftConfig, buffer: Any) -> None:
        quiet_libraries()
        validation = revalidate(config)
        engine_cls = validation.selected["explorer.rollout_model.engine_type"].implementation
        rm = config.explorer.rollout_model
        if rm.engine_num > 1:  # replicas as actors of their own, used as one engine
            gpus = rm.tensor_parallel_size if config.cluster.gpu_per_node else 0
            self.engine: InferenceEngine = EnginePool(config, engine_cls, rm.engine_num, gpus)
        else:
            self.engine = build_engine(config, engine_cls)
        storage = RemoteStorage(buffer_config(config).name, buffer)
        self.explorer = Explorer(config, validation,
                                 ModelWrapper(self.engine, default_sampling(config)), storage)

    def train_size(self) -> int:
        return self.explorer.train_size

    def sync(self, weights: Weights, version: int) -> float:
        """Load the trainer's weights as ``version``; return the seconds it took."""
        import time

        started = time.monotonic()
        tensors = (load_actor_weights(Checkpoint(version, weights)).items()
                   if isinstance(weights, str) else weights)
        self.engine.update_weights(iter(tensors), version=version)
        return time.monotonic() - started

    def explore_step(self, step: int, weights: Weights | None = None,
                     version: int | None = None) -> tuple[dict[str, float], list[Any]]:
        """Optionally sync first, then one explore step; its metrics and the selectors'
        states after it (what a checkpoint of this step records)."""
        metrics: dict[str, float] = {}
        if weights is not None and version is not None:
            metrics["timing_s/update_weights"] = self.sync(weights, version)
        metrics.update(self.explorer.explore_step(step))
        return metrics, [s.state_dict() for s in self.explorer.selectors]

    def evaluate(self, weights: Weights | None = None, version: int | None = None
                 ) -> dict[str, float]:
        """Optionally sync first, then evaluate every eval taskset."""
        if weights is not None and version is not None:
            self.sync(weights, version)
        return self.explorer.evaluate()

    def load_selectors(self, states: list[Any]) -> None:
        for selector, state in zip(self.explorer.selectors, states, strict=False):
            selector.load_state_dict(state)

    def failed_tasks(self) -> list[str]:
        return list(self.explorer.failed_tasks)

    def close(self) -> None:
        self.explorer.close()
        close = getattr(self.engine, "close", None)
        if close is not None:
            close()


class TrainerService:
    """The trainer actor: reads the buffer through the sample strategy, trains, hands out
    its weights and writes checkpoints."""

    def __init__(self, config: RftConfig, buffer: Any, total_steps: int) -> None:
        quiet_libraries()
        validation = revalidate(config)
        self.stage = Stage(None, config, validation)
        self.trainer, self.strategy = build_trainer(
            config, validation, RemoteStorage(buffer_config(config).name, buffer), total_steps)

    def train_step(self, step: int) -> dict[str, float]:
        """Sample one batch (waiting for the explorer) and learn from it."""
        experiences, metrics = self.strategy.sample(step, self.trainer.global_steps)
        metrics.update(self.trainer.train_step(experiences))
        return metrics

    def weights(self) -> list[tuple[str, torch.Tensor]]:
        """A CPU copy of the actor's weights (it goes to the object store)."""
        return [(name, tensor.detach().to("cpu", copy=True))
                for name, tensor in self.trainer.named_weights()]

    def resume(self, path: str) -> dict[str, Any]:
        """Load the checkpoint at ``path``; return its run state (step, selectors, …)."""
        trainer_state, state = load_checkpoint(Checkpoint(0, path))
        self.trainer.load_state_dict(trainer_state)
        return state

    def save(self, step: int, state: dict[str, Any], export_hf: bool) -> str:
        """Checkpoint ``global_step_<step>`` (with the HF model when ``export_hf``)."""
        return save_stage_checkpoint(self.stage, self.trainer, step, state, export_hf=export_hf)

    def close(self) -> None:
        self.trainer.close()
