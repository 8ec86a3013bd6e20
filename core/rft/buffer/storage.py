"""Experience storages: where the explorer writes experiences and the trainer reads them.

``buffer.trainer_input.experience_buffer.storage_type`` selects one:

- ``queue`` — in-process FIFO; with a ``path`` every write is also appended to its backup
  (a durable copy of everything explored, :func:`queue_backup`): a SQLite file
  (``sqlite:///…``, ``.db``) or JSON lines (``.jsonl`` / ``.json``), readable afterwards
  as a ``sql`` / ``file`` buffer.
- ``sql`` — SQLite table: durable, survives restarts; reads mark rows as consumed. One
  process may write while another reads (``explore`` + ``train`` modes).
- ``file`` — JSON lines, append-only; for explore-only runs and debugging.

All three count what was written and read, so a run can prove that nothing was lost or
read twice. ``read`` waits up to ``timeout`` seconds for enough experiences and then
raises :class:`BufferTimeout` naming the buffer.

Crashes (see ``docs/faults.md``):

- **Leases.** After :meth:`ExperienceStorage.lease_reads` ``(step)`` a read is a *lease*
  of training step ``step``: the rows are taken, but the read becomes final only with
  :meth:`~ExperienceStorage.commit_leases` once the checkpoint covering ``step`` is saved.
  A restarted trainer calls :meth:`~ExperienceStorage.recover_leases` with the step of
  the checkpoint it resumed from: the leases it covers become final, the others go back to
  the buffer and are read again, in the same order (``sql``; in-memory storages are
  restored from the checkpoint instead, :meth:`~ExperienceStorage.state_dict`).
- **Idempotent writes.** Inside :meth:`~ExperienceStorage.idempotent_writes` ``(key)`` a
  storage that outlives the process (``sql``, ``file``, a ``queue``'s backup) skips a
  write whose key it already holds, so a step redone after a crash writes its experiences once.
  The key belongs to the run (:func:`explore_step_key`: the step *and* the job dir), so two
  runs sharing one file (a relative ``sqlite:///gsm8k.db``) both keep their rows; an empty
  write records no key (a failed attempt that wrote nothing does not block the redone
  step); a skipped write is logged (a warning when its row count differs from the held one).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sqlite3
import threading
import time
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

import torch

from rft.buffer.retry import NO_RETRY, RetryPolicy, retrying
from rft.config.buffer_paths import queue_backup_kind, resolve_queue_backup, sqlite_file
from rft.errors import RftError
from rft.experience import EID, Experience

T = TypeVar("T")

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


_TENSOR_FIELDS = ("token_level_reward", "logprobs", "action_mask", "advantages", "returns",
                  "teacher_logprobs")


def experience_to_dict(exp: Experience) -> dict[str, Any]:
    """JSON-able form of an experience (tensors as lists)."""
    data: dict[str, Any] = {
        "tokens": exp.tokens.tolist(),
        "prompt_length": exp.prompt_length,
        "reward": exp.reward,
        "eid": {"batch": exp.eid.batch, "task": exp.eid.task, "run": exp.eid.run,
                "step": exp.eid.step, "suffix": exp.eid.suffix},
        "model_version": exp.model_version,
        "info": exp.info,
        "metrics": exp.metrics,
        "response_text": exp.response_text,
    }
    for name in _TENSOR_FIELDS:
        value = getattr(exp, name)
        data[name] = None if value is None else value.tolist()
    return data


def experience_from_dict(data: dict[str, Any]) -> Experience:
    """Inverse of :func:`experience_to_dict`."""
    tensors = {}
    for name in _TENSOR_FIELDS:
        value = data.get(name)
        if value is not None:
            dtype = torch.bool if name == "action_mask" else torch.float32
            tensors[name] = torch.tensor(value, dtype=dtype)
    return Experience(
        tokens=torch.tensor(data["tokens"], dtype=torch.long),
        prompt_length=int(data["prompt_length"]),
        reward=data.get("reward"),
        eid=EID(**data.get("eid", {})),
        model_version=int(data.get("model_version", 0)),
        info=data.get("info") or {},
        metrics=data.get("metrics") or {},
        response_text=data.get("response_text"),
        **tensors,
    )


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


class QueueStorage(ExperienceStorage):
    """In-process FIFO; with a ``path`` every write is also appended to its backup, a
    SQLite file or JSON lines (:func:`queue_backup`)."""

    def __init__(self, name: str, path: str | None = None) -> None:
        super().__init__(name)
        self._queue: deque[Experience] = deque()
        self._mirror = queue_backup(name, path)

    def _append(self, experiences: list[Experience]) -> None:
        self._append_keyed(experiences, None)

    def _append_keyed(self, experiences: list[Experience], key: str | None) -> None:
        write_backup(self._mirror, experiences, key)
        self._queue.extend(experiences)

    def _available(self) -> int:
        return len(self._queue)

    def _take(self, count: int) -> list[Experience]:
        return [self._queue.popleft() for _ in range(count)]

    def state_dict(self) -> dict[str, Any]:
        with self._lock:
            return {**super().state_dict(), "items": list(self._queue)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        with self._lock:
            self._queue = deque(state.get("items", []))

    def close(self) -> None:
        if self._mirror is not None:
            self._mirror.close()


class SQLStorage(ExperienceStorage):
    """SQLite table ``experiences(id, consumed, payload, read_step, leased)``; committed on
    every write/read.

    Safe for a writer process and a reader process on one file (``explore`` + ``train``):

    - WAL journal: readers never block the writer, the writer never blocks readers;
    - a busy timeout (:attr:`BUSY_TIMEOUT_S`) instead of "database is locked" errors;
    - a read selects and marks its rows inside one ``BEGIN IMMEDIATE`` transaction, so two
      readers can never take the same row;
    - ``consumed`` counts the reads of a row (a row read twice would show 2);
    - :meth:`available` asks the database, and a waiting read polls it every
      :attr:`poll_interval` seconds, so rows written by another process are seen;
    - a leased read (:meth:`lease_reads`) records the training step in ``read_step`` and
      sets ``leased`` until :meth:`commit_leases`; :meth:`recover_leases` returns the
      uncovered ones (``consumed`` back to 0);
    - keyed writes (:meth:`idempotent_writes`) record their key in table ``writes`` in the
      same transaction as their rows;
    - an operation that fails on a database still locked after the busy timeout (or with a
      disk I/O error) is tried again ``retry.times`` times every ``retry.interval``
      seconds (``max_retry_times`` / ``max_retry_interval``, :mod:`rft.buffer.retry`),
      then one line names the buffer and the last cause.
    """

    BUSY_TIMEOUT_S = 60.0
    """Seconds a statement waits for another connection's lock."""
    poll_interval = 0.2

    def __init__(self, name: str, path: str, retry: RetryPolicy = NO_RETRY) -> None:
        super().__init__(name)
        self.path = path
        self.retry = retry
        directory = os.path.dirname(os.path.abspath(path))
        try:
            os.makedirs(directory, exist_ok=True)
        except OSError as exc:
            raise RftError(f"experience buffer {name!r}: cannot open SQLite file {path!r}: "
                           f"{exc}") from exc

        def connect() -> sqlite3.Connection:
            try:
                return self._connect(path)
            except sqlite3.Error as exc:
                raise RftError(f"experience buffer {name!r}: cannot open SQLite file "
                               f"{path!r}: {exc}") from exc

        self._db = self._retrying(connect)

    def _retrying(self, operation: Callable[[], T]) -> T:
        """``operation()`` tried again after a transient SQLite error (:attr:`retry`)."""
        return retrying(self.retry, f"experience buffer {self.name!r} ({self.path})",
                        operation, _sqlite_transient)

    def _connect(self, path: str) -> sqlite3.Connection:
        """Open, switch to WAL, create the tables (adding the lease columns to a file of an
        older rft). Switching the journal mode may fail with "database is locked" without
        waiting while another process opens the same new file, so the set-up is retried
        until the busy timeout."""
        deadline = time.monotonic() + self.BUSY_TIMEOUT_S
        while True:
            # isolation_level=None: no implicit transactions; ours are explicit
            db = sqlite3.connect(path, timeout=self.BUSY_TIMEOUT_S, check_same_thread=False,
                                 isolation_level=None)
            try:
                db.execute("PRAGMA journal_mode=WAL")
                db.execute("CREATE TABLE IF NOT EXISTS experiences (id INTEGER PRIMARY KEY "
                           "AUTOINCREMENT, consumed INTEGER NOT NULL DEFAULT 0, payload TEXT, "
                           "read_step INTEGER, leased INTEGER NOT NULL DEFAULT 0)")
                db.execute("CREATE TABLE IF NOT EXISTS writes (key TEXT PRIMARY KEY, "
                           "rows INTEGER NOT NULL)")
                columns = {row[1] for row in db.execute("PRAGMA table_info(experiences)")}
                for column, kind in (("read_step", "INTEGER"),
                                     ("leased", "INTEGER NOT NULL DEFAULT 0")):
                    if column not in columns:
                        try:
                            db.execute(f"ALTER TABLE experiences ADD COLUMN {column} {kind}")
                        except sqlite3.OperationalError as exc:  # another process added it
                            if "duplicate column" not in str(exc):
                                raise
                return db
            except sqlite3.OperationalError as exc:
                db.close()
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def _immediate(self) -> _Transaction:
        """A write transaction that holds the database's write lock from its start."""
        return _Transaction(self._db, f"experience buffer {self.name!r} ({self.path})")

    def _append(self, experiences: list[Experience]) -> None:
        self._append_keyed(experiences, None)

    def _append_keyed(self, experiences: list[Experience], key: str | None) -> None:
        payloads = [(json.dumps(experience_to_dict(e)),) for e in experiences]

        def append() -> int | None:
            """The row count held under ``key`` when the write is skipped, else ``None``."""
            with self._immediate():
                if key is not None and payloads:  # an empty write records no key
                    held = self._db.execute("SELECT rows FROM writes WHERE key = ?",
                                            (key,)).fetchone()
                    if held is not None and held[0] > 0:
                        return int(held[0])  # written before a crash: the rows are there
                    # (an empty write's key, recorded by an older rft, blocks nothing)
                    self._db.execute("INSERT OR REPLACE INTO writes (key, rows) VALUES (?, ?)",
                                     (key, len(payloads)))
                self._db.executemany("INSERT INTO experiences (payload) VALUES (?)", payloads)
            return None

        held = self._retrying(append)
        if held is not None and key is not None:
            log_skipped_write(self.name, key, held, len(payloads))

    def _available(self) -> int:
        return self._retrying(lambda: self._db.execute(
            "SELECT COUNT(*) FROM experiences WHERE consumed = 0").fetchone()[0])

    def _take(self, count: int) -> list[Experience]:
        return self._retrying(lambda: self._take_once(count))

    def _take_once(self, count: int) -> list[Experience]:
        with self._immediate():
            rows = self._db.execute("SELECT id, payload FROM experiences WHERE consumed = 0 "
                                    "ORDER BY id LIMIT ?", (count,)).fetchall()
            if self._lease is None:
                self._db.executemany("UPDATE experiences SET consumed = consumed + 1 "
                                     "WHERE id = ?", [(row[0],) for row in rows])
            else:
                self._db.executemany("UPDATE experiences SET consumed = consumed + 1, "
                                     "read_step = ?, leased = 1 WHERE id = ?",
                                     [(self._lease, row[0]) for row in rows])
        return [experience_from_dict(json.loads(row[1])) for row in rows]

    def commit_leases(self, step: int) -> int:
        def commit() -> int:
            with self._immediate():
                return self._db.execute("UPDATE experiences SET leased = 0 WHERE leased = 1 "
                                        "AND read_step <= ?", (step,)).rowcount

        with self._lock:
            return self._retrying(commit)

    def recover_leases(self, step: int) -> tuple[int, int]:
        def recover() -> tuple[int, int]:
            with self._immediate():
                final = self._db.execute("UPDATE experiences SET leased = 0 WHERE leased = 1 "
                                         "AND read_step <= ?", (step,)).rowcount
                returned = self._db.execute(
                    "UPDATE experiences SET consumed = consumed - 1, leased = 0, "
                    "read_step = NULL WHERE leased = 1 AND read_step > ?", (step,)).rowcount
            return final, returned

        with self._lock:
            counts = self._retrying(recover)
            self._lock.notify_all()
        return counts

    def leased(self) -> int:
        """Rows read under a lease that is not final yet."""
        return int(self._retrying(lambda: self._db.execute(
            "SELECT COUNT(*) FROM experiences WHERE leased = 1").fetchone()[0]))

    def totals(self) -> tuple[int, int]:
        """``(rows written, rows read)`` by every process, from the database."""
        written, read = self._retrying(lambda: self._db.execute(
            "SELECT COUNT(*), COALESCE(SUM(consumed > 0), 0) FROM experiences").fetchone())
        return int(written), int(read)

    def close(self) -> None:
        self._db.close()


