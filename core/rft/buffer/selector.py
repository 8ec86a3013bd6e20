"""The task-selector interface: which task indices of a taskset form the next batch.

Implementations are plugins (``register_task_selectors``) chosen by a taskset's
``task_selector.selector_type``. A selector is built once per taskset:

    selector = SelectorClass(dataset_size=len(taskset), seed=seed, args=args,
                             rows=rows, feature_keys=feature_keys)
    indices = selector.next_batch(batch_size)
    ...                                    # explore those tasks
    selector.update(indices, mean_rewards)  # feedback for adaptive selectors

It must be deterministic for a given seed and must resume exactly from ``state_dict()``
(the same batches follow after ``load_state_dict`` as would have without a restart).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any


class TaskSelector(ABC):
    """Base class of task selectors.

    :param dataset_size: number of tasks in the taskset (> 0).
    :param seed: seed of the selector's own random generator.
    :param args: instance of the selector's ``Args`` dataclass, or ``None``.
    :param rows: the taskset's rows (for feature-based selectors).
    :param feature_keys: row fields that describe a task's difficulty.
    """

    Args: type | None = None

    def __init__(self, dataset_size: int, seed: int = 42, args: Any = None, *,
                 rows: Sequence[Mapping[str, Any]] | None = None,
                 feature_keys: Sequence[str] = ()) -> None:
        if dataset_size <= 0:
            raise ValueError(f"a task selector needs a non-empty taskset, got {dataset_size} tasks")
        self.dataset_size = dataset_size
        self.seed = seed
        self.args = args
        self.rows = rows
        """The taskset's rows, for selectors that order tasks by a feature."""
        self.feature_keys = list(feature_keys)
        """``task_selector.feature_keys``: row fields that describe difficulty."""

    @abstractmethod
    def next_batch(self, batch_size: int) -> list[int]:
        """Indices (each in ``[0, dataset_size)``) of the next ``batch_size`` tasks."""

    def update(self, indices: list[int], scores: list[float]) -> None:
        """Feedback after exploring ``indices`` (e.g. mean reward per task); optional."""

    @property
    def epoch(self) -> int:
        """Number of complete passes over the taskset so far (0-based epoch counter)."""
        return 0

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume selection exactly where it stopped."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a state produced by :meth:`state_dict`."""
