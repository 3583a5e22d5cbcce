"""PostgreSQL backend: many worker hosts on one database.

Claims are one statement (``FOR UPDATE SKIP LOCKED`` in a materialised CTE feeding an
``UPDATE ... RETURNING``); completions, retries and heartbeats are one ``unnest`` statement
per batch, every one fenced by state and token. Enqueues are in :mod:`.postgres_enqueue`;
what is the same on SQLite is in :mod:`.core` and :mod:`.schedule_store`; wake-ups
(LISTEN/NOTIFY) are :class:`sqljobs.notifiers.postgres.PostgresNotifier`.

``listen=False`` is poll-only mode, for PgBouncer in transaction mode, where one client
connection's transactions run on whichever server session is free: nothing may rest on a
session. So no LISTEN, no server-side prepared statements (psycopg prepares a statement
on its fifth run, and the next run may land on a session that never saw it), and no
session ``SET`` (it would stay on one server session, serving other clients, while ours
move on): the worker's asynchronous commit is dropped, and JIT and bitmap scans are left
to the server's settings (docs/pgbouncer.md shows how to set them there).
"""

from __future__ import annotations

import json
import logging
import re
import select
import threading
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import replace
from typing import Any, TypeVar

import psycopg
import psycopg.errors
import psycopg_pool

from ..errors import BackendError, ConfigurationError
from ..humanize import redact_url, scrub_secrets
from ..jobs import FINISHED_STATES, ClaimedJob, HeldJob, JobState, Outcome
from ..notifiers.postgres import PostgresNotifier, channel_for
from ..url import url_options
from .base import MISSING_SCHEMA
from .core import LimitedScans, lending
from .job_browser import JobBrowser
from .postgres_enqueue import PostgresEnqueue
from .records import Claim
from .rows import claimed_jobs, result
from .schedule_store import ScheduleStore
from .sqlfile import load_migrations, load_statements

_PACKAGE = "sqljobs.backends.postgres_sql"
_FILES = (
    "queries.sql",
    "schedules.sql",
    "migrate.sql",
    "session.sql",
    "notify.sql",
    "limits.sql",
    "dependencies.sql",
    "browse.sql",
    "rollup.sql",
)
LIMITED_KEYS = 256
"""At most this many limit keys are locked and looked at per claim (starting where the
last claim left off, so every key gets its turn)."""
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")  # fullmatch: "$" would let "\n" by
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
log = logging.getLogger("sqljobs.postgres")


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


def statements(schema: str) -> dict[str, str]:
    """The named statements with ``schema`` and their column-list fragments filled in."""
    raw = load_statements(_PACKAGE, *_FILES)
    fragments = {"{columns}": raw["schedule_columns"], "{job_columns}": raw["job_columns"]}
    out = {}
    for name, sql in raw.items():
        for marker, fragment in fragments.items():
            sql = sql.replace(marker, fragment)
        out[name] = sql.replace("{schema}", schema)
    return out


FIRST_CONNECTION_WAIT = 0.5
"""Seconds to wait for the pool's first connection before connecting once more, alone, to
say why it fails (the pool only logs it). Connecting up front every time, beside the
pool's own first connection, cost a worker's start-up 2.5 ms (0.84x, 15 alternating
rounds of startup_probe.py): two connections at once on two cores. (A server that does
not answer at all now fails after this, the closing pool's wait for its connecting
thread, up to 5 s, and ``connect_timeout``.)"""


