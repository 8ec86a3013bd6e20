"""An in-memory FIFO with the crash guarantees of the ``sql`` buffer, for a queue that
outlives the processes reading and writing it (the shared queue actor of modes ``explore``
+ ``train``, :mod:`rft.distributed.shared_queue`).

:class:`LeasedQueueStorage` is a :class:`~rft.buffer.storage.QueueStorage` (optionally
backed up to a SQLite or JSON lines file) that, like
:class:`~rft.buffer.storage.SQLStorage`:

- keeps a leased read (:meth:`read_leased`, training step ``s``) until
  :meth:`commit_leases` covers ``s``; :meth:`recover_leases` ``(N)`` makes the leases of
  steps ``<= N`` final and puts the others back at the front of the queue, in the order
  they were read — a trainer restarted from ``global_step_N`` reads them again;
- skips a keyed write whose key it already holds (an explore step redone after a crash);
- serves one **reader session** at a time: :meth:`recover_leases` opens a new one, and a
  read of an older session (a read call still waiting in the queue's thread for a trainer
  that was killed) takes nothing and raises :class:`ReaderSuperseded`, so no row is handed
  to a reader that is gone.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from rft.buffer.storage import BufferTimeout, QueueStorage, log_skipped_write
from rft.errors import RftError
from rft.experience import Experience


class ReaderSuperseded(RftError):
    """A read of a reader session that a newer one replaced (another trainer resumed)."""


@dataclass(frozen=True)
class QueueTotals:
    """What the queue holds and has handed out, over every process that used it."""

    appended: int
    """Experiences written (keyed writes skipped as repeats not counted)."""
    final: int
    """Reads made final (committed or covered by a resumed checkpoint)."""
    leased: int
    """Reads not final yet."""
    available: int
    """Experiences waiting to be read."""


class LeasedQueueStorage(QueueStorage):
    """In-memory FIFO with leases, idempotent keyed writes and reader sessions (see the
    module docstring)."""

    def __init__(self, name: str, path: str | None = None) -> None:
        super().__init__(name, path)
        self._leases: list[tuple[int, Experience]] = []  # (training step, row), read order
        self._keys: dict[str, int] = {}  # key -> rows written under it
        self._reader: str | None = None
        self._appended = 0
        self._final = 0

    def _append_keyed(self, experiences: list[Experience], key: str | None) -> None:
        if key is not None and experiences:  # an empty write records no key
            if key in self._keys:
                log_skipped_write(self.name, key, self._keys[key], len(experiences))
                return  # written before the writer crashed: the redone step's rows are here
            self._keys[key] = len(experiences)
        super()._append_keyed(experiences, key)
        self._appended += len(experiences)

    def read_leased(self, count: int, timeout: float, step: int | None,
                    reader: str) -> list[Experience]:
        """Take the ``count`` oldest experiences for session ``reader`` as leases of
        training step ``step`` (``None``: final at once), waiting at most ``timeout`` s.

        :raises BufferTimeout: fewer than ``count`` arrived in time (none are taken).
        :raises ReaderSuperseded: another session took over while this read waited.
        """
        deadline = time.monotonic() + timeout
        with self._lock:
            if self._reader is None:
                self._reader = reader
            while True:
                if self._reader != reader:
                    raise ReaderSuperseded(
                        f"experience buffer {self.name!r}: another trainer took over the "
                        "queue (a trainer resumed while this one still read)")
                if self._available() >= count:
                    break
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise BufferTimeout(
                        f"experience buffer {self.name!r}: waited {timeout:g} s for {count} "
                        f"experiences, {self._available()} available (written "
                        f"{self._appended}, read {self._final + len(self._leases)})")
                self._lock.wait(remaining)
            taken = self._take(count)
            if step is None:
                self._final += len(taken)
            else:
                self._leases.extend((step, experience) for experience in taken)
            self.read_count += len(taken)
            return taken

    def commit_leases(self, step: int) -> int:
        with self._lock:
            kept = [(s, e) for s, e in self._leases if s > step]
            made_final = len(self._leases) - len(kept)
            self._leases = kept
            self._final += made_final
            return made_final

    def recover_leases(self, step: int, reader: str | None = None) -> tuple[int, int]:
        """Settle the leases with the checkpoint of ``step`` (see the module docstring) and
        open session ``reader``; a read of an earlier session stops."""
        with self._lock:
            made_final = self.commit_leases(step)
            returned = [experience for _, experience in self._leases]
            self._leases = []
            self._queue.extendleft(reversed(returned))  # first read, first again
            self.read_count -= len(returned)
            self._reader = reader
            self._lock.notify_all()
            return made_final, len(returned)

    def totals(self) -> QueueTotals:
        with self._lock:
            return QueueTotals(self._appended, self._final, len(self._leases),
                               self._available())
