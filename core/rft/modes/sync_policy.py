"""When the explorer takes new weights in mode ``both`` (``synchronizer.sync_style``).

Versions count trainer steps: version ``v`` is the actor after ``v`` training steps, and
an experience carries the version that sampled it. Before each explore step the
coordinator asks the policy what the explorer must do first:

- ``fixed``: the trainer hands out its weights after every ``sync_interval`` of its steps;
  explore step ``s`` runs on exactly version
  ``need(s) = max(0, ⌊(s − 1 − sync_offset) / sync_interval⌋ · sync_interval)``,
  waiting for it when the trainer is behind. ``sync_offset = 0, sync_interval = 1`` is
  veRL's on-policy loop; ``sync_offset = 1`` lets the explorer run one step ahead (the
  batch trained at step ``t`` was sampled by version ``t − 2``).
- ``trainer_driven``: the trainer hands out weights after every ``sync_interval`` of its
  steps; the explorer takes the newest before its next step and never waits.
- ``explorer_driven``: after every ``sync_interval`` explore steps the explorer asks the
  trainer for its weights as of the end of the training step in progress, and waits for
  them; the trainer never hands out weights unasked.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Literal

Action = Literal["go", "sync", "wait", "request"]


@dataclass(frozen=True)
class Decision:
    """What the explorer does before an explore step: ``go`` at once, ``sync`` to the
    handed-out ``version``, ``wait`` for the trainer to hand out ``version``, or
    ``request`` the trainer's current weights."""

    action: Action
    version: int = 0


class SyncPolicy(ABC):
    """One ``sync_style``.

    :param interval: ``synchronizer.sync_interval`` (steps).
    :param offset: ``synchronizer.sync_offset`` (steps the explorer may run ahead).
    """

    def __init__(self, interval: int, offset: int) -> None:
        self.interval = interval
        self.offset = offset

    def hands_out_after(self, trained_step: int) -> bool:
        """Whether the trainer hands out its weights after ``trained_step`` unasked."""
        return trained_step % self.interval == 0

    @abstractmethod
    def before_explore(self, step: int, explorer_version: int,
                       handed_out: list[int]) -> Decision:
        """What the explorer does before explore step ``step``, holding
        ``explorer_version``, with the weights of the versions ``handed_out`` (ascending)
        available."""


class FixedSync(SyncPolicy):
    """``fixed`` (see the module docstring)."""

    def needed_version(self, step: int) -> int:
        """``need(s) = max(0, ⌊(s − 1 − offset) / interval⌋ · interval)``."""
        return max(0, (step - 1 - self.offset) // self.interval * self.interval)

    def before_explore(self, step: int, explorer_version: int,
                       handed_out: list[int]) -> Decision:
        need = self.needed_version(step)
        if explorer_version >= need:
            return Decision("go")
        if need in handed_out:
            return Decision("sync", need)
        return Decision("wait", need)


class TrainerDrivenSync(SyncPolicy):
    """``trainer_driven`` (see the module docstring)."""

    def before_explore(self, step: int, explorer_version: int,
                       handed_out: list[int]) -> Decision:
        if handed_out and handed_out[-1] > explorer_version:
            return Decision("sync", handed_out[-1])
        return Decision("go")


class ExplorerDrivenSync(SyncPolicy):
    """``explorer_driven`` (see the module docstring)."""

    def hands_out_after(self, trained_step: int) -> bool:
        return False

    def before_explore(self, step: int, explorer_version: int,
                       handed_out: list[int]) -> Decision:
        if step > 1 and (step - 1) % self.interval == 0:
            return Decision("request")
        return Decision("go")


SYNC_POLICIES: dict[str, type[SyncPolicy]] = {
    "fixed": FixedSync,
    "trainer_driven": TrainerDrivenSync,
    "explorer_driven": ExplorerDrivenSync,
}
"""Policy per ``synchronizer.sync_style`` (a closed set of the core)."""
