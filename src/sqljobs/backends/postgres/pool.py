"""PostgreSQL's connections: a pool (psycopg_pool) in autocommit, settings per connection,
retries on serialization failure and on a connection the server ended while it sat idle,
and the driver's errors said plainly (with what to do) at this boundary.
"""

from __future__ import annotations

import re
import select
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, TypeVar

import psycopg
import psycopg.errors
import psycopg_pool

from ...errors import BackendError
from ...humanize import redact_url, scrub_secrets
from ...url import url_options
from ..base import MISSING_SCHEMA
from ..ops.markers import lending
from ..shared import SharedBackend

_SCHEMES = ("postgresql", "postgres")
_RETRYABLE = (psycopg.errors.SerializationFailure, psycopg.errors.DeadlockDetected)


class EndedWhileIdle(psycopg.OperationalError):
    """The server ended a pooled connection while it sat idle: found before a statement
    was sent on it, so replaying that statement cannot run it twice."""


_SESSION_ENDED = (
    EndedWhileIdle,
    psycopg.errors.AdminShutdown,  # 57P01: restart, shutdown, pg_terminate_backend
    psycopg.errors.CannotConnectNow,  # 57P03: the server is starting up
    psycopg.errors.IdleSessionTimeout,  # 57P05
)
_CUT_SHORT = (
    psycopg.errors.LockNotAvailable,  # 55P03: lock_timeout
    psycopg.errors.QueryCanceled,  # 57014: statement_timeout, or pg_cancel_backend
)
T = TypeVar("T")


SERVER_CLOCK = re.compile(r"\b(?:now|statement_timestamp)\(\)")
"""The server's clock as sqljobs' statements read it."""
CLIENT_NOW = "to_timestamp(%(now)s::float8)"
"""What stands for it when the App's clock is the one to read (a test's)."""
SERVER_CLOCK_ONLY = frozenset({"prepare_migrations"})
"""Statements that keep the server's clock: DDL takes no parameters."""


def on_client_clock(sql: str) -> str:
    """``sql`` reading its time from the ``now`` parameter (Unix seconds) wherever it read
    the server's clock (comments left as they are)."""
    lines = []
    for line in sql.split("\n"):
        code, dash, comment = line.partition("--")
        lines.append(SERVER_CLOCK.sub(CLIENT_NOW, code) + dash + comment)
    return "\n".join(lines)


def clock_cursor(clock: Callable[[], float]) -> type[psycopg.Cursor[Any]]:
    """A cursor class that gives a statement reading ``%(now)s`` the time of ``clock``
    when its caller did not (most callers already pass ``now``, which SQLite's statements
    read: those that do not are PostgreSQL's own)."""

    class ClockCursor(psycopg.Cursor[Any]):
        def execute(
            self,
            query: Any,
            params: Any = None,
            *,
            prepare: bool | None = None,
            binary: bool | None = None,
        ) -> ClockCursor:
            return super().execute(query, _with_now(query, params, clock), prepare=prepare,
                                   binary=binary)  # fmt: skip

        def executemany(self, query: Any, params_seq: Any, *, returning: bool = False) -> None:
            seq = [_with_now(query, params, clock) for params in params_seq]
            super().executemany(query, seq, returning=returning)

    return ClockCursor


def _with_now(query: Any, params: Any, clock: Callable[[], float]) -> Any:
    """``params`` with ``now`` added, if ``query`` reads it and they lack it."""
    if not isinstance(query, str) or "%(now)s" not in query:
        return params
    if params is None:
        return {"now": clock()}
    if isinstance(params, Mapping) and "now" not in params:
        return {**params, "now": clock()}
    return params


FIRST_CONNECTION_WAIT = 0.5
"""Seconds to wait for the pool's first connection before connecting once more, alone, to
say why it fails (the pool only logs it). Connecting up front every time, beside the
pool's own first connection, slowed a worker's start-up (see docs/performance.md). A
server that does not answer at all fails after this, the closing pool's wait for its
connecting thread (up to 5 s), and ``connect_timeout``."""


