"""The core's task selector: ``sequential``, the default of
``buffer.explorer_input.taskset.task_selector.selector_type``.

A default the user never wrote must resolve with the core alone (``pip install
rft-framework`` and any algorithm plugin); the other selectors (``shuffle``, ``random``,
``offline_easy2hard``, ``difficulty_based``) come with ``rft-plugin-selectors``.
"""

from __future__ import annotations

from typing import Any

from rft.buffer.selector import TaskSelector
from rft.hookspecs import hookimpl


class SequentialSelector(TaskSelector):
    """Tasks in file order; a batch may span the end of one epoch and the start of the next."""

    def __init__(self, dataset_size: int, seed: int = 42, args: Any = None,
                 **features: Any) -> None:
        super().__init__(dataset_size, seed, args, **features)
        self.consumed = 0
        """Tasks handed out so far, over all epochs."""

    def order(self, epoch: int) -> list[int]:
        """Task order of one epoch."""
        return list(range(self.dataset_size))

    def next_batch(self, batch_size: int) -> list[int]:
        batch: list[int] = []
        while len(batch) < batch_size:
            epoch, offset = divmod(self.consumed, self.dataset_size)
            take = min(batch_size - len(batch), self.dataset_size - offset)
            batch += self.order(epoch)[offset:offset + take]
            self.consumed += take
        return batch

    @property
    def epoch(self) -> int:
        return self.consumed // self.dataset_size

    def state_dict(self) -> dict[str, Any]:
        return {"consumed": self.consumed}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.consumed = int(state["consumed"])


@hookimpl
def register_task_selectors() -> dict[str, Any]:
    return {"sequential": SequentialSelector}