_TRANSIENT_SQLITE = ("locked", "busy", "disk i/o error")
"""Words of an SQLite ``OperationalError`` that may pass when tried again."""


def _sqlite_transient(exc: BaseException) -> bool:
    """An error that may pass when tried again: SQLite's ``OperationalError`` of a locked
    or busy database or a disk I/O error, raw or as the cause of a :class:`_Transaction`'s
    one-line error (not, e.g., "no such table")."""
    cause = exc.__cause__ if isinstance(exc, RftError) else exc
    return isinstance(cause, sqlite3.OperationalError) and any(
        word in str(cause).lower() for word in _TRANSIENT_SQLITE)


class _Transaction:
    """``BEGIN IMMEDIATE`` … ``COMMIT`` (``ROLLBACK`` on error) on an autocommit
    connection; SQLite errors become one-line :class:`RftError` naming ``where``."""

    def __init__(self, db: sqlite3.Connection, where: str) -> None:
        self.db = db
        self.where = where

    def __enter__(self) -> None:
        try:
            self.db.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            raise RftError(f"{self.where}: cannot lock the database: {exc}") from exc

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            try:
                self.db.execute("COMMIT")
                return
            except sqlite3.Error as commit_error:
                self.db.execute("ROLLBACK")
                raise RftError(f"{self.where}: cannot commit: {commit_error}") from commit_error
        self.db.execute("ROLLBACK")
        if isinstance(exc, sqlite3.Error):
            raise RftError(f"{self.where}: {exc}") from exc


