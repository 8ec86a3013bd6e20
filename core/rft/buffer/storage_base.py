"""The experience storage contract: :class:`ExperienceStorage` (counted FIFO with leases
and idempotent writes, see :mod:`rft.buffer.storage`), its errors and the write keys."""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol

from rft.errors import RftError
from rft.experience import Experience

log = logging.getLogger("rft.buffer.storage")


def explore_step_key(job_dir: str, step: int) -> str:
    """The idempotency key of explore step ``step`` of the run whose job dir is ``job_dir``
    (``explore step 3 of /abs/ckpt/project/name``): a run resumed in its job dir redoes a
    step under the same key, another run sharing the buffer file writes under its own."""
    return f"explore step {step} of {os.path.abspath(job_dir)}"


def log_skipped_write(name: str, key: str, held: int | None, rows: int) -> None:
    """Record that a keyed write of ``rows`` experiences was skipped because the storage
    holds key ``key`` already (``held`` rows, ``None``: not counted): an info line, a
    warning when the counts differ (the redone step produced other experiences)."""
    if held is not None and held != rows:
        log.warning("experience buffer %r: %r was written before (%d experiences); this "
                    "write of the redone step (%d experiences) is not stored", name, key,
                    held, rows)
    else:
        log.info("experience buffer %r: %r was written before; the redone step's %d "
                 "experiences are not stored again", name, key, rows)


class BufferTimeout(RftError):
    """Not enough experiences arrived in time."""


class BufferEmpty(RftError):
    """The buffer is empty and no writer will add experiences before the next read."""


class ReadAssembler(Protocol):
    """What :meth:`ExperienceStorage.read` needs of a
    :class:`rft.buffer.streaming.GroupAssembler`."""

    @property
    def ready_count(self) -> int: ...

    @property
    def held_count(self) -> int: ...

    def add(self, experiences: list[Experience]) -> None: ...

    def flush(self) -> None: ...

    def take(self, count: int, *, whole_first: bool) -> list[Experience]: ...