class PostgresPool(SharedBackend):
    """How a PostgreSQL backend has connections and runs work on them (see
    :mod:`..executor`); the enqueue and the claims are mixed in beside it."""

    url: str
    schema: str
    pool_size: int
    pool_timeout: float
    connect_timeout: float
    session_settings: bool
    synchronous_commit: bool
    clock: Callable[[], float]
    server_clock: bool
    _pool: psycopg_pool.ConnectionPool | None
    _lock: threading.Lock

    def _conninfo(self) -> str:
        """The URL as libpq takes it: sqljobs's own options (``?listen=false``) taken out,
        and ``postgresql://`` without SQLAlchemy's driver name (``postgresql+psycopg://``),
        which libpq would refuse, quoting the whole URL."""
        url = url_options(self.url)[0]
        scheme, _, rest = url.partition("://")
        return f"postgresql://{rest}" if scheme.split("+", 1)[0] in _SCHEMES else url

    def _open_pool(self) -> psycopg_pool.ConnectionPool:
        """The pool, opened on first use. Its first connection is waited for (a statement
        asking for a connection before then would make the pool open a second one); if it
        is slow to come, one connection alone says why, clearly (the pool only logs it,
        and keeps trying), or finds the server merely slow: then a new pool serves."""
        with self._lock:
            if self._pool is None:
                pool = self._new_pool()
                try:
                    pool.wait(timeout=FIRST_CONNECTION_WAIT)
                except psycopg_pool.PoolTimeout:  # wait() closed that pool
                    self._check_connect()
                    pool = self._new_pool()  # a slow server: used without waiting
                except BaseException:
                    pool.close(timeout=0)
                    raise
                self._pool = pool
            return self._pool

    def _new_pool(self) -> psycopg_pool.ConnectionPool:
        return psycopg_pool.ConnectionPool(
            self._conninfo(),
            min_size=1,
            max_size=self.pool_size,
            timeout=self.pool_timeout,
            open=True,  # its first connection opens in the pool's own thread
            name="sqljobs",
            kwargs=self._connect_options(),
            configure=self._configure,
        )

    def _connect_options(self) -> dict[str, Any]:
        options: dict[str, Any] = {
            "autocommit": True,
            "connect_timeout": int(self.connect_timeout),
        }
        if not self.session_settings:
            options["prepare_threshold"] = None  # a prepared statement is session state
        if not self.server_clock:  # the statements read the App's clock: see on_client_clock
            options["cursor_factory"] = clock_cursor(self.clock)
        return options

    def _check_connect(self) -> None:
        """Connect once up front so a wrong URL or password fails now, clearly."""
        try:
            psycopg.connect(self._conninfo(), connect_timeout=int(self.connect_timeout)).close()
        except psycopg.Error as exc:
            said = str(exc).strip()
            error = BackendError(
                f"cannot connect to PostgreSQL at {redact_url(self.url)}: "
                f"{scrub_secrets(said, self.url)}"
            )
            if said != scrub_secrets(said, self.url):  # libpq quoted the password
                raise error from None
            raise error from exc

    def _configure(self, conn: psycopg.Connection[Any]) -> None:
        """Per-connection settings. Queue statements are short and planned once: JIT
        compiling them costs more than it saves, since it is done again at each execution
        and a short statement ends before the compiled code has paid for it.
        A worker's own writes may skip waiting for the WAL flush (``synchronous_commit``
        False): a claim or outcome lost in a server crash only re-runs a job, and its
        fencing token makes any late write about it a no-op. Enqueues, effects and
        ``ctx.transaction()`` stay durable. In poll-only mode, none of it: see the
        module docstring."""
        if not self.session_settings:
            return
        settings = [self.sql["configure"], self.sql["ordered_scans"]]
        if not self.synchronous_commit:
            settings.append(self.sql["asynchronous_commit"])
        conn.execute("; ".join(settings))  # one round trip (no parameters: simple query)

    def _listen_connection(self) -> psycopg.Connection[Any]:
        """A connection of its own for the notifier's LISTEN (a pooled one would be
        handed to others)."""
        return psycopg.connect(
            self._conninfo(), autocommit=True, connect_timeout=int(self.connect_timeout)
        )

    @contextmanager
    def _connection(self) -> Iterator[psycopg.Connection[Any]]:
        pool = self._pool or self._open_pool()
        try:
            with pool.connection() as conn:
                if _ended_while_idle(conn):
                    conn.close()  # (so the pool drops it)
                    raise EndedWhileIdle("the server ended this connection while it was idle")
                yield conn
        except psycopg_pool.PoolTimeout as exc:
            self._check_connect()  # a server that is down is not a pool that is full
            raise BackendError(
                f"no free PostgreSQL connection within {self.pool_timeout:g} s: all "
                f"{self.pool_size} pooled connections are busy; raise pool_size "
                "(backend_options={'pool_size': N}) or lower worker concurrency"
            ) from exc
        except _CUT_SHORT as exc:  # OperationalErrors too, but the connection is fine
            raise BackendError(_cut_short(exc)) from exc
        except psycopg.OperationalError as exc:
            raise BackendError(f"PostgreSQL connection failed: {described(exc)}") from exc
        except (psycopg.errors.UndefinedTable, psycopg.errors.UndefinedColumn) as exc:
            raise BackendError(f"PostgreSQL error: {str(exc).strip()}; {MISSING_SCHEMA}") from exc
        except psycopg.Error as exc:
            raise BackendError(f"PostgreSQL error: {described(exc)}") from exc

    def _run(
        self,
        work: Callable[[psycopg.Connection[Any]], T],
        attempts: int = 5,
        transaction: bool = True,
    ) -> T:
        """Run ``work``, retried on serialization failure or deadlock, and once on a fresh
        connection when the pooled one turns out dead (the server restarted, or an admin
        ended it, while it sat idle in the pool), so an App's call after a restart does
        not fail for a connection nobody could have known was gone. A single statement
        needs no explicit transaction: in autocommit it is one round trip, not three."""
        reconnected = False
        for attempt in range(1, attempts + 1):
            try:
                with self._connection() as conn:
                    if not transaction:
                        return work(conn)
                    with conn.transaction():
                        return work(conn)
            except BackendError as exc:
                if _dead_connection(exc) and not reconnected:
                    reconnected = True
                    self._drop_dead_connections()
                    continue
                if not isinstance(exc.__cause__, _RETRYABLE) or attempt == attempts:
                    raise
                time.sleep(0.01 * attempt)
        raise AssertionError("unreachable")

    def _drop_dead_connections(self) -> None:
        """After one pooled connection was found dead, the others idle beside it likely
        are too: test them all now rather than fail on each in turn."""
        if self._pool is not None:
            self._pool.check()

    def now(self) -> float:
        return self.clock()

    def close(self) -> None:
        self.notifier.close()
        if self._pool is not None:
            self._pool.close()
            self._pool = None

    # -- the executor's ways to run work (see ..executor) ---------------------------------

    def read(self, work: Callable[[Any], T]) -> T:
        return self._run(work, transaction=False)

    write = read  # autocommit: each statement commits on its own, in one round trip

    def transaction(self, work: Callable[[Any], T]) -> T:
        return self._run(work)

    def snapshot(self, work: Callable[[Any], T]) -> T:
        def consistent(conn: psycopg.Connection[Any]) -> T:
            conn.execute(self.sql["snapshot"])
            return work(conn)

        return self._run(consistent)

    def durable(self, work: Callable[[Any], T]) -> T:
        """One statement that must survive a server crash, whatever this pool's setting."""

        def durable(conn: psycopg.Connection[Any]) -> T:
            if not self.synchronous_commit:
                conn.execute(self.sql["durable_transaction"])
            return work(conn)

        return self._run(durable, transaction=not self.synchronous_commit)

    def durable_write(self, work: Callable[[Any], T]) -> T:
        """Statements run here set ``synchronous_commit`` for their own commit: one
        autocommit round trip, where :meth:`durable` takes four."""
        return self.write(work)

    def durable_transaction(self, work: Callable[[Any], T]) -> T:
        def durable(conn: psycopg.Connection[Any]) -> T:
            if not self.synchronous_commit:
                conn.execute(self.sql["durable_transaction"])
            return work(conn)

        return self._run(durable)

    def run_script(self, conn: Any, script: str) -> None:
        conn.execute(script)

    def _caller_now(self) -> dict[str, float]:
        """The ``now`` an enqueue's statements read when the App's clock is theirs (see
        :func:`on_client_clock`): passed by hand, since they may run on the caller's
        connection, which no clock cursor of ours fills it in on."""
        return {} if self.server_clock else {"now": self.clock()}

    # -- handler transactions ----------------------------------------------------------

    @contextmanager
    def job_transaction(self) -> Iterator[psycopg.Connection[Any]]:
        with self._connection() as conn, conn.transaction(), lending(conn, self):
            if not self.synchronous_commit:  # effects are durable
                conn.execute(self.sql["durable_transaction"])
            yield conn


