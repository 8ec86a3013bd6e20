"""The experience buffer as a Ray actor, and the storage proxy the other actors use.

The actor owns the storage the config selects (queue, optionally backed up to SQLite or
JSON lines; sql; file; replay) and serves it to the explorer (``write``) and the trainer
(``read``) from several threads, so a read that waits for experiences never blocks a
write.

Writes carry the explorer's idempotency key (``explore step <s>``) and reads the trainer's
lease (its step), so a durable buffer (``sql``) resumes after a crash as in mode
``colocate``: a redone explore step does not write twice, and reads not covered by a
checkpoint are handed out again (:class:`~rft.buffer.storage.ExperienceStorage`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rft.buffer.factory import open_experience_buffer
from rft.buffer.storage import ExperienceStorage
from rft.config.plan import Selected
from rft.config.schema import ExperienceBufferConfig
from rft.experience import Experience

BUFFER_CONCURRENCY = 8
"""Calls the buffer actor serves at once (a waiting read holds one)."""


class BufferService:
    """What the buffer actor runs: one storage and its counters."""

    def __init__(self, config: ExperienceBufferConfig, priority_fn: Selected[Any] | None = None,
                 seed: int = 0) -> None:
        self.storage = open_experience_buffer(config, priority_fn, seed=seed)

    def write(self, experiences: list[Experience], key: str | None = None) -> int:
        self.storage.write(experiences, key)
        return len(experiences)

    def read(self, count: int, timeout: float, lease: int | None = None) -> list[Experience]:
        """Read as leases of training step ``lease`` (only the trainer reads)."""
        self.storage.lease_reads(lease)
        return self.storage.read(count, timeout)

    def commit_leases(self, step: int) -> int:
        return self.storage.commit_leases(step)

    def recover_leases(self, step: int) -> tuple[int, int]:
        return self.storage.recover_leases(step)

    def state_dict(self) -> dict[str, Any]:
        return self.storage.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.storage.load_state_dict(state)

    def writers_idle(self) -> None:
        self.storage.writers_idle()

    def counts(self) -> dict[str, int]:
        """``written``, ``read`` and ``available`` experiences."""
        return {"written": self.storage.written, "read": self.storage.read_count,
                "available": self.storage.available()}

    def close(self) -> None:
        self.storage.close()


class RemoteStorage(ExperienceStorage):
    """An :class:`ExperienceStorage` whose every call goes to the buffer actor (the
    explorer and the trainer use it like a local storage). ``written`` / ``read_count``
    count this process's writes and reads, as for a local storage."""

    def __init__(self, name: str, actor: Any) -> None:
        super().__init__(name)
        self.actor = actor

    def write(self, experiences: Sequence[Experience], key: str | None = None) -> None:
        import ray

        with self._lock:
            key = key if key is not None else self._next_key()
        ray.get(self.actor.write.remote(list(experiences), key))
        with self._lock:
            self.written += len(experiences)

    def _read(self, count: int, timeout: float) -> list[Experience]:
        import ray

        taken = ray.get(self.actor.read.remote(count, timeout, self._lease))
        with self._lock:
            self.read_count += len(taken)
        return taken

    def commit_leases(self, step: int) -> int:
        import ray

        return int(ray.get(self.actor.commit_leases.remote(step)))

    def writers_idle(self) -> None:
        import ray

        ray.get(self.actor.writers_idle.remote())

    def available(self) -> int:
        import ray

        return int(ray.get(self.actor.counts.remote())["available"])

    def _append(self, experiences: list[Experience]) -> None:  # pragma: no cover
        raise AssertionError("RemoteStorage forwards write()")

    def _available(self) -> int:  # pragma: no cover
        raise AssertionError("RemoteStorage forwards available()")

    def _take(self, count: int) -> list[Experience]:  # pragma: no cover
        raise AssertionError("RemoteStorage forwards read()")
