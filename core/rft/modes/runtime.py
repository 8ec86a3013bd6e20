"""What a mode asks of the cluster runtime, as typed interfaces.

The modes' logic does not import Ray: the launcher hands each mode's entry point a
:class:`Distributed` (:class:`rft.distributed.ray_runtime.RayDistributed`, the Ray
implementation), which joins or starts the run's cluster, makes the engines that live in
actors (a pool of rollout engines, one engine in each trainer rank, auxiliary models'
pools), opens the queue shared by an explore and a train process, and starts the actors
of mode ``both`` (:class:`BothActors`).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from rft.buffer.factory import BufferOpener
from rft.config import Stage
from rft.config.plan import RunPlan
from rft.config.schema import RftConfig
from rft.engines.engine import InferenceEngine
from rft.modes.stage import StageResult
from rft.rollout.auxiliary import AuxiliaryEngineBuilder
from rft.trainer.base import Trainer

EngineBuilder = Callable[[RftConfig, type[InferenceEngine]], InferenceEngine]
"""Makes the rollout engine from the stage's config and the engine plugin's class."""

Role = Literal["explorer", "trainer", "buffer"]
"""An actor of mode ``both``."""

Ref = object
"""A call in flight on an actor (what :meth:`BothActors.call` returns; hashable); passed
as an argument of another call, the callee receives its value."""


class RolloutEngines(Protocol):
    """Where a colocated stage's rollout engine runs and how the trainer's weights reach it
    (:class:`rft.modes.colocate.LocalEngine`, or an engine in each trainer rank)."""

    @property
    def engine(self) -> InferenceEngine:
        """What the explorer calls (one engine, or several used as one)."""

    def make_room(self) -> None:
        """The stage's trainer is about to be built: engines built already release their
        device memory (and take it back in :meth:`attach`)."""

    def attach(self, trainer: Trainer) -> None:
        """The stage's trainer is built (engines that live in its ranks start now)."""

    def training(self) -> AbstractContextManager[None]:
        """Around a train step: the engines release their device memory (when they can)."""

    def sync(self, version: int) -> dict[str, float]:
        """The trainer's weights into the engine(s) as ``version``; returns metrics."""

    def close(self) -> None:
        """Stop what :meth:`attach` started."""


@dataclass
class Call:
    """A call in flight on an actor of mode ``both``: which actor, what, for which step
    (named in the one-line error when it fails)."""

    role: Role
    what: str
    step: int


class BothActors(Protocol):
    """The buffer, explorer and trainer actors of one ``both`` stage and how calls reach
    them. Every failure of a call (a dead actor, an error raised in it, a timeout) is one
    :class:`~rft.errors.RftError` line naming the actor."""

    def start_buffer(self) -> None:
        """Start the experience buffer's actor."""

    def start_explorer(self) -> None:
        """Start the explorer's actor (it writes to the buffer)."""

    def start_trainer(self, steps: int, *, broadcasting: bool) -> None:
        """Start the trainer's actor for ``steps`` steps (``broadcasting``: with a thread of
        its own for weight broadcasts, :data:`BROADCAST_GROUP`)."""

    def call(self, role: Role, method: str, *args: Any, broadcast: bool = False) -> Ref:
        """Start ``method(*args)`` on ``role``'s actor (``broadcast``: in the trainer's
        broadcast thread); do not wait."""

    def get(self, ref: Ref, call: Call, timeout: float | None = None) -> Any:
        """The call's value, waiting for it (at most ``timeout`` seconds)."""

    def ready(self, refs: list[Ref], timeout: float) -> list[Ref]:
        """The first of ``refs`` to finish within ``timeout`` seconds (none: empty)."""

    def settle(self, ref: Ref) -> None:
        """Wait until ``ref`` has finished (its value stays to be taken)."""

    def alive(self, role: Role) -> bool:
        """``role``'s actor was started and is not known to have died."""

    def close(self) -> None:
        """Close every actor and stop them (dead ones are skipped)."""


class Distributed(Protocol):
    """The cluster runtime a mode's entry point receives."""

    def cluster(self, stage: Stage) -> AbstractContextManager[None]:
        """The run's cluster, joined or started for the block (a private one stops with it;
        the timeline written when asked)."""

    def detect_resources(self, stage: Stage) -> Stage:
        """``stage`` with ``cluster.gpu_per_node`` (and the GPU split) from the joined
        cluster when unset: a new stage and plan (the config is frozen); else ``stage``."""

    def engine_pool(self, config: RftConfig) -> EngineBuilder:
        """Makes the rollout engine as a pool of ``engine_num`` engine actors."""

    def auxiliary_pools(self, config: RftConfig) -> AuxiliaryEngineBuilder:
        """Makes each auxiliary model's engine (a pool of actors for ``engine_num > 1``)."""

    def rank_engines(self, plan: RunPlan) -> RolloutEngines:
        """A rollout engine in each rank of the stage's sharded trainer."""

    def shares_queue(self, config: RftConfig, train_only: bool = False) -> bool:
        """The stage's experience buffer is a queue that an explore and a train process
        share."""

    def run_sharing_queue(self, stage: Stage, side: Literal["explorer", "trainer"],
                          run: Callable[[BufferOpener], StageResult]) -> StageResult:
        """Run ``side``'s stage (``run``, given the opener of its buffer) on the shared
        queue."""

    def both_actors(self, stage: Stage) -> BothActors:
        """The actors of a ``both`` stage (none started yet)."""


BROADCAST_GROUP = "broadcast"
"""The trainer actor's concurrency group for weight broadcasts (``sync_method: nccl``)."""


__all__ = ["BROADCAST_GROUP", "BothActors", "Call", "Distributed", "EngineBuilder",
           "Ref", "Role", "RolloutEngines"]
