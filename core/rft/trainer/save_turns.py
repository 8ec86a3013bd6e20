"""``trainer.save_strategy``: which ranks of a sharded trainer write a checkpoint at once.

A sharded checkpoint (:mod:`rft.trainer.sharded_checkpoint`) is written by every rank:
its shards of the model and optimizer (DCP) and its random generators. The strategy gives
each rank a *turn*; ranks of one turn write together, turns go one after another::

    single_thread   turn = rank        one writer at a time (each rank writes with one
    single_process  turn = rank        thread, so both mean: one process at a time)
    single_node     turn = node index  the ranks of a node together, node after node
                                       (ranks are numbered node by node)
    unrestricted    turn = 0           every rank at once (the default)

Turns are taken inside DCP's write phase
(:class:`rft.trainer.sharded_checkpoint.TurnTakingWriter`): the save's planning
and its metadata stay collective, only the file writes wait. The ranks step through the
turns together: after turn ``t`` every rank waits in a barrier of the trainer's host-side
group (so a save of ``k`` turns lasts about ``k`` times one writer's time, and each turn
must end within ``trainer.rank_timeout``). A rank whose write fails still takes part in
the remaining barriers and raises afterwards, so the others do not hang.

The other files of a checkpoint have one writer each and follow the shards: the
Hugging Face export (rank 0, after every rank's turn), ``trainer.pt`` / ``state.json``
(the run's driver). A one-process trainer is a single writer under every strategy.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

SaveStrategy = Literal["single_thread", "single_process", "single_node", "unrestricted"]

SAVE_STRATEGIES: tuple[SaveStrategy, ...] = ("single_thread", "single_process", "single_node",
                                             "unrestricted")


def save_turns(strategy: SaveStrategy, node_ids: Sequence[str]) -> list[int]:
    """The turn of each rank (``node_ids[r]``: rank ``r``'s node), in rank order (see the
    module docstring); nodes are numbered in the order their first rank appears."""
    if strategy in ("single_thread", "single_process"):
        return list(range(len(node_ids)))
    if strategy == "single_node":
        order: dict[str, int] = {}
        return [order.setdefault(node, len(order)) for node in node_ids]
    if strategy == "unrestricted":
        return [0] * len(node_ids)
    raise ValueError(f"trainer.save_strategy: unknown strategy {strategy!r}")


@dataclass(frozen=True)
class SaveTurn:
    """One rank's place in a save: its turn of ``turns``, and the barrier that ends a
    turn on every rank (``None`` for a single writer)."""

    turn: int = 0
    turns: int = 1
    barrier: Callable[[], None] | None = None


@dataclass(frozen=True)
class SaveWindow:
    """When one rank wrote its files (``time.time()`` seconds; logs and tests)."""

    rank: int
    turn: int
    start: float
    end: float


__all__ = ["SAVE_STRATEGIES", "SaveStrategy", "SaveTurn", "SaveWindow", "save_turns"]
