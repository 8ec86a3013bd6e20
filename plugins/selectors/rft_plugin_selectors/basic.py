"""Selectors that ignore task feedback: shuffle, random (``sequential``, which
``shuffle`` extends, is the core's: :mod:`rft.builtin.selectors`)."""

from __future__ import annotations

import random
from typing import Any

from rft.buffer.selector import TaskSelector
from rft.builtin.selectors import SequentialSelector


class ShuffleSelector(SequentialSelector):
    """A new permutation each epoch, seeded by ``(seed, epoch)`` so resumes repeat it."""

    def order(self, epoch: int) -> list[int]:
        indices = list(range(self.dataset_size))
        random.Random(f"{self.seed}:{epoch}").shuffle(indices)
        return indices


class RandomSelector(TaskSelector):
    """Each batch is a uniform sample of distinct tasks (with replacement across batches)."""

    def __init__(self, dataset_size: int, seed: int = 42, args: Any = None,
                 **features: Any) -> None:
        super().__init__(dataset_size, seed, args, **features)
        self.batches = 0
        self.consumed = 0

    def next_batch(self, batch_size: int) -> list[int]:
        rng = random.Random(f"{self.seed}:{self.batches}")
        if batch_size <= self.dataset_size:
            batch = rng.sample(range(self.dataset_size), batch_size)
        else:  # more tasks than the taskset holds: repeat whole permutations
            batch = [rng.randrange(self.dataset_size) for _ in range(batch_size)]
        self.batches += 1
        self.consumed += batch_size
        return batch

    @property
    def epoch(self) -> int:
        return self.consumed // self.dataset_size

    def state_dict(self) -> dict[str, Any]:
        return {"batches": self.batches, "consumed": self.consumed}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.batches = int(state["batches"])
        self.consumed = int(state["consumed"])
