"""The Ray implementation of :class:`~rft.modes.runtime.Distributed`: what the launcher
hands every mode's entry point (the modes themselves do not import Ray)."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import replace
from typing import Literal

from rft.buffer.factory import BufferOpener
from rft.config import Stage
from rft.config.plan import RunPlan
from rft.config.schema import RftConfig
from rft.distributed.both_actors import RayBothActors
from rft.distributed.cluster import ray_cluster
from rft.distributed.colocate_ranks import RankEngines
from rft.distributed.engine_pool import auxiliary_pools
from rft.distributed.explore_engines import pool_builder
from rft.distributed.placement import detect_from_ray
from rft.distributed.shared_queue import run_sharing_queue, shares_queue
from rft.distributed.timeline import timeline_file
from rft.modes.runtime import BothActors, EngineBuilder, RolloutEngines
from rft.modes.stage import StageResult
from rft.rollout.auxiliary import AuxiliaryEngineBuilder


class RayDistributed:
    """Ray as the run's cluster runtime (joined, or a private cluster started and stopped
    with the stage: :func:`~rft.distributed.cluster.ray_cluster`)."""

    def cluster(self, stage: Stage) -> AbstractContextManager[None]:
        return ray_cluster(stage.config, timeline_file(stage.plan))

    def detect_resources(self, stage: Stage) -> Stage:
        config = detect_from_ray(stage.config)
        if config is stage.config:
            return stage
        return replace(stage, plan=replace(stage.plan, config=config))

    def engine_pool(self, config: RftConfig) -> EngineBuilder:
        return pool_builder(config)

    def auxiliary_pools(self, config: RftConfig) -> AuxiliaryEngineBuilder:
        return auxiliary_pools(config)

    def rank_engines(self, plan: RunPlan) -> RolloutEngines:
        return RankEngines(plan)

    def shares_queue(self, config: RftConfig, train_only: bool = False) -> bool:
        return shares_queue(config, train_only)

    def run_sharing_queue(self, stage: Stage, side: Literal["explorer", "trainer"],
                          run: Callable[[BufferOpener], StageResult]) -> StageResult:
        return run_sharing_queue(stage, side, run)

    def both_actors(self, stage: Stage) -> BothActors:
        return RayBothActors(stage)


RAY = RayDistributed()
"""The runtime the launcher hands the modes."""

__all__ = ["RAY", "RayDistributed"]
