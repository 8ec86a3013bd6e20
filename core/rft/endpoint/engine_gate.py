"""A readers–writer gate between engine calls and weight updates (``mode: serve``).

The endpoint's engine calls run in threads of their own, several at once; a weight update
(:meth:`EngineGate.updating`) waits until the calls in flight are answered, and calls that
arrive meanwhile wait for the update, so no response mixes two weight versions and an
update is never starved by a steady stream of requests.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator


class EngineGate:
    """Many engine calls at once, or one weight update alone (writer first)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._calls = 0
        self._updating = False
        self._waiting_updates = 0

    @contextlib.contextmanager
    def calling(self) -> Iterator[None]:
        """Around one engine call: waits while an update runs or waits to run."""
        with self._cond:
            while self._updating or self._waiting_updates:
                self._cond.wait()
            self._calls += 1
        try:
            yield
        finally:
            with self._cond:
                self._calls -= 1
                self._cond.notify_all()

    @contextlib.contextmanager
    def updating(self) -> Iterator[None]:
        """Around a weight update: waits for the calls in flight, holds new ones back."""
        with self._cond:
            self._waiting_updates += 1
            while self._updating or self._calls:
                self._cond.wait()
            self._waiting_updates -= 1
            self._updating = True
        try:
            yield
        finally:
            with self._cond:
                self._updating = False
                self._cond.notify_all()


__all__ = ["EngineGate"]
