"""Selectors that use task difficulty: a fixed easy-to-hard curriculum, and an adaptive
one that keeps choosing tasks the policy solves about half of the time."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Any

from rft.buffer.selector import TaskSelector
from rft_plugin_selectors.basic import SequentialSelector


def difficulty_of(row: dict[str, Any], keys: list[str], where: str) -> float:
    """Mean of the row's numeric ``keys`` (higher = harder)."""
    values = []
    for key in keys:
        value = row.get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"{where}: feature {key!r} is {value!r}, expected a number")
        values.append(float(value))
    return sum(values) / len(values)


@dataclass
class EasyToHardArgs:
    """Arguments of ``offline_easy2hard`` (``task_selector.kwargs``)."""

    descending: bool = False
    """Present the hardest tasks first instead."""


class OfflineEasyToHardSelector(SequentialSelector):
    """Tasks sorted by the ``feature_keys`` (ascending: easy first), then taken in order,
    epoch after epoch. Ties keep file order."""

    Args = EasyToHardArgs

    def __init__(self, dataset_size: int, seed: int = 42, args: EasyToHardArgs | None = None,
                 **features: Any) -> None:
        super().__init__(dataset_size, seed, args or EasyToHardArgs(), **features)
        if not self.rows or not self.feature_keys:
            raise ValueError("offline_easy2hard needs task_selector.feature_keys naming a "
                             "numeric difficulty field of the taskset")
        scores = [difficulty_of(dict(row), self.feature_keys, f"row {i}")
                  for i, row in enumerate(self.rows)]
        self._order = sorted(range(dataset_size), key=lambda i: scores[i],
                             reverse=self.args.descending)

    def order(self, epoch: int) -> list[int]:
        return self._order


@dataclass
class DifficultyArgs:
    """Arguments of ``difficulty_based`` (``task_selector.kwargs``)."""

    target_pass_rate: float = 0.5
    """Tasks whose estimated pass rate is closest to this are preferred."""
    temperature: float = 0.1
    """Softness of the preference: ``weight ∝ exp(−|p − target| / temperature)``."""
    prior_weight: float = 1.0
    """Pseudo-observations given to the prior estimate of each task."""


class DifficultyBasedSelector(TaskSelector):
    """Adaptive curriculum. Each task's pass rate is estimated as
    ``p_i = (prior_weight · p0_i + Σ rewards_i) / (prior_weight + n_i)`` with ``p0_i`` from
    the feature keys (``1 − difficulty`` scaled to [0, 1]) or 0.5; each batch samples
    distinct tasks with weights ``exp(−|p_i − target| / temperature)``."""

    Args = DifficultyArgs

    def __init__(self, dataset_size: int, seed: int = 42, args: DifficultyArgs | None = None,
                 **features: Any) -> None:
        super().__init__(dataset_size, seed, args or DifficultyArgs(), **features)
        if self.rows and self.feature_keys:
            raw = [difficulty_of(dict(r), self.feature_keys, f"row {i}")
                   for i, r in enumerate(self.rows)]
            low, high = min(raw), max(raw)
            span = (high - low) or 1.0
            self.prior = [1.0 - (d - low) / span for d in raw]
        else:
            self.prior = [0.5] * dataset_size
        self.reward_sum = [0.0] * dataset_size
        self.count = [0] * dataset_size
        self.batches = 0
        self.consumed = 0

    def pass_rate(self, index: int) -> float:
        w = self.args.prior_weight
        return (w * self.prior[index] + self.reward_sum[index]) / (w + self.count[index])

    def next_batch(self, batch_size: int) -> list[int]:
        rng = random.Random(f"{self.seed}:{self.batches}")
        weights = [math.exp(-abs(self.pass_rate(i) - self.args.target_pass_rate)
                            / self.args.temperature) for i in range(self.dataset_size)]
        chosen: list[int] = []
        available = list(range(self.dataset_size))
        while len(chosen) < batch_size:
            if not available:  # more tasks than the taskset: start another round
                available = list(range(self.dataset_size))
            pick = rng.choices(range(len(available)), weights=[weights[i] for i in available])[0]
            chosen.append(available.pop(pick))
        self.batches += 1
        self.consumed += batch_size
        return chosen

    def update(self, indices: list[int], scores: list[float]) -> None:
        for index, score in zip(indices, scores, strict=True):
            self.reward_sum[index] += score
            self.count[index] += 1

    @property
    def epoch(self) -> int:
        return self.consumed // self.dataset_size

    def state_dict(self) -> dict[str, Any]:
        return {"batches": self.batches, "consumed": self.consumed,
                "reward_sum": self.reward_sum, "count": self.count}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.batches, self.consumed = int(state["batches"]), int(state["consumed"])
        self.reward_sum, self.count = list(state["reward_sum"]), list(state["count"])
