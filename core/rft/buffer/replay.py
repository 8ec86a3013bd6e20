"""Replay buffer: a queue whose experiences may be read again, by priority.

With ``experience_buffer.replay_buffer.enable`` the queue keeps every experience after it
is read. Each read takes the highest-priority experiences that are not cooling down
(read less than ``reuse_cooldown_time`` seconds ago); with ``reuse_cooldown_time: null``
an experience is never read twice. The priority function is a plugin
(``register_priority_fns``); the built-in ones are in :mod:`rft.builtin.priority`.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from rft.buffer.storage import ExperienceStorage, write_backup
from rft.experience import Experience


@dataclass
class ReplayItem:
    """An experience in the replay buffer with its usage."""

    experience: Experience
    use_count: int = 0
    last_used: float = float("-inf")


class PriorityFn(Protocol):
    """A replay priority function (``register_priority_fns``): higher is read first."""

    def __call__(self, item: ReplayItem, args: Any, rng: random.Random) -> float:
        """Score of ``item``; ``args`` is the function's built ``Args`` (or ``None``)."""


class ReplayStorage(ExperienceStorage):
    """In-process replay buffer (see the module docstring).

    :param capacity: most experiences kept; the lowest-priority ones are evicted.
    :param backup: where every write is also appended (the queue's ``path``,
        :func:`~rft.buffer.storage.queue_backup`); ``None``: nowhere.
    """

    def __init__(self, name: str, priority_fn: PriorityFn, priority_fn_args: Any,
                 reuse_cooldown_time: float | None, capacity: int = 10000,
                 seed: int = 0, clock: Callable[[], float] = time.monotonic,
                 backup: ExperienceStorage | None = None) -> None:
        super().__init__(name)
        self._backup = backup
        self._priority = priority_fn
        self._args = priority_fn_args
        self._cooldown = reuse_cooldown_time
        self._capacity = capacity
        self._rng = random.Random(seed)
        self._clock = clock
        self._items: list[ReplayItem] = []

    def _append_keyed(self, experiences: list[Experience], key: str | None) -> None:
        write_backup(self._backup, experiences, key)
        self._append(experiences)

    def close(self) -> None:
        if self._backup is not None:
            self._backup.close()

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

    def state_dict(self) -> dict[str, Any]:
        """Counters, items (with their use counts and how long ago they were used) and the
        random generator's state: a resumed run reads what it would have read."""
        now = self._clock()
        with self._lock:
            return {**super().state_dict(), "rng": self._rng.getstate(),
                    "items": [(i.experience, i.use_count, now - i.last_used)
                              for i in self._items]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        now = self._clock()
        with self._lock:
            if "rng" in state:
                self._rng.setstate(state["rng"])
            if "items" in state:
                self._items = [ReplayItem(exp, int(uses), now - age)
                               for exp, uses, age in state["items"]]

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
