"""What a ``queue`` experience buffer's ``path`` names: its backup (as in Trinity-RFT).

``buffer.trainer_input.experience_buffer.path`` with ``storage_type: queue`` is optional;
when set, every experience written to the queue is also appended to the backup it names
(:func:`rft.buffer.storage.queue_backup`), readable afterwards as a ``sql`` or ``file``
buffer:

- a SQLite file — a ``sqlite:///`` URL or a path ending in ``.db``, ``.sqlite`` or
  ``.sqlite3`` — gets the rows of a ``sql`` buffer;
- a path ending in ``.jsonl`` or ``.json`` gets JSON lines, one experience per line, as a
  ``file`` buffer writes them.

Anything else (another database URL, another suffix) is a validation problem naming the
key: rft would not know which format to write.
"""

from __future__ import annotations

from typing import Literal

SQLITE_URL_PREFIX = "sqlite:///"
SQLITE_SUFFIXES = (".db", ".sqlite", ".sqlite3")
JSON_SUFFIXES = (".jsonl", ".json")

BackupKind = Literal["sql", "file"]


def queue_backup_kind(path: str | None) -> BackupKind | None:
    """``"sql"`` (a SQLite file), ``"file"`` (JSON lines) or ``None`` (no ``path``).

    :raises ValueError: ``path`` names neither (the message says what is accepted).
    """
    if not path:
        return None
    if path.startswith(SQLITE_URL_PREFIX) or path.lower().endswith(SQLITE_SUFFIXES):
        return "sql"
    if path.lower().endswith(JSON_SUFFIXES):
        return "file"
    raise ValueError(f"a queue's backup is a SQLite file ({SQLITE_URL_PREFIX}…, "
                     f"{', '.join(SQLITE_SUFFIXES)}) or a JSON lines file "
                     f"({', '.join(JSON_SUFFIXES)}), got {path!r}")


def sqlite_file(path: str) -> str:
    """The file of a SQLite path or ``sqlite:///`` URL."""
    return path.removeprefix(SQLITE_URL_PREFIX)


__all__ = ["JSON_SUFFIXES", "SQLITE_SUFFIXES", "SQLITE_URL_PREFIX", "BackupKind",
           "queue_backup_kind", "sqlite_file"]
