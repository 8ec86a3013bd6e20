"""The task pipeline's cache: an operator's output kept under a content hash.

The key of one operator's run is

    sha256(digest(input rows) ‖ operator fingerprint)

where ``digest(rows)`` hashes the rows' canonical JSON (keys sorted) and the fingerprint
covers the operator's name, class, ``version`` and ``Args``
(:meth:`rft.data.task_operator.TaskOperator.fingerprint`). Each operator's input is the
previous one's output, so a change anywhere invalidates that operator and those after
it, and nothing before. Entries are JSON-lines files ``<cache dir>/<key>.jsonl``.
"""

from __future__ import annotations

import hashlib
import json
import os

from rft.data.task_io import read_file, write_rows
from rft.data.task_operator import TaskRow


def rows_digest(rows: list[TaskRow]) -> str:
    """Hex sha256 of the rows' canonical JSON, one row a line."""
    digest = hashlib.sha256()
    for row in rows:
        digest.update(json.dumps(row, sort_keys=True, ensure_ascii=False, default=str).encode())
        digest.update(b"\n")
    return digest.hexdigest()


class TaskCache:
    """Operator outputs by key under ``folder`` (created when first written)."""

    def __init__(self, folder: str) -> None:
        self.folder = folder

    @staticmethod
    def key(rows: list[TaskRow], fingerprint: str) -> str:
        """The cache key of an operator (``fingerprint``) run on ``rows``."""
        return hashlib.sha256(f"{rows_digest(rows)}:{fingerprint}".encode()).hexdigest()

    def path(self, key: str) -> str:
        """The entry file of ``key``."""
        return os.path.join(self.folder, f"{key}.jsonl")

    def get(self, key: str) -> list[TaskRow] | None:
        """The rows stored under ``key``; ``None`` when there is no entry."""
        path = self.path(key)
        if not os.path.exists(path):
            return None
        return read_file(f"task pipeline cache {self.folder}", path)

    def put(self, key: str, rows: list[TaskRow]) -> None:
        """Store ``rows`` under ``key``."""
        write_rows(self.path(key), rows)


__all__ = ["TaskCache", "rows_digest"]
