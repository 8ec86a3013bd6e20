"""What a ``queue`` experience buffer's ``path`` names: its backup (as in Trinity-RFT).

``buffer.trainer_input.experience_buffer.path`` with ``storage_type: queue`` is optional;
when set, every experience written to the queue is also appended to the backup it names
(:func:`rft.buffer.storage.queue_backup`), readable afterwards as a ``sql`` or ``file``
buffer:

- a SQLite file — a ``sqlite:///`` URL or a path ending in ``.db``, ``.sqlite`` or
  ``.sqlite3`` — gets the rows of a ``sql`` buffer;
- a path ending in ``.jsonl`` or ``.json`` gets JSON lines, one experience per line, as a
  ``file`` buffer writes them.

A directory — a path that is one here, ends with ``/``, or has no suffix (Trinity-RFT's
example ``./exp_buffer``) — is read as the JSON lines file ``<dir>/<name>.jsonl`` inside it
(:func:`resolve_queue_backup`; Trinity-RFT's own default backup is
``<buffer dir>/<name>.jsonl``).

Anything else (another database URL, another suffix) is a validation problem naming the
key: rft would not know which format to write.
"""

from __future__ import annotations

import os
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


def is_directory_path(path: str) -> bool:
    """Whether ``path`` names a directory: one exists there, it ends with a separator, or
    its last component has no suffix (``./exp_buffer``). Database URLs never do."""
    if "://" in path:
        return False
    if os.path.isdir(path) or path.endswith(("/", os.sep)):
        return True
    return not os.path.splitext(os.path.basename(path))[1]


def resolve_queue_backup(path: str | None, name: str) -> str | None:
    """``path``, or ``<path>/<name>.jsonl`` when it names a directory
    (:func:`is_directory_path`): a queue's backup file inside it."""
    if not path or not is_directory_path(path):
        return path
    return os.path.join(path, f"{name}.jsonl")


def sqlite_file(path: str) -> str:
    """The file of a SQLite path or ``sqlite:///`` URL."""
    return path.removeprefix(SQLITE_URL_PREFIX)


__all__ = ["JSON_SUFFIXES", "SQLITE_SUFFIXES", "SQLITE_URL_PREFIX", "BackupKind",
           "is_directory_path", "queue_backup_kind", "resolve_queue_backup", "sqlite_file"]
