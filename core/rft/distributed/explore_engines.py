"""Mode ``explore`` with several rollout engines (``explorer.rollout_model.engine_num > 1``).

The explorer stays in this process (:func:`rft.modes.explore.run_explore_mode`, given
:func:`pool_builder` by the Ray runtime, :mod:`rft.distributed.ray_runtime`); its engine is an
:class:`~rft.distributed.engine_pool.EnginePool` of ``engine_num`` engine actors on the
run's Ray cluster (joined, or a private one started and stopped with the stage, as
:func:`~rft.distributed.cluster.ray_cluster` does). The workflows of a step run at once
(``explorer.runner_per_model`` runners) and their model calls are merged into one engine
call, whose prompts the pool splits into one chunk per replica: the tasks of a step are
spread over the engines. Each checkpoint the explorer loads goes to every replica.

An auxiliary model with ``engine_num > 1`` is a pool of engine actors too
(:func:`~rft.distributed.engine_pool.auxiliary_pools`), on the same cluster: the stage
joins or starts one for it even when the rollout model has one engine.
"""

from __future__ import annotations

from rft.config.schema import RftConfig
from rft.distributed.engine_pool import EnginePool
from rft.distributed.placement import actor_gpus
from rft.engines.engine import InferenceEngine
from rft.modes.runtime import EngineBuilder


def pool_builder(config: RftConfig) -> EngineBuilder:
    """What makes the pool of ``engine_num`` replicas, each with
    ``tensor_parallel_size`` GPUs when the cluster has GPUs (none on CPU)."""
    rm = config.explorer.rollout_model

    def build(stage_config: RftConfig, engine_cls: type[InferenceEngine]) -> InferenceEngine:
        return EnginePool(stage_config, engine_cls, rm.engine_num,
                          actor_gpus(stage_config).rollout_replica)

    return build