def _cut_short(exc: psycopg.Error) -> str:
    """A statement the server cancelled: say which setting did it and that nothing of it
    was committed (a worker retries its pass; an enqueuer may retry the call)."""
    lock = isinstance(exc, psycopg.errors.LockNotAvailable)
    why = (
        "it waited on a lock longer than lock_timeout (another session holds a lock on "
        "sqljobs' tables: a long transaction, a migration, a LOCK TABLE)"
        if lock
        else "it ran longer than statement_timeout, or was cancelled (sqljobs' statements "
        "are short: it likely waited on a lock, or the server is overloaded)"
    )
    return (
        f"PostgreSQL cancelled a statement: {str(exc).strip()}; {why}. Nothing of it was "
        "committed: retry it (workers do), or raise the timeout for sqljobs' role or "
        "database (ALTER ROLE ... SET lock_timeout / statement_timeout)"
    )


def described(exc: psycopg.Error) -> str:
    """The server's message, and what to do when it is the mark of a transaction pooler:
    psycopg's prepared statements (``_pg3_N``) missing, doubled or mismatched, because the
    client connection's statements ran on another server session than before."""
    text = str(exc).strip()
    if 'prepared statement "_pg3_' in text:
        text += (
            "; this connection's statements run on changing server sessions, as behind "
            "PgBouncer in transaction mode: add ?listen=false to the URL (poll-only mode, "
            "which keeps nothing on the session; see docs/pgbouncer.md)"
        )
    return text


def _ended_while_idle(conn: psycopg.Connection[Any]) -> bool:
    """Whether the server has closed this pooled connection since it was last used: a
    restart, an admin or an idle timeout leaves its goodbye (an error, then the end of the
    stream) waiting on the socket, where nothing else arrives between statements. Seen
    here (one zero-timeout select), the statement goes to another connection; sent on it,
    a lost connection could not always tell whether the statement ran, and would not be
    replayed."""
    if conn.closed:
        return True
    return bool(select.select([conn.fileno()], [], [], 0)[0])


def _dead_connection(exc: BackendError) -> bool:
    """The server had ended the session before our statement ran: it was shutting down or
    restarting, an admin terminated it, or it sat idle too long. Only these are replayed:
    a connection lost half-way through a statement may have committed it, and replaying
    an enqueue then would insert its jobs twice."""
    return isinstance(exc.__cause__, _SESSION_ENDED)
