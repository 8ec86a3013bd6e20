"""``text_length_filter``: keep tasks whose text length is within bounds."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from rft.data.task_operator import TaskOperator, TaskRow
from rft_plugin_data_ops.text import row_text


@dataclass
class TextLengthArgs:
    min_len: int = 10
    """Shortest text kept."""
    max_len: int = 2**31 - 1
    """Longest text kept."""
    unit: Literal["chars", "words"] = "chars"
    """Count characters or whitespace-separated words."""
    fields: list[str] = field(default_factory=list)
    """Fields whose text is measured (joined by newlines); empty: every string field."""


class TextLengthFilter(TaskOperator):
    """Keeps rows with ``min_len <= length(text) <= max_len``."""

    Args = TextLengthArgs
    args: TextLengthArgs

    def process(self, rows: list[TaskRow]) -> list[TaskRow]:
        a = self.args
        return [row for row in rows if a.min_len <= self._length(row) <= a.max_len]

    def _length(self, row: TaskRow) -> int:
        text = row_text(row, self.args.fields)
        return len(text.split()) if self.args.unit == "words" else len(text)
