"""Where a ``both`` stage is, and the calls in flight on its actors."""

from __future__ import annotations

from dataclasses import dataclass, field

from rft.modes.run_state import RunState
from rft.modes.runtime import Call, Ref, Role

POLL_S = 0.5
"""Seconds between checks of the explorer's sync wait while nothing completes."""


@dataclass
class Progress:
    """Where the run is."""

    explored: int = 0
    trained: int = 0
    explorer_version: int = 0
    resumed: int = 0
    """The checkpoint's step a resumed run went on from: the explorer syncs to it first."""
    handed_out: dict[int, Ref] = field(default_factory=dict)
    """Version → the call that hands out the trainer's weights (newest few)."""
    explored_state: dict[int, RunState] = field(default_factory=dict)
    """Explore step → the explorer's run state after it (for checkpoints)."""
    deferred_save: tuple[int, Ref | None] | None = None
    """A checkpoint waiting for the evaluation due at its step: (step, buffer state)."""
    waiting_since: float | None = None
    waiting_for: int = 0
    idle_declared: bool = False
    last_saved: int = 0


class InFlight(dict[Ref, Call]):
    """The calls in flight: their refs and what they are."""

    def busy(self, role: Role, what: str | None = None) -> bool:
        """``role``'s actor runs a call (of kind ``what``, when given)."""
        return any(c.role == role and (what is None or c.what == what) for c in self.values())

    def evaluating(self, step: int) -> bool:
        """An evaluation due at ``step`` (or before) is still running."""
        return any(c.what == "evaluate" and c.step <= step for c in self.values())


__all__ = ["POLL_S", "InFlight", "Progress"]
