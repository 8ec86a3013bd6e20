"""The ``sql`` experience storage: a SQLite table shared by a writer and a reader process."""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Callable
from typing import Any, TypeVar

from rft.buffer.experience_codec import experience_from_dict, experience_to_dict
from rft.buffer.retry import NO_RETRY, RetryPolicy, retrying
from rft.buffer.storage_base import ExperienceStorage, log_skipped_write
from rft.errors import RftError
from rft.experience import Experience

T = TypeVar("T")


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
        """Close the connection once no other thread is inside an operation (the buffer
        actor serves calls from several threads: closing a connection mid-transaction
        crashes SQLite); later calls fail in one line (``Cannot operate on a closed
        database``)."""
        with self._lock:
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