class FileStorage(ExperienceStorage):
    """Append-only JSON lines; reads go through the file from the start. A keyed write
    (:meth:`~ExperienceStorage.idempotent_writes`) stores its key in its first line
    (``"write_key"``), so a reopened file skips a key it already holds."""

    def __init__(self, name: str, path: str) -> None:
        super().__init__(name)
        try:
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
            self._file = open(path, "a+", encoding="utf-8")  # noqa: SIM115
        except OSError as exc:
            raise RftError(f"experience buffer {name!r}: cannot open {path!r}: "
                           f"{exc.strerror}") from exc
        self.path = path
        self._file.seek(0)
        self._lines = 0
        self._keys: set[str] = set()
        for line in self._file:
            self._lines += 1
            if '"write_key"' in line:
                with contextlib.suppress(ValueError, KeyError):  # a line cut by a kill
                    self._keys.add(str(json.loads(line)["write_key"]))
        self._offset = 0

    def _append(self, experiences: list[Experience]) -> None:
        self._append_keyed(experiences, None)

    def _append_keyed(self, experiences: list[Experience], key: str | None) -> None:
        if key is not None and key in self._keys:
            log_skipped_write(self.name, key, None, len(experiences))
            return  # written before a crash: the redone step's lines are there
        rows = [experience_to_dict(exp) for exp in experiences]
        if key is not None and rows:
            rows[0]["write_key"] = key
        text = "".join(json.dumps(row) + "\n" for row in rows)
        try:
            self._file.write(text)
            self._file.flush()
            os.fsync(self._file.fileno())
        except OSError as exc:
            raise RftError(f"experience buffer {self.name!r}: cannot write to {self.path}: "
                           f"{exc.strerror or exc}") from exc
        self._lines += len(experiences)
        if key is not None and rows:  # an empty write records no key (as in the file)
            self._keys.add(key)

    def _available(self) -> int:
        return self._lines - self._offset

    def _take(self, count: int) -> list[Experience]:
        self._file.seek(0)
        lines = self._file.readlines()[self._offset:self._offset + count]
        self._file.seek(0, os.SEEK_END)
        self._offset += len(lines)
        return [experience_from_dict(json.loads(line)) for line in lines]

    def state_dict(self) -> dict[str, Any]:
        with self._lock:
            return {**super().state_dict(), "offset": self._offset}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        with self._lock:
            self._offset = min(int(state.get("offset", self._offset)), self._lines)

    def close(self) -> None:
        self._file.close()