class PostgresBackend(PostgresEnqueue, JobBrowser, ScheduleStore):
    """Jobs in PostgreSQL tables (``sqljobs_*``) in ``schema``."""

    claim_lanes = 2  # a second claim in flight keeps the server's other backend busy
    async_connections = True

    def __init__(
        self,
        url: str,
        *,
        schema: str = "public",
        pool_size: int = 10,
        pool_timeout: float = 10.0,
        listen: bool = True,
        notify_window: float = 0.005,
        connect_timeout: float = 10.0,
        synchronous_commit: bool = True,
        clock: Callable[[], float] = time.time,
        server_clock: bool | None = None,
    ) -> None:
        if not isinstance(schema, str) or not _IDENTIFIER.fullmatch(schema):
            raise ConfigurationError(f"schema {schema!r} is not a plain SQL identifier")
        if pool_size < 2:
            raise ConfigurationError(f"pool_size must be >= 2, got {pool_size}")
        self.url = url
        self.schema = schema
        self.pool_size = pool_size
        self.pool_timeout = pool_timeout
        self.connect_timeout = connect_timeout
        # poll-only mode sets nothing on the session (see the module docstring)
        self.session_settings = listen
        self.synchronous_commit = synchronous_commit or not listen
        self.clock = clock
        # delays count from the server's now(), the clock claims read; with a test's own
        # clock (unless told otherwise) every statement reads that clock instead
        self.server_clock = clock is time.time if server_clock is None else server_clock
        self.sql = statements(schema)
        if not self.server_clock:  # every time compared or stored is the App's clock's
            self.sql = {name: sql if name in SERVER_CLOCK_ONLY else on_client_clock(sql)
                        for name, sql in self.sql.items()}  # fmt: skip
        self.migrations = [
            (version, name, script.replace("{schema}", schema))
            for version, name, script in load_migrations(_PACKAGE + ".migrations")
        ]
        self.notifier = PostgresNotifier(
            channel_for(schema),
            listen=listen,
            window=notify_window,
            connect=self._listen_connection,
            listen_sql=self.sql["listen"],
            send=self._notify,
        )
        self._pool: psycopg_pool.ConnectionPool | None = None
        self._lock = threading.Lock()
        self._limit_cursor = ""  # where the next limited claim starts its key scan
        self._statements: dict[tuple[str, bool, bool], str] = {}  # see _filled
        self._scans = LimitedScans()

    # -- connections -------------------------------------------------------------------

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
        compiling them costs more than it saves (272 of 410 ms of a 10,000-row enqueue).
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

    # -- the dialect's ways to run work (see .dialect) ------------------------------------

    def _read(self, work: Callable[[Any], T]) -> T:
        return self._run(work, transaction=False)

    _write = _read  # autocommit: each statement commits on its own, in one round trip

    def _transaction(self, work: Callable[[Any], T]) -> T:
        return self._run(work)

    def _snapshot(self, work: Callable[[Any], T]) -> T:
        def consistent(conn: psycopg.Connection[Any]) -> T:
            conn.execute(self.sql["snapshot"])
            return work(conn)

        return self._run(consistent)

    def _durable(self, work: Callable[[Any], T]) -> T:
        """One statement that must survive a server crash, whatever this pool's setting."""

        def durable(conn: psycopg.Connection[Any]) -> T:
            if not self.synchronous_commit:
                conn.execute(self.sql["durable_transaction"])
            return work(conn)

        return self._run(durable, transaction=not self.synchronous_commit)

    def _durable_transaction(self, work: Callable[[Any], T]) -> T:
        def durable(conn: psycopg.Connection[Any]) -> T:
            if not self.synchronous_commit:
                conn.execute(self.sql["durable_transaction"])
            return work(conn)

        return self._run(durable)

    def _run_script(self, conn: Any, script: str) -> None:
        conn.execute(script)

    def _filtered(
        self, name: str, queues: Sequence[str] | None, tasks: Collection[str] | None
    ) -> tuple[str, dict[str, Any]]:
        params = {"queues": list(queues or []), "tasks": None if tasks is None else list(tasks)}
        return self._filled(name, bool(queues), tasks is not None), params

    def _filled(self, name: str, queues: bool, tasks: bool) -> str:
        """Statement ``name`` for a worker of some queues or all, of some tasks or all:
        its filter fragments put in (each variant made once, not on every claim)."""
        key = (name, queues, tasks)
        sql = self._statements.get(key)
        if sql is None:
            by_queue, by_task = (self.sql[f] if on else "" for f, on in (
                ("filter_queues", queues), ("filter_tasks", tasks)))  # fmt: skip
            sql = (
                self.sql[name]
                .replace("{level_picked}", self.sql["level_picked"])
                .replace("{claim_chosen}", self.sql["claim_chosen"])
                .replace("{levels_of_keys}", self.sql["levels_of_keys"])
                .replace("{queue_filter}", f"{by_queue} {by_task}")
                .replace("{levels}", self.sql["levels_of_queues" if queues else "levels_of_all"])
                .replace("{level_queue}", self.sql["level_of_queue" if queues else "level_of_any"])
                .replace("{level_tasks}", self.sql["level_tasks"] if tasks else "")
            )
            self._statements[key] = sql
        return sql

    def _array(self, values: Iterable[Any]) -> Any:
        return list(values)

    def _notify(self, queues: Sequence[str], channel: str) -> None:
        """The notifier's NOTIFY after a commit, through the pool."""
        params = {"channel": channel, "notify": list(queues)}
        self._change("notify", params)

    # -- claim, finish, lease ----------------------------------------------------------

    def _finish_and_claim(
        self, outcomes: Sequence[Outcome], claim: Claim
    ) -> tuple[list[int], list[ClaimedJob]]:
        """Plain completions and the claim are one statement (one round trip, one
        commit); other outcomes are written first, then the claim. Jobs under a
        concurrency limit are claimed first, in the transaction of :meth:`_claim_limited`."""
        if not (claim.limited and claim.at_once + claim.limited_buffer):
            return self._finish_and_claim_unlimited(outcomes, claim)
        marker = self.change_marker()
        if self._scans.may_skip(outcomes, marker):
            return self._hand_over(outcomes, claim)
        written: list[int] = []
        if not all(o.plain for o in outcomes):  # retries and failures: written first
            written = self.finish_jobs(outcomes, claim.started)
            outcomes, claim = [], replace(claim, started=())
        try:
            more, jobs = self._run(
                lambda conn: self._claim_limited(conn, outcomes, claim, marker), transaction=False
            )
            ended = set(more)
            missed = [o for o in outcomes if o.job_id not in ended]
            if missed:  # fenced off, or others wait for them: the careful path tells which
                # (its own round trip: a retry of the claim's would claim a second time)
                more += self._write(lambda conn: self._finish_parents(conn, missed))
        except BackendError as exc:
            if not isinstance(exc.__cause__, psycopg.errors.LockNotAvailable):
                raise
            log.debug("limited claim skipped: a key stayed locked (%s)", exc)
            # another claimer held a key too long: the next claim looks again
            more, jobs = self._finish_and_claim_unlimited(outcomes, claim)
        return written + more, jobs

    def _hand_over(
        self, outcomes: Sequence[Outcome], claim: Claim
    ) -> tuple[list[int], list[ClaimedJob]]:
        """Complete plain outcomes, each limited one handing its slot to its key's next
        due job, and claim jobs without a limit for the rest: one statement, no key lock
        (see LimitedScans). A slot left free makes the next round trip the full claim."""
        found = self._write(lambda conn: self._handing_over(conn, outcomes, claim, True))
        written, jobs, limited, handed = found
        self._scans.handed_over(limited, handed)
        missed = [o for o in outcomes if o.job_id not in set(written)]
        if missed:  # fenced off, or others wait for them: the careful path tells which
            written += self._write(lambda conn: self._finish_parents(conn, missed))
        return written, jobs

    def _handing_over(
        self,
        conn: psycopg.Connection[Any],
        outcomes: Sequence[Outcome],
        claim: Claim,
        unlimited: bool,
    ) -> tuple[list[int], list[ClaimedJob], int, int]:
        """The statement complete_and_hand_over: the outcomes written, the heirs (and, if
        ``unlimited``, jobs without a limit for the rest of the claim), how many of the
        jobs that ended were limited and how many heirs took their slots."""
        sql, params = self._claim_statement("complete_and_hand_over", claim)
        params.update(_began(claim.started))
        params.update(_fenced(outcomes))
        params.update(_values(outcomes))
        params["channel"] = self.notifier.channel
        params["hand_over"] = min(claim.limit, claim.at_once + claim.limited_buffer)
        if not unlimited:
            params["limit"] = 0
        found = result(conn.execute(sql, params))
        done, limited, handed = found.first("ids", "limited", "handed") or (None, 0, 0)
        ids = found.pick("id")
        rows = [row for row, (id_,) in zip(found.rows, ids, strict=True) if id_ is not None]
        return list(done or []), claimed_jobs(found.names, rows), limited, handed

    def _claim_limited(
        self,
        conn: psycopg.Connection[Any],
        outcomes: Sequence[Outcome],
        claim: Claim,
        marker: int | None,
    ) -> tuple[list[int], list[ClaimedJob]]:
        """One transaction: the completions first, handing their slots over (a limited
        job that just ended must not count as running), and the scan that locks the limit
        keys with pending jobs; then, in a snapshot taken after the locks, each key's
        free slots are claimed (see sqljobs.limits); then jobs without a limit, for what
        is left. (Sent as a pipeline, it measured no faster: the statements' own work is
        what costs.)"""
        wanted = min(claim.limit, claim.at_once + claim.limited_buffer)
        with conn.transaction():
            written: list[int] = []
            jobs: list[ClaimedJob] = []
            if outcomes or claim.started:
                written, jobs, _, _ = self._handing_over(conn, outcomes, claim, False)
            conn.execute(self.sql["limited_lock_timeout"])
            scanned: list[ClaimedJob] = []
            if wanted > len(jobs):
                left = replace(claim, limit=wanted - len(jobs), started=(),
                               start_now=max(0, claim.at_once - len(jobs)))  # fmt: skip
                scanned = self._scan_limited(conn, left)
            self._scans.scanned(len(scanned), wanted - len(jobs), marker)
            jobs += scanned
            rest = replace(claim, limit=claim.limit - len(jobs), started=(),
                           start_now=max(0, claim.at_once - len(jobs)))  # fmt: skip
            others = None
            if rest.limit > 0:
                sql, params = self._claim_statement("claim", rest)
                others = conn.execute(sql, {**params, **_began(())})
        if others is not None:
            found = result(others)
            jobs += claimed_jobs(found.names, found.rows)
        return written, jobs

    def _scan_limited(self, conn: psycopg.Connection[Any], claim: Claim) -> list[ClaimedJob]:
        """Lock the limit keys with pending jobs, then claim their free slots."""
        after = self._limit_cursor
        scan = {"after": after, "max_keys": LIMITED_KEYS}
        rows = result(conn.execute(self.sql["lock_limited_keys"], scan)).pick(
            "key", "turn", "locked"
        )
        later = [key for key, turn, _ in rows if turn == 0]
        # the next claim starts after the last key of this turn (or from the start)
        self._limit_cursor = max(later) if len(rows) >= LIMITED_KEYS and later else ""
        keys = [key for key, _, locked in rows if locked]
        if not keys:
            return []
        sql, params = self._claim_statement("claim_limited", claim)
        found = result(conn.execute(sql, {**params, "keys": keys}))
        return claimed_jobs(found.names, found.rows)

    def _finish_and_claim_unlimited(
        self, outcomes: Sequence[Outcome], claim: Claim
    ) -> tuple[list[int], list[ClaimedJob]]:
        plain = all(o.plain for o in outcomes)
        if not outcomes or not plain:
            written = self.finish_jobs(outcomes)
            sql, params = self._claim_statement("claim", claim)
            params.update(_began(claim.started))
            claimed = self._write(lambda c: result(c.execute(sql, params)))
            return written, claimed_jobs(claimed.names, claimed.rows)
        sql, params = self._claim_statement("complete_and_claim", claim)
        params.update(_began(claim.started))
        params.update(_fenced(outcomes))
        params.update(_values(outcomes))
        params["channel"] = self.notifier.channel
        found = self._write(lambda c: result(c.execute(sql, params)))
        (done,) = found.first("ids") or (None,)
        at = found.names.index("id")  # (NULL in the one row when none was claimed)
        rows = [row for row in found.rows if row[at] is not None]
        written = list(done or [])
        ended = set(written)  # (once: in the comprehension's test it is built per outcome)
        missed = [o for o in outcomes if o.job_id not in ended]
        if missed:  # fenced off, or others wait for them: the careful path tells which
            written += self._write(lambda conn: self._finish_parents(conn, missed))
        return written, claimed_jobs(found.names, rows)

    def _finish(
        self,
        conn: Any,
        outcomes: Sequence[Outcome],
        started: Sequence[HeldJob] = (),
    ) -> list[int]:
        """Plain completions in one statement, everything else in another: each one
        ``unnest`` over the batch, fenced by token. Neither ends a job that others wait
        for: those are ended by :meth:`_finish_parents` (as are any the fence refused,
        which it finds refused again)."""
        plain = [o for o in outcomes if o.state is JobState.DONE and o.history is None]
        other = [o for o in outcomes if not (o.state is JobState.DONE and o.history is None)]
        written: list[int] = []
        channel = self.notifier.channel
        if plain:  # buffered jobs that started ride along with the completions
            fenced = {**_fenced(plain), **_began(started), **_values(plain), "channel": channel}
            written += _ids(conn.execute(self.sql["complete_jobs"], fenced))
        elif started:
            conn.execute(self.sql["mark_started"], _began(started))
        ended = set(written)
        missed = [o for o in plain if o.job_id not in ended]
        if other:
            done = _ids(conn.execute(self.sql["finish_jobs"], _finish_params(other, channel)))
            written += done
            ended = set(done)
            missed += [o for o in other if o.job_id not in ended and o.state in FINISHED_STATES]
        if missed:
            written += self._finish_parents(conn, missed)
        return written

    def _finish_parents(self, conn: Any, outcomes: Sequence[Outcome]) -> list[int]:
        """End jobs that others may wait for, and settle those others, in one transaction
        (a savepoint inside the caller's): the statement that ends them takes their rows'
        locks first, so the settling statements after it see every child's edge."""
        params = _finish_params(outcomes, self.notifier.channel, with_children=True)
        with conn.transaction():
            found = result(conn.execute(self.sql["finish_jobs"], params))
            rows = found.pick("id", "state", "children")
            ended = [(i, state) for i, state, children in rows if children and state != "pending"]
            self.settle_children(conn, ended)
        return [i for i, _, _ in rows]

    def renew_leases(self, worker: str, held: Sequence[HeldJob]) -> set[int]:
        params = {
            "worker": worker,
            "ids": int_array(h.id for h in held),
            "tokens": int_array(h.token for h in held),
        }
        return {job_id for (job_id,) in self._change("renew_leases", params).pick("id")}

    def hold_slots(self, keep: Sequence[HeldJob], end: Sequence[HeldJob]) -> None:
        def work(conn: psycopg.Connection[Any]) -> None:
            if keep:
                conn.execute(self.sql["renew_holds"], _held(keep))
            if end:
                params = {**_held(end), "channel": self.notifier.channel}
                conn.execute(self.sql["end_holds"], params)

        if keep or end:
            self._write(work)

    def save_progress(self, reports: Sequence[tuple[HeldJob, str]]) -> set[int]:
        if not reports:
            return set()
        params = {
            "ids": int_array(h.id for h, _ in reports),
            "tokens": int_array(h.token for h, _ in reports),
            "progresses": [progress for _, progress in reports],
        }
        return {job_id for (job_id,) in self._change("save_progress", params).pick("id")}

    def _event_channel(self) -> str | None:
        return self.notifier.channel

    def _next_rate_opening(
        self, queues: Sequence[str] | None, tasks: Collection[str] | None
    ) -> float | None:
        sql, params = self._filtered("next_rate_opening", queues, tasks)
        wait = self._read(lambda conn: result(conn.execute(sql, params))).first("wait")
        return None if not wait or wait[0] is None else float(wait[0])

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


