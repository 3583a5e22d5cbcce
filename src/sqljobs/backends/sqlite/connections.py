"""SQLite's connections and transactions: a connection per thread (and per process after
a fork), WAL, and ``BEGIN IMMEDIATE`` for every write, so a busy database surfaces at the
start of a transaction, where the busy timeout waits it out, never half-way through. The
enqueue path and ``ctx.transaction()`` use ``synchronous=FULL``; a worker's own state
changes may use ``NORMAL``, since a lost completion only means a harmless re-run.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

from ...errors import BackendError
from ...notifiers.sqlite import SqliteNotifier
from ..base import MISSING_SCHEMA
from ..ops.markers import lending
from ..shared import SharedBackend
from .sql import Q

DURABLE_LEVELS = ("FULL", "EXTRA")
"""``synchronous`` levels at which a commit survives power loss (WAL synced at commit)."""
T = TypeVar("T")


class SqliteConnections(SharedBackend):
    """How a SQLite backend has connections and runs work on them (see :mod:`..executor`)."""

    path: str
    synchronous: str
    busy_timeout: float
    clock: Callable[[], float]
    notifier: SqliteNotifier
    _wakeups: SqliteNotifier
    _local: threading.local
    _turn: tuple[int, threading.RLock]

    def connect(self, synchronous: str | None = None) -> sqlite3.Connection:
        """A new connection with sqljobs' settings (WAL, busy timeout, autocommit mode)."""
        try:
            conn = sqlite3.connect(self.path, timeout=self.busy_timeout, isolation_level=None)
        except sqlite3.Error as exc:
            raise BackendError(f"cannot open SQLite database {self.path!r}: {exc}") from exc
        milliseconds = str(int(self.busy_timeout * 1000))
        conn.execute(Q["busy_timeout"].replace("{milliseconds}", milliseconds))
        mode = self._wal(conn)
        if mode.lower() != "wal":
            raise BackendError(f"SQLite database {self.path!r} refused WAL mode (got {mode})")
        conn.execute(Q["synchronous"].replace("{level}", synchronous or self.synchronous))
        conn.execute(Q["foreign_keys"])
        conn.execute(Q["temp_store"])
        return conn

    def _wal(self, conn: sqlite3.Connection) -> str:
        """Switch to WAL, waiting out a lock: on a new file another connection may be
        creating the schema, and SQLite answers this pragma "database is locked" at once
        instead of calling the busy handler."""
        deadline = time.monotonic() + self.busy_timeout
        while True:
            try:
                return str(conn.execute(Q["journal_mode_wal"]).fetchone()[0])
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() >= deadline:
                    conn.close()
                    raise BackendError(f"cannot open SQLite database {self.path!r}: {exc}") from exc
                time.sleep(0.005)

    def _conn(self) -> sqlite3.Connection:
        local = self._local
        if getattr(local, "pid", None) != os.getpid():  # new thread, or a forked child
            local.conn = self.connect()
            local.pid = os.getpid()
        conn: sqlite3.Connection = local.conn
        return conn

    @contextmanager
    def _writing(self) -> Iterator[sqlite3.Connection]:
        """A write transaction; what it made claimable (:meth:`_made_work`) is announced
        to the workers of every process once it committed."""
        conn = self._conn()
        turn = self._write_turn()
        if not turn.acquire(timeout=self.busy_timeout):
            raise BackendError(
                f"cannot start a write on {self.path!r}: another thread of this process "
                f"held the write lock for {self.busy_timeout:g} s (the busy timeout)"
            )
        try:
            try:
                conn.execute(Q["begin_write"])
            except sqlite3.Error as exc:
                raise BackendError(self._explain("write", exc, "cannot start a write")) from exc
            made: list[Collection[str] | None] = []
            events: list[tuple[str, Sequence[int]]] = []
            self._local.made, self._local.events = made, events
            try:
                yield conn
                conn.execute(Q["commit"])
            except BaseException as exc:
                if conn.in_transaction:
                    conn.execute(Q["rollback"])
                if isinstance(exc, sqlite3.Error):
                    raise BackendError(self._explain("write", exc)) from exc
                raise
            finally:
                self._local.made = self._local.events = None
        finally:
            turn.release()
        if made:
            everywhere = any(queues is None for queues in made)
            self.notifier.announce(None if everywhere else {q for qs in made for q in qs or ()})
        for kind, job_ids in events:
            self._wakeups.announce_events(kind, job_ids)

    def _write_turn(self) -> threading.RLock:
        """This process's turn to write: its threads queue for it here, where the next
        one goes as soon as the lock is free, instead of in SQLite's busy handler, which
        sleeps between tries. (Reentrant, so a write inside a write still reaches SQLite
        and gets its error; made anew in a forked child.)"""
        pid, turn = self._turn
        if pid != os.getpid():  # a forked child: the lock may have been held at the fork
            pid, turn = self._turn = (os.getpid(), threading.RLock())
        return turn

    def _made_work(self, queues: Collection[str] | None) -> None:
        made = getattr(self._local, "made", None)
        if made is not None:  # in our own transaction: announced once it committed
            made.append(queues)
        else:  # in the caller's, committed when the caller decides: watch for it
            self._wakeups.announce_coming(queues or ["*"])

    def _made_events(self, kind: str, job_ids: Sequence[int]) -> None:
        events = getattr(self._local, "events", None)
        if events is not None and job_ids:
            events.append((kind, job_ids))

    def _explain(self, what: str, exc: sqlite3.Error, failed: str = "") -> str:
        """The driver's error, with what to do when the cause is a missing schema or a full
        disk (SQLITE_FULL: the file or its WAL could not grow)."""
        text = f"{failed or f'SQLite {what} failed'} on {self.path!r}: {exc}"
        if "no such table: sqljobs_" in str(exc) or "no such column" in str(exc):
            text += f"; {MISSING_SCHEMA}"
        elif getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL:
            folder = os.path.dirname(os.path.abspath(self.path))
            text += (
                f"; the disk holding {folder} is full: free space there. Nothing of this "
                f"{what} was committed; what was committed before is intact, and workers "
                "retry until there is room"
            )
        return text

    def now(self) -> float:
        return self.clock()

    def close(self) -> None:
        self.notifier.close()
        conn = getattr(self._local, "conn", None)
        if conn is not None and self._local.pid == os.getpid():
            conn.close()
        self._local = threading.local()

    # -- the executor's ways to run work (see ..executor) ---------------------------------

    def read(self, work: Callable[[Any], T]) -> T:
        try:
            return work(self._conn())
        except sqlite3.Error as exc:
            raise BackendError(self._explain("read", exc)) from exc

    def write(self, work: Callable[[Any], T]) -> T:
        with self._writing() as conn:
            return work(conn)

    def snapshot(self, work: Callable[[Any], T]) -> T:
        conn = self._conn()
        try:
            conn.execute(Q["begin_read"])
            try:
                return work(conn)
            finally:
                conn.execute(Q["commit"])
        except sqlite3.Error as exc:
            raise BackendError(self._explain("read", exc)) from exc

    transaction = write  # every SQLite write is a transaction already

    def durable(self, work: Callable[[Any], T]) -> T:
        """A write committed with ``synchronous=FULL`` whatever this backend's level: a
        worker's connection (NORMAL) switches to FULL for it and back, as SQLite allows
        only between transactions. FULL syncs the WAL at this commit, so it also carries
        to disk any NORMAL commit before it."""
        if self.synchronous in DURABLE_LEVELS:
            return self.write(work)
        conn = self._conn()
        self._set_synchronous(conn, "FULL")
        try:
            return self.write(work)
        finally:
            self._set_synchronous(conn, self.synchronous)

    durable_transaction = durable

    def _set_synchronous(self, conn: sqlite3.Connection, level: str) -> None:
        try:
            conn.execute(Q["synchronous"].replace("{level}", level))
        except sqlite3.Error as exc:
            raise BackendError(self._explain(f"PRAGMA synchronous = {level}", exc)) from exc

    def run_script(self, conn: Any, script: str) -> None:
        for statement in split_script(script):
            conn.execute(statement)

    def _data_version(self) -> int:
        """The change check of :mod:`sqljobs.notifiers.sqlite`, on this thread's connection."""
        (version,) = self.read(lambda conn: conn.execute(Q["data_version"]).fetchone())
        return int(version)

    # -- handler transactions ----------------------------------------------------------

    @contextmanager
    def job_transaction(self) -> Iterator[sqlite3.Connection]:
        conn = self.connect(synchronous="FULL")
        try:
            conn.execute(Q["begin_write"])
            try:
                with lending(conn, self):
                    yield conn
                conn.execute(Q["commit"])
            except BaseException:
                if conn.in_transaction:
                    conn.execute(Q["rollback"])
                raise
        finally:
            conn.close()


def split_script(sql: str) -> list[str]:
    """Split a script into statements, ignoring ``--`` comment lines."""
    statements, buffer = [], ""
    for line in sql.splitlines():
        if line.strip().startswith("--"):
            continue
        buffer += line + "\n"
        if sqlite3.complete_statement(buffer):
            statements.append(buffer.strip())
            buffer = ""
    return statements