def queue_backup(name: str, path: str | None) -> ExperienceStorage | None:
    """The backup of queue ``name`` at ``path`` (:mod:`rft.config.buffer_paths`): a
    :class:`SQLStorage` (a SQLite file or ``sqlite:///`` URL), a :class:`FileStorage`
    (``.jsonl`` / ``.json``: JSON lines) or ``None`` (no path). The queue writes to it and
    never reads it; a later stage reads it as a ``sql`` / ``file`` buffer. A directory
    ``path`` holds the backup as ``<path>/<name>.jsonl``."""
    path = resolve_queue_backup(path, name)
    try:
        kind = queue_backup_kind(path)
    except ValueError as exc:
        raise RftError(f"experience buffer {name!r}: path: {exc}") from None
    if path is None or kind is None:
        return None
    if kind == "sql":
        return SQLStorage(name, sqlite_file(path))
    return FileStorage(name, path)


def write_backup(backup: ExperienceStorage | None, experiences: list[Experience],
                 key: str | None) -> None:
    """Append a queue's write to its ``backup`` (when there is one) under the write's
    idempotency ``key``: a write the backup already holds is skipped."""
    if backup is None:
        return
    if key is None:
        backup.write(experiences)
    else:
        with backup.idempotent_writes(key):
            backup.write(experiences)


STORAGES: dict[str, Callable[[str, str | None], ExperienceStorage]] = {
    "queue": lambda name, path: QueueStorage(name, path),
    "sql": lambda name, path: SQLStorage(name, path or f"{name}.db"),
    "file": lambda name, path: FileStorage(name, path or f"{name}.jsonl"),
}
"""Storage constructor per ``storage_type`` (a closed set of the core, not plugins)."""


SQLITE_URL_PREFIX = "sqlite:///"


def open_storage(storage_type: str, name: str, path: str | None,
                 retry: RetryPolicy = NO_RETRY) -> ExperienceStorage:
    """Open the storage selected by ``storage_type``; ``sqlite:///x.db`` paths are accepted.
    ``retry``: how often a failed ``sql`` operation is tried again."""
    if path and path.startswith(SQLITE_URL_PREFIX):
        path = path[len(SQLITE_URL_PREFIX):]
    if storage_type == "sql" and retry != NO_RETRY:
        return SQLStorage(name, path or f"{name}.db", retry)
    return STORAGES[storage_type](name, path)