def _ids(cursor: Any) -> list[int]:
    """The ids a ``RETURNING j.id`` statement gave."""
    return [job_id for (job_id,) in result(cursor).pick("id")]


def _began(started: Sequence[HeldJob]) -> dict[str, str]:
    """Buffered jobs that started since the last round trip: no longer `prefetched`."""
    return {
        "began_ids": int_array(h.id for h in started),
        "began_tokens": int_array(h.token for h in started),
    }


def _held(held: Sequence[HeldJob]) -> dict[str, str]:
    """The ids and fencing tokens of held jobs, as the statements' two arrays."""
    return {"ids": int_array(h.id for h in held), "tokens": int_array(h.token for h in held)}


def _fenced(outcomes: Sequence[Outcome]) -> dict[str, str]:
    """The ids and fencing tokens a batch of outcomes is conditional on."""
    return {
        "ids": int_array(o.job_id for o in outcomes),
        "tokens": int_array(o.token for o in outcomes),
    }


def _values(outcomes: Sequence[Outcome]) -> dict[str, str | None]:
    """Completions' results and last progress, each as one JSON object keyed by job id
    (NULL when there are none: most tasks return nothing)."""
    results = {str(o.job_id): o.result for o in outcomes if o.result is not None}
    progress = {str(o.job_id): o.progress for o in outcomes if o.progress is not None}
    return {
        "results": json.dumps(results) if results else None,
        "progress": json.dumps(progress) if progress else None,
    }


