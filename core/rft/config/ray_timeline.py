"""``monitor.enable_ray_timeline``: which runs use Ray, so that a run without Ray is told
the field has no effect there (the writer is :mod:`rft.distributed.timeline`)."""

from __future__ import annotations

from typing import Protocol

from rft.config.schema import RftConfig

NO_RAY = ("this run does not use Ray (modes both; explore with engine_num > 1 (of the rollout "
          "model or an auxiliary model) or a queue; train over a queue; colocate with trainer "
          "ranks > 1); it has no effect")


class _Warns(Protocol):
    warnings: list[str]


def uses_ray(c: RftConfig) -> bool:
    """Whether a run of this (validated) config connects to Ray
    (:func:`rft.distributed.cluster.ray_cluster`)."""
    storage = c.buffer.trainer_input.experience_buffer
    queue = storage is not None and storage.storage_type == "queue"
    if c.mode == "both":
        return True
    if c.mode == "explore":
        return (c.explorer.rollout_model.engine_num > 1 or queue
                or any(aux.engine_num > 1 for aux in c.explorer.auxiliary_models))
    if c.mode == "train":
        return queue
    if c.mode == "colocate":
        return (c.trainer.ranks or 1) > 1
    return False


def check_ray_timeline(c: RftConfig, v: _Warns) -> None:
    """A warning when ``monitor.enable_ray_timeline`` is set on a run without Ray."""
    if c.monitor.enable_ray_timeline and not uses_ray(c):
        v.warnings.append(f"monitor.enable_ray_timeline: {NO_RAY}")
