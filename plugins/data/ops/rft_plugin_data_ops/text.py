"""The text of a task row that operators look at."""

from __future__ import annotations

from collections.abc import Sequence

from rft.data.task_operator import STATS_KEY, TaskRow


def row_text(row: TaskRow, fields: Sequence[str]) -> str:
    """``fields`` of ``row`` joined by newlines (every string field when ``fields`` is
    empty); a field the row lacks counts as empty."""
    keys = fields or [k for k, v in row.items() if isinstance(v, str) and k != STATS_KEY]
    return "\n".join(str(row.get(k, "")) for k in keys)
