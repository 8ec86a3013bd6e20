"""Mode ``explore`` with several rollout engines (``explorer.rollout_model.engine_num > 1``).

The explorer stays in this process (:mod:`rft.modes.explore`); its engine is an
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

from rft.config import Stage
from rft.config.schema import RftConfig
from rft.distributed.cluster import ray_cluster
from rft.distributed.engine_pool import EnginePool, auxiliary_pools
from rft.distributed.placement import actor_gpus, detect_from_ray
from rft.distributed.shared_queue import run_sharing_queue, shares_queue
from rft.distributed.timeline import timeline_file
from rft.rollout.auxiliary import one_engine
from rft.engines.engine import InferenceEngine
from rft.engines.engine_factory import build_engine
from rft.modes.explore import EngineBuilder, run_explore
from rft.modes.stage import StageResult


def pool_builder(config: RftConfig) -> EngineBuilder:
    """What makes the pool of ``engine_num`` replicas, each with
    ``tensor_parallel_size`` GPUs when the cluster has GPUs (none on CPU)."""
    rm = config.explorer.rollout_model

    def build(stage_config: RftConfig, engine_cls: type[InferenceEngine]) -> InferenceEngine:
        return EnginePool(stage_config, engine_cls, rm.engine_num,
                          actor_gpus(stage_config).rollout_replica)

    return build


def pools_auxiliary_models(stage: Stage) -> bool:
    """Whether an auxiliary model of the stage asks for several engines: engine actors on
    Ray (an external model stays one client, see :func:`auxiliary_pools`)."""
    return any(aux.engine_num > 1 for aux in stage.config.explorer.auxiliary_models)


def run_explore_mode(stage: Stage) -> StageResult:
    """Mode ``explore``: one engine in this process, or with ``engine_num > 1`` a pool of
    engine actors on Ray (see the module docstring), and the same for each auxiliary
    model; over a ``queue``, the queue shared with the train process
    (:mod:`rft.distributed.shared_queue`)."""
    pooled = stage.config.explorer.rollout_model.engine_num > 1
    auxiliary_pooled = pools_auxiliary_models(stage)
    build = pool_builder(stage.config) if pooled else build_engine
    auxiliary_build = auxiliary_pools(stage.config) if auxiliary_pooled else one_engine
    if shares_queue(stage.config):
        return run_sharing_queue(stage, "explorer", lambda open_buffer: run_explore(
            stage, build, open_buffer, auxiliary_build))
    if not pooled and not auxiliary_pooled:
        return run_explore(stage)
    with ray_cluster(stage.config, timeline_file(stage.plan)):
        detect_from_ray(stage.config)
        return run_explore(stage, build, auxiliary_build=auxiliary_build)