def _finish_params(
    outcomes: Sequence[Outcome], channel: str, with_children: bool = False
) -> dict[str, Any]:
    """The parameters of ``finish_jobs`` for a batch of outcomes (``with_children``: also
    end jobs that others wait for, which the caller then settles)."""
    return {
        **_fenced(outcomes),
        "states": [o.state.value for o in outcomes],
        "delays": [o.delay for o in outcomes],
        "uncharges": [1 if o.uncharge else 0 for o in outcomes],
        "errors_text": [o.error for o in outcomes],
        "tracebacks": [o.traceback for o in outcomes],
        "errors": [o.errors for o in outcomes],
        "lease_expiries": [o.lease_expiries for o in outcomes],
        "crashes": [o.crashes for o in outcomes],
        "histories": [None if o.history is None else json.dumps(o.history) for o in outcomes],
        "results": [o.result for o in outcomes],
        "progresses": [o.progress for o in outcomes],
        "holds": [o.hold for o in outcomes],
        "channel": channel,
        "with_children": with_children,
    }


def int_array(values: Iterable[int]) -> str:
    """Integers as one array literal (``{1,2,3}``), cast by the statement: psycopg adapts a
    list element by element in Python, which cost more than the claim statement it fed."""
    return "{" + ",".join(map(str, values)) + "}"
