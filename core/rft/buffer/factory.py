"""Opening the experience buffer a config describes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rft.buffer.replay import ReplayStorage
from rft.buffer.retry import storage_retry
from rft.buffer.storage import ExperienceStorage, open_storage, queue_backup
from rft.config.plan import RunPlan, Selected
from rft.config.schema import ExperienceBufferConfig

BufferOpener = Callable[[RunPlan], ExperienceStorage]
"""Opens a stage's experience buffer in its place (the shared queue of modes ``explore`` +
``train``, :mod:`rft.distributed.shared_queue`)."""


def open_experience_buffer(cfg: ExperienceBufferConfig, priority_fn: Selected[Any] | None = None,
                           seed: int = 0) -> ExperienceStorage:
    """A replay buffer for ``queue`` with ``replay_buffer.enable`` (``priority_fn``: the
    plan's resolved priority function), else the plain storage; a queue's ``path`` is its
    backup either way."""
    replay = cfg.replay_buffer
    if cfg.storage_type == "queue" and replay is not None and replay.enable:
        if priority_fn is None:
            raise ValueError("a replay buffer needs the plan's resolved priority_fn")
        return ReplayStorage(cfg.name, priority_fn.implementation, priority_fn.args,
                             replay.reuse_cooldown_time, capacity=cfg.capacity, seed=seed,
                             backup=queue_backup(cfg.name, cfg.path))
    return open_storage(cfg.storage_type, cfg.name, cfg.path,
                        storage_retry(cfg.max_retry_times, cfg.max_retry_interval))