class ExperienceStorage(ABC):
    """FIFO of experiences with counters; safe to use from several threads.

    ``written`` / ``read_count`` count what *this process* wrote and read.
    """

    poll_interval: float | None = None
    """Seconds between availability checks of a waiting :meth:`read`; ``None``: only a
    :meth:`write` of this process wakes it (storages that other processes also write set
    a value)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.written = 0
        self.read_count = 0
        self._lock = threading.Condition()
        self._writers_idle = False
        self._write_key: str | None = None
        self._write_index = 0
        self._lease: int | None = None
        self.assembler: ReadAssembler | None = None
        """Forms batches of complete groups (:class:`rft.buffer.streaming.GroupAssembler`);
        ``None``: experiences in the order they were written."""
        self.read_filter: Callable[[list[Experience]], list[Experience]] | None = None
        """Drops experiences a read took (:class:`rft.buffer.staleness.StalenessGate`);
        :meth:`read` takes more in their place. ``None``: every experience read is kept."""

    def write(self, experiences: Sequence[Experience], key: str | None = None) -> None:
        """Append experiences (all or none); inside :meth:`idempotent_writes` (or with an
        explicit ``key``: a write forwarded from another process) a storage that already
        holds the write's key skips it (and still counts it as written)."""
        with self._lock:
            self._append_keyed(list(experiences), key if key is not None else self._next_key())
            self.written += len(experiences)
            self._writers_idle = False
            self._lock.notify_all()

    @contextlib.contextmanager
    def idempotent_writes(self, key: str) -> Iterator[None]:
        """Writes inside are keyed ``key``, ``key#1``, … (e.g. ``explore step 7``): a
        storage that outlives the process skips a key it already holds."""
        with self._lock:
            self._write_key, self._write_index = key, 0
        try:
            yield
        finally:
            with self._lock:
                self._write_key = None

    def _next_key(self) -> str | None:
        """The key of the next write inside :meth:`idempotent_writes` (``None`` outside);
        the caller holds the lock."""
        if self._write_key is None:
            return None
        index, self._write_index = self._write_index, self._write_index + 1
        return self._write_key if index == 0 else f"{self._write_key}#{index}"

    def _append_keyed(self, experiences: list[Experience], key: str | None) -> None:
        """:meth:`_append` under an idempotency key (only durable storages use it)."""
        self._append(experiences)

    # ---- leases (see the module docstring) ---------------------------------------------

    def lease_reads(self, step: int | None) -> None:
        """Reads from now on are leases of training step ``step`` (``None``: final at once)."""
        with self._lock:
            self._lease = step

    def commit_leases(self, step: int) -> int:
        """The checkpoint of ``step`` is saved: leases of steps ``<= step`` become final.
        Returns how many rows that made final (0 for storages without leases)."""
        return 0

    def recover_leases(self, step: int) -> tuple[int, int]:
        """A trainer resumed from the checkpoint of ``step`` (0: none): leases of steps
        ``<= step`` become final, later ones go back to the buffer. Returns ``(made final,
        returned)``."""
        return 0, 0

    # ---- state in checkpoints ------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint keeps of this storage: the counters (and, for storages that do
        not outlive the process, their contents)."""
        return {"written": self.written, "read": self.read_count}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` (a checkpoint's) into a freshly opened storage."""
        with self._lock:
            self.written = int(state.get("written", self.written))
            self.read_count = int(state.get("read", self.read_count))

    def writers_idle(self) -> None:
        """Declare that no writer adds experiences before the next read (colocate mode: the
        explorer's step is over). Until the next :meth:`write`, a read that cannot be filled
        takes what is there instead of waiting, and raises :class:`BufferEmpty` if that is
        nothing."""
        with self._lock:
            self._writers_idle = True
            self._lock.notify_all()

    def read(self, count: int, timeout: float) -> list[Experience]:
        """:meth:`_read` of ``count``, with the trainer's read stages when set:

        - :attr:`assembler` (``synchronizer.streaming_batches``): what is taken goes to the
          assembler, and the batch is formed of the complete groups it releases (reading
          what is there, waiting only when nothing is);
        - :attr:`read_filter` (``synchronizer.max_staleness``): experiences it drops are
          replaced by the next ones.

        Reads go on until ``count`` are kept, the writers are idle with none left (fewer
        are returned, incomplete groups released; :class:`BufferEmpty` when none were
        kept) or ``timeout`` s have passed (incomplete groups are then released with a
        warning; :class:`BufferTimeout` when nothing is held).
        """
        if self.read_filter is None and self.assembler is None:
            return self._read(count, timeout)
        deadline = time.monotonic() + timeout
        kept: list[Experience] = []
        while len(kept) < count:
            try:
                batch = self._next_batch(count - len(kept), deadline, timeout,
                                         first=not kept)
            except BufferEmpty as exc:
                if kept:
                    return kept
                raise BufferEmpty(self._with_dropped(str(exc))) from None
            except BufferTimeout as exc:
                if kept and self.assembler is not None:  # its held groups were released
                    return kept
                raise BufferTimeout(self._with_dropped(str(exc))) from None
            if not batch:  # the next complete group does not fit: a smaller batch
                return kept
            kept.extend(self.read_filter(batch) if self.read_filter is not None else batch)
        return kept

    def _next_batch(self, wanted: int, deadline: float, timeout: float, *,
                    first: bool) -> list[Experience]:
        """Up to ``wanted`` experiences for :meth:`read`: :meth:`_read` of ``wanted``, or
        with an :attr:`assembler` whole complete groups (read until it has enough, or the
        writers are idle and it releases the rest); none when the next group does not fit
        (a batch's ``first`` group is taken whole even when larger).

        :raises BufferEmpty: nothing to read and nothing held.
        """
        assembler = self.assembler
        if assembler is None:
            return self._read(wanted, max(0.0, deadline - time.monotonic()))
        while assembler.ready_count < wanted:
            need = wanted - assembler.ready_count
            chunk = max(1, min(need, self.available()))  # what is there; one when nothing
            try:
                taken = self._read(chunk, max(0.0, deadline - time.monotonic()))
            except BufferEmpty:
                assembler.flush()
                if assembler.ready_count == 0:
                    raise
                break
            except BufferTimeout:
                if assembler.held_count:  # runs that never come: train what there is
                    log.warning("experience buffer %r: waited %g s for complete groups; "
                                "%d experience(s) of incomplete groups are trained as they "
                                "are", self.name, timeout, assembler.held_count)
                    assembler.flush()
                    break
                raise BufferTimeout(
                    f"experience buffer {self.name!r}: waited {timeout:g} s for {wanted} "
                    f"experiences in complete groups, {assembler.ready_count} complete, "
                    f"{assembler.held_count} held in incomplete groups (written "
                    f"{self.written}, read {self.read_count})") from None
            assembler.add(taken)
        return assembler.take(wanted, whole_first=first)

    def _with_dropped(self, message: str) -> str:
        """``message`` (ending in ``)``) with ``, dropped N as stale`` inside its last
        parenthesis when the read filter dropped some."""
        dropped = int(getattr(self.read_filter, "dropped", 0))
        if not dropped or not message.endswith(")"):
            return message
        return f"{message[:-1]}, dropped {dropped} as stale)"

    def _read(self, count: int, timeout: float) -> list[Experience]:
        """Take the ``count`` oldest unread experiences, waiting at most ``timeout`` s.

        After :meth:`writers_idle` it takes the (fewer) experiences there are at once.

        :raises BufferTimeout: fewer than ``count`` were available in time (none are taken).
        :raises BufferEmpty: none are there and the writers are idle.
        """
        deadline = time.monotonic() + timeout
        with self._lock:
            while self._available() < count:
                if self._writers_idle:
                    if self._available() == 0:
                        raise BufferEmpty(
                            f"experience buffer {self.name!r}: empty and no writer will add "
                            f"experiences (written {self.written}, read {self.read_count})")
                    count = self._available()
                    break
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise BufferTimeout(
                        f"experience buffer {self.name!r}: waited {timeout:g} s for {count} "
                        f"experiences, {self._available()} available (written {self.written}, "
                        f"read {self.read_count})")
                self._lock.wait(remaining if self.poll_interval is None
                                else min(remaining, self.poll_interval))
            taken = self._take(count)
            self.read_count += len(taken)
            return taken

    def available(self) -> int:
        with self._lock:
            return self._available()

    @abstractmethod
    def _append(self, experiences: list[Experience]) -> None: ...

    @abstractmethod
    def _available(self) -> int: ...

    @abstractmethod
    def _take(self, count: int) -> list[Experience]: ...

    def close(self) -> None:
        """Release files and connections."""
