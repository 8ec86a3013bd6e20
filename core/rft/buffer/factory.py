"""Opening the experience buffer a config describes."""

from __future__ import annotations

from rft.buffer.replay import ReplayStorage
from rft.buffer.storage import ExperienceStorage, open_storage
from rft.config.schema import ExperienceBufferConfig


def open_experience_buffer(cfg: ExperienceBufferConfig, seed: int = 0) -> ExperienceStorage:
    """A replay buffer for ``queue`` with ``replay_buffer.enable``, else the plain storage."""
    replay = cfg.replay_buffer
    if cfg.storage_type == "queue" and replay is not None and replay.enable:
        return ReplayStorage(cfg.name, replay.priority_fn, replay.priority_fn_args,
                             replay.reuse_cooldown_time, capacity=cfg.capacity, seed=seed)
    return open_storage(cfg.storage_type, cfg.name, cfg.path)
