"""Priority-based task selection (``priority_weights`` / ``top_k``).

Each row's priority is a weighted sum of its statistics::

    priority(row) = Σ_s  w_s · stat_s(row)      s ∈ {difficulty, diversity, usage_frequency, quality}

- ``difficulty`` ∈ [0, 1]: how hard the task is, as an operator scored it
  (``llm_difficulty_score_filter`` writes it); a negative weight prefers easy tasks.
- ``quality`` ∈ [0, 1]: how well-formed the task is, as an operator scored it.
- ``diversity`` ∈ [0, 1]: ``1 − max_j J(words(row), words(row_j))``, one minus the highest
  Jaccard similarity of the row's word set to any other row's (an operator may set it;
  otherwise computed here over ``target_fields`` — O(n²) in the number of rows).
- ``usage_frequency`` ≥ 0: how often the task was used already, read from the row's stats
  or its ``usage_frequency`` field (a taskset exported by an earlier run); 0 otherwise.

A statistic a row lacks counts 0. The rows come back sorted by priority, highest first
(stable: equal priorities keep input order), the first ``top_k`` of them when
``top_k > 0``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from rft.data.task_operator import STATS_KEY, TaskRow, row_stats

_WORD = re.compile(r"\w+")


def words(row: TaskRow, fields: Sequence[str]) -> frozenset[str]:
    """Lower-cased word set of ``fields`` of ``row`` (every string field when empty)."""
    keys = fields or [k for k, v in row.items() if isinstance(v, str) and k != STATS_KEY]
    return frozenset(w.lower() for k in keys for w in _WORD.findall(str(row.get(k, ""))))


def diversity(rows: list[TaskRow], fields: Sequence[str]) -> list[float]:
    """``1 − max Jaccard`` of each row's word set to the others' (1.0 for a lone row)."""
    sets = [words(row, fields) for row in rows]
    scores: list[float] = []
    for i, mine in enumerate(sets):
        highest = 0.0
        for j, other in enumerate(sets):
            if i != j and (mine or other):
                highest = max(highest, len(mine & other) / len(mine | other))
        scores.append(1.0 - highest)
    return scores


def priorities(rows: list[TaskRow], weights: Mapping[str, float],
               fields: Sequence[str]) -> list[float]:
    """The priority of every row (see the module docstring)."""
    stats = [dict(row_stats(dict(row))) if isinstance(row.get(STATS_KEY), dict) else {}
             for row in rows]
    if weights.get("diversity") and any("diversity" not in s for s in stats):
        for s, value in zip(stats, diversity(rows, fields), strict=True):
            s.setdefault("diversity", value)
    for s, row in zip(stats, rows, strict=True):
        if "usage_frequency" not in s and isinstance(row.get("usage_frequency"), int | float):
            s["usage_frequency"] = float(row["usage_frequency"])
    return [sum(w * float(s.get(name, 0.0)) for name, w in weights.items()) for s in stats]


def select(rows: list[TaskRow], weights: Mapping[str, float], top_k: int,
           fields: Sequence[str]) -> list[TaskRow]:
    """Rows by priority, highest first, the first ``top_k`` when ``top_k > 0``; rows
    unchanged (same order) when there are no weights and no ``top_k``."""
    if not weights:
        return rows[:top_k] if top_k > 0 else rows
    scores = priorities(rows, weights, fields)
    order = sorted(range(len(rows)), key=lambda i: -scores[i])
    if top_k > 0:
        order = order[:top_k]
    return [rows[i] for i in order]


__all__ = ["diversity", "priorities", "select", "words"]
