"""Experience storages: where the explorer writes experiences and the trainer reads them.

``buffer.trainer_input.experience_buffer.storage_type`` selects one:

- ``queue`` — in-process FIFO; with a ``path`` every write is also appended to its backup
  (a durable copy of everything explored, :func:`queue_backup`): a SQLite file
  (``sqlite:///…``, ``.db``) or JSON lines (``.jsonl`` / ``.json``), readable afterwards
  as a ``sql`` / ``file`` buffer.
- ``sql`` — SQLite table: durable, survives restarts; reads mark rows as consumed. One
  process may write while another reads (``explore`` + ``train`` modes).
- ``file`` — JSON lines, append-only; for explore-only runs and debugging.

All three count what was written and read, so a run can prove that nothing was lost or
read twice. ``read`` waits up to ``timeout`` seconds for enough experiences and then
raises :class:`BufferTimeout` naming the buffer.

Crashes (see ``docs/faults.md``):

- **Leases.** After :meth:`ExperienceStorage.lease_reads` ``(step)`` a read is a *lease*
  of training step ``step``: the rows are taken, but the read becomes final only with
  :meth:`~ExperienceStorage.commit_leases` once the checkpoint covering ``step`` is saved.
  A restarted trainer calls :meth:`~ExperienceStorage.recover_leases` with the step of
  the checkpoint it resumed from: the leases it covers become final, the others go back to
  the buffer and are read again, in the same order (``sql``; in-memory storages are
  restored from the checkpoint instead, :meth:`~ExperienceStorage.state_dict`).
- **Idempotent writes.** Inside :meth:`~ExperienceStorage.idempotent_writes` ``(key)`` a
  storage that outlives the process (``sql``, ``file``, a ``queue``'s backup) skips a
  write whose key it already holds, so a step redone after a crash writes its experiences once.
  The key belongs to the run (:func:`explore_step_key`: the step *and* the job dir), so two
  runs sharing one file (a relative ``sqlite:///gsm8k.db``) both keep their rows; an empty
  write records no key (a failed attempt that wrote nothing does not block the redone
  step); a skipped write is logged (a warning when its row count differs from the held one).
"""


from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

from rft.buffer.experience_codec import experience_from_dict, experience_to_dict
from rft.buffer.file_storage import FileStorage
from rft.buffer.retry import NO_RETRY, RetryPolicy
from rft.buffer.sql_storage import SQLStorage
from rft.buffer.storage_base import (
    BufferEmpty,
    BufferTimeout,
    ExperienceStorage,
    explore_step_key,
    log_skipped_write,
)
from rft.config.buffer_paths import queue_backup_kind, resolve_queue_backup, sqlite_file
from rft.errors import RftError
from rft.experience import Experience

__all__ = [
    "SQLITE_URL_PREFIX", "STORAGES", "BufferEmpty", "BufferTimeout", "ExperienceStorage",
    "FileStorage", "QueueStorage", "SQLStorage", "experience_from_dict", "experience_to_dict",
    "explore_step_key", "log_skipped_write", "open_storage", "queue_backup", "write_backup",
]


class QueueStorage(ExperienceStorage):
    """In-process FIFO; with a ``path`` every write is also appended to its backup, a
    SQLite file or JSON lines (:func:`queue_backup`)."""

    def __init__(self, name: str, path: str | None = None) -> None:
        super().__init__(name)
        self._queue: deque[Experience] = deque()
        self._mirror = queue_backup(name, path)

    def _append(self, experiences: list[Experience]) -> None:
        self._append_keyed(experiences, None)

    def _append_keyed(self, experiences: list[Experience], key: str | None) -> None:
        write_backup(self._mirror, experiences, key)
        self._queue.extend(experiences)

    def _available(self) -> int:
        return len(self._queue)

    def _take(self, count: int) -> list[Experience]:
        return [self._queue.popleft() for _ in range(count)]

    def state_dict(self) -> dict[str, Any]:
        with self._lock:
            return {**super().state_dict(), "items": list(self._queue)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        with self._lock:
            self._queue = deque(state.get("items", []))

    def close(self) -> None:
        if self._mirror is not None:
            self._mirror.close()

def queue_backup(name: str, path: str | None) -> ExperienceStorage | None:
    """The backup of queue ``name`` at ``path`` (:mod:`rft.config.buffer_paths`): a
    :class:`SQLStorage` (a SQLite file or ``sqlite:///`` URL), a :class:`FileStorage`
    (``.jsonl`` / ``.json``: JSON lines) or ``None`` (no path). The queue writes to it and
    never reads it; a later stage reads it as a ``sql`` / ``file`` buffer. A directory
    ``path`` holds the backup as ``<path>/<name>.jsonl``."""
    path = resolve_queue_backup(path, name)
    try:
        kind = queue_backup_kind(path)
    except ValueError as exc:
        raise RftError(f"experience buffer {name!r}: path: {exc}") from None
    if path is None or kind is None:
        return None
    if kind == "sql":
        return SQLStorage(name, sqlite_file(path))
    return FileStorage(name, path)


def write_backup(backup: ExperienceStorage | None, experiences: list[Experience],
                 key: str | None) -> None:
    """Append a queue's write to its ``backup`` (when there is one) under the write's
    idempotency ``key``: a write the backup already holds is skipped."""
    if backup is None:
        return
    if key is None:
        backup.write(experiences)
    else:
        with backup.idempotent_writes(key):
            backup.write(experiences)


STORAGES: dict[str, Callable[[str, str | None], ExperienceStorage]] = {
    "queue": lambda name, path: QueueStorage(name, path),
    "sql": lambda name, path: SQLStorage(name, path or f"{name}.db"),
    "file": lambda name, path: FileStorage(name, path or f"{name}.jsonl"),
}
"""Storage constructor per ``storage_type`` (a closed set of the core, not plugins)."""


SQLITE_URL_PREFIX = "sqlite:///"


def open_storage(storage_type: str, name: str, path: str | None,
                 retry: RetryPolicy = NO_RETRY) -> ExperienceStorage:
    """Open the storage selected by ``storage_type``; ``sqlite:///x.db`` paths are accepted.
    ``retry``: how often a failed ``sql`` operation is tried again."""
    if path and path.startswith(SQLITE_URL_PREFIX):
        path = path[len(SQLITE_URL_PREFIX):]
    if storage_type == "sql" and retry != NO_RETRY:
        return SQLStorage(name, path or f"{name}.db", retry)
    return STORAGES[storage_type](name, path)
