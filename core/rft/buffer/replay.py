"""Replay buffer: a queue whose experiences may be read again, by priority.

With ``experience_buffer.replay_buffer.enable`` the queue keeps every experience after it
is read. Each read takes the highest-priority experiences that are not cooling down
(read less than ``reuse_cooldown_time`` seconds ago); with ``reuse_cooldown_time: null``
an experience is never read twice. Priority functions:

- ``linear_decay``: ``priority = model_version − decay · use_count`` (fresh, rarely used
  experiences first).
- ``linear_decay_use_count_control_randomization``: the same priority plus uniform noise
  of width ``sigma``, and experiences used ``use_count_limit`` times are removed.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rft.buffer.storage import ExperienceStorage
from rft.config.convert import INVALID, to_dataclass
from rft.errors import RftError
from rft.experience import Experience


@dataclass
class ReplayItem:
    """An experience in the replay buffer with its usage."""

    experience: Experience
    use_count: int = 0
    last_used: float = float("-inf")


@dataclass
class LinearDecayArgs:
    """Arguments of ``linear_decay`` (``replay_buffer.priority_fn_args``)."""

    decay: float = 2.0
    """Priority lost per use."""


@dataclass
class RandomizedDecayArgs:
    """Arguments of ``linear_decay_use_count_control_randomization``."""

    decay: float = 2.0
    """Priority lost per use."""
    use_count_limit: int = 3
    """Experiences used this many times are removed."""
    sigma: float = 0.0
    """Width of the uniform noise added to the priority."""


PriorityFn = Callable[[ReplayItem, Any, random.Random], float]


def linear_decay(item: ReplayItem, args: LinearDecayArgs, rng: random.Random) -> float:
    """``model_version − decay · use_count``."""
    return item.experience.model_version - args.decay * item.use_count


def randomized_linear_decay(item: ReplayItem, args: RandomizedDecayArgs,
                            rng: random.Random) -> float:
    """``linear_decay`` plus ``U(0, sigma)`` noise."""
    noise = rng.uniform(0.0, args.sigma) if args.sigma > 0 else 0.0
    return item.experience.model_version - args.decay * item.use_count + noise


PRIORITY_FNS: dict[str, tuple[PriorityFn, type]] = {
    "linear_decay": (linear_decay, LinearDecayArgs),
    "linear_decay_use_count_control_randomization": (randomized_linear_decay,
                                                     RandomizedDecayArgs),
}
"""Priority function and its arguments per ``replay_buffer.priority_fn``."""


class ReplayStorage(ExperienceStorage):
    """In-process replay buffer (see the module docstring).

    :param capacity: most experiences kept; the lowest-priority ones are evicted.
    """

    def __init__(self, name: str, priority_fn: str, priority_fn_args: dict[str, Any],
                 reuse_cooldown_time: float | None, capacity: int = 10000,
                 seed: int = 0, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(name)
        if priority_fn not in PRIORITY_FNS:
            raise RftError(f"replay_buffer.priority_fn: unknown {priority_fn!r}; use "
                           + " or ".join(repr(n) for n in PRIORITY_FNS))
        self._priority, args_type = PRIORITY_FNS[priority_fn]
        problems: list[str] = []
        args = to_dataclass(args_type, dict(priority_fn_args), "replay_buffer.priority_fn_args",
                            problems)
        if problems or args is INVALID:
            raise RftError("; ".join(problems))
        self._args = args
        self._cooldown = reuse_cooldown_time
        self._capacity = capacity
        self._rng = random.Random(seed)
        self._clock = clock
        self._items: list[ReplayItem] = []

    def _append(self, experiences: list[Experience]) -> None:
        self._items += [ReplayItem(e) for e in experiences]
        if len(self._items) > self._capacity:
            self._items.sort(key=self._score, reverse=True)
            del self._items[self._capacity:]

    def _score(self, item: ReplayItem) -> float:
        return self._priority(item, self._args, self._rng)

    def _ready(self) -> list[ReplayItem]:
        now = self._clock()
        if self._cooldown is None:
            return [i for i in self._items if i.use_count == 0]
        return [i for i in self._items if i.use_count == 0 or now - i.last_used >= self._cooldown]

    def _available(self) -> int:
        return len(self._ready())

    def _take(self, count: int) -> list[Experience]:
        ready = sorted(self._ready(), key=self._score, reverse=True)[:count]
        now = self._clock()
        limit = getattr(self._args, "use_count_limit", None)
        for item in ready:
            item.use_count += 1
            item.last_used = now
        if limit is not None:
            self._items = [i for i in self._items if i.use_count < limit]
        return [item.experience for item in ready]
