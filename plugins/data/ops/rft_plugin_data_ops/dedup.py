"""``exact_deduplicator`` and ``near_deduplicator``: drop repeated tasks (first kept).

Exact: rows whose normalised text (lower-cased, whitespace collapsed) is equal.
Near: rows whose word-shingle sets are similar,

    J(A, B) = |A ∩ B| / |A ∪ B| ≥ threshold,     A = {w_i … w_{i+n-1}} over the text's words,

compared with every row kept so far (O(n²) in the rows; fine for tasksets up to some
thousands of rows).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field

from rft.data.task_operator import TaskOperator, TaskRow
from rft_plugin_data_ops.text import row_text

_SPACE = re.compile(r"\s+")
_WORD = re.compile(r"\w+")


def normalise(text: str) -> str:
    """Lower-cased, whitespace collapsed and stripped."""
    return _SPACE.sub(" ", text.lower()).strip()


@dataclass
class ExactArgs:
    fields: list[str] = field(default_factory=list)
    """Fields compared (joined by newlines); empty: every string field."""


class ExactDeduplicator(TaskOperator):
    """Keeps the first row of each normalised text."""

    Args = ExactArgs
    args: ExactArgs
    row_wise = False

    def process(self, rows: list[TaskRow]) -> list[TaskRow]:
        seen: set[str] = set()
        kept: list[TaskRow] = []
        for row in rows:
            digest = hashlib.sha256(normalise(row_text(row, self.args.fields)).encode()).hexdigest()
            if digest not in seen:
                seen.add(digest)
                kept.append(row)
        return kept


@dataclass
class NearArgs:
    threshold: float = 0.8
    """Jaccard similarity of shingle sets at or above which a row repeats a kept one."""
    ngram: int = 2
    """Words per shingle."""
    fields: list[str] = field(default_factory=list)
    """Fields compared; empty: every string field."""


def shingles(text: str, n: int) -> frozenset[tuple[str, ...]]:
    """The text's lower-cased word ``n``-grams (the words themselves when fewer)."""
    words = _WORD.findall(text.lower())
    if len(words) < n:
        return frozenset({tuple(words)}) if words else frozenset()
    return frozenset(tuple(words[i:i + n]) for i in range(len(words) - n + 1))


def jaccard(a: frozenset[tuple[str, ...]], b: frozenset[tuple[str, ...]]) -> float:
    """``|a ∩ b| / |a ∪ b|`` (1.0 for two empty sets)."""
    union = len(a | b)
    return 1.0 if union == 0 else len(a & b) / union


class NearDeduplicator(TaskOperator):
    """Keeps a row unless it is near (see the module docstring) a row kept before it."""

    Args = NearArgs
    args: NearArgs
    row_wise = False

    def process(self, rows: list[TaskRow]) -> list[TaskRow]:
        kept: list[TaskRow] = []
        kept_sets: list[frozenset[tuple[str, ...]]] = []
        for row in rows:
            mine = shingles(row_text(row, self.args.fields), self.args.ngram)
            if all(jaccard(mine, other) < self.args.threshold for other in kept_sets):
                kept.append(row)
                kept_sets.append(mine)
        return kept
