"""PostgreSQL backend: many worker hosts on one database.

Claims are one statement (``FOR UPDATE SKIP LOCKED`` in a materialised CTE feeding an
``UPDATE ... RETURNING``); completions, retries and heartbeats are one ``unnest`` statement
per batch, every one fenced by state and token. Enqueues and their debounced NOTIFYs are
in :mod:`.postgres_enqueue`, schedules in :mod:`.postgres_schedules`. A listener thread
turns notifications into worker wake-ups. ``listen=False`` is poll-only mode, for
PgBouncer in transaction mode.
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
from dataclasses import asdict
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

import psycopg
import psycopg.errors
import psycopg_pool

from ..errors import BackendError, ConfigurationError
from ..jobs import (
    ClaimedJob,
    Due,
    ExpiredJob,
    HeldJob,
    Job,
    JobState,
    Outcome,
)
from ..stats import Stats, unserved_tasks
from ..tasks import TaskInfo
from .base import MISSING_SCHEMA, Decide, EffectRecord, WorkerInfo
from .postgres_enqueue import PostgresEnqueue
from .postgres_schedules import PostgresSchedules
from .sqlfile import load_migrations, load_queries
from .sqlite import row_to_job

log = logging.getLogger("sqljobs.postgres")
_PACKAGE = "sqljobs.backends.postgres_sql"
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")
_RETRYABLE = (psycopg.errors.SerializationFailure, psycopg.errors.DeadlockDetected)
_SESSION_ENDED = (
    psycopg.errors.AdminShutdown,  # 57P01: restart, shutdown, pg_terminate_backend
    psycopg.errors.CannotConnectNow,  # 57P03: the server is starting up
    psycopg.errors.IdleSessionTimeout,  # 57P05
)
T = TypeVar("T")


def redact(url: str) -> str:
    """The URL without its password, for error messages and logs."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
    return urlunsplit(parts._replace(netloc=netloc))


class PostgresBackend(PostgresEnqueue, PostgresSchedules):
    """Jobs in PostgreSQL tables (``sqljobs_*``) in ``schema``."""

    claim_lanes = 2  # a second claim in flight keeps the server's other backend busy

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
        if not _IDENTIFIER.match(schema):
            raise ConfigurationError(f"schema {schema!r} is not a plain SQL identifier")
        if pool_size < 2:
            raise ConfigurationError(f"pool_size must be >= 2, got {pool_size}")
        self.url = url
        self.schema = schema
        self.listen = listen
        self.notify_window = notify_window
        self.pool_size = pool_size
        self.pool_timeout = pool_timeout
        self.connect_timeout = connect_timeout
        self.synchronous_commit = synchronous_commit
        self.clock = clock
        # delays count from the server's now(), the clock claims read; a test's own clock
        # keeps its times unless told otherwise
        self.server_clock = clock is time.time if server_clock is None else server_clock
        self.channel = f"sqljobs_{schema}"
        self.queries = {
            k: v.replace("{schema}", schema)
            for k, v in load_queries(_PACKAGE, "queries.sql").items()
        }
        self._pool: psycopg_pool.ConnectionPool | None = None
        self._lock = threading.Lock()
        self._notified = 0
        self._subscribers: list[Callable[[], None]] = []
        self._listener: threading.Thread | None = None
        self._closing = threading.Event()
        self._last_notify: dict[str, float] = {}
        self._trailing: dict[str, threading.Timer] = {}

    # -- connections -------------------------------------------------------------------

    def _conninfo(self) -> str:
        return self.url.replace("postgres://", "postgresql://", 1)

    def _open_pool(self) -> psycopg_pool.ConnectionPool:
        with self._lock:
            if self._pool is None:
                self._check_connect()
                self._pool = psycopg_pool.ConnectionPool(
                    self._conninfo(),
                    min_size=1,
                    max_size=self.pool_size,
                    timeout=self.pool_timeout,
                    open=True,
                    name="sqljobs",
                    kwargs={"autocommit": True, "connect_timeout": int(self.connect_timeout)},
                    configure=self._configure,
                )
            return self._pool

    def _check_connect(self) -> None:
        """Connect once up front so a wrong URL or password fails now, clearly."""
        try:
            psycopg.connect(self._conninfo(), connect_timeout=int(self.connect_timeout)).close()
        except psycopg.Error as exc:
            raise BackendError(
                f"cannot connect to PostgreSQL at {redact(self.url)}: {str(exc).strip()}"
            ) from exc

    def _configure(self, conn: psycopg.Connection[Any]) -> None:
        """Per-connection settings. Queue statements are short and planned once: JIT
        compiling them costs more than it saves (272 of 410 ms of a 10,000-row enqueue).
        A worker's own writes may skip waiting for the WAL flush (``synchronous_commit``
        False): a claim or outcome lost in a server crash only re-runs a job, and its
        fencing token makes any late write about it a no-op. Enqueues, effects and
        ``ctx.transaction()`` stay durable."""
        conn.execute("SET jit = off")
        if not self.synchronous_commit:
            conn.execute("SET synchronous_commit = off")

    @contextmanager
    def _connection(self) -> Iterator[psycopg.Connection[Any]]:
        pool = self._pool or self._open_pool()
        try:
            with pool.connection() as conn:
                yield conn
        except psycopg_pool.PoolTimeout as exc:
            self._check_connect()  # a server that is down is not a pool that is full
            raise BackendError(
                f"no free PostgreSQL connection within {self.pool_timeout:g} s: all "
                f"{self.pool_size} pooled connections are busy; raise pool_size "
                "(backend_options={'pool_size': N}) or lower worker concurrency"
            ) from exc
        except psycopg.OperationalError as exc:
            raise BackendError(f"PostgreSQL connection failed: {str(exc).strip()}") from exc
        except (psycopg.errors.UndefinedTable, psycopg.errors.UndefinedColumn) as exc:
            raise BackendError(f"PostgreSQL error: {str(exc).strip()}; {MISSING_SCHEMA}") from exc
        except psycopg.Error as exc:
            raise BackendError(f"PostgreSQL error: {str(exc).strip()}") from exc

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

    def _fetch(
        self, name: str, params: Mapping[str, Any] | None = None, sql: str | None = None
    ) -> list[Any]:
        statement = sql or self.queries[name]
        return self._run(lambda c: c.execute(statement, params).fetchall(), transaction=False)

    def now(self) -> float:
        return self.clock()

    def close(self) -> None:
        self._closing.set()
        for timer in list(self._trailing.values()):
            timer.cancel()
        if self._listener is not None:
            self._listener.join(timeout=2)
            self._listener = None
        if self._pool is not None:
            self._pool.close()
            self._pool = None
        self._closing = threading.Event()

    # -- schema ------------------------------------------------------------------------

    def migrate(self) -> list[str]:
        def work(conn: psycopg.Connection[Any]) -> list[str]:
            conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (self.channel,))
            conn.execute(f"CREATE SCHEMA IF NOT EXISTS {self.schema}")
            conn.execute(
                f"CREATE TABLE IF NOT EXISTS {self.schema}.sqljobs_migrations (version integer "
                "PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())"
            )
            done = {
                r[0]
                for r in conn.execute(
                    f"SELECT version FROM {self.schema}.sqljobs_migrations"
                ).fetchall()
            }
            applied = []
            for version, name, sql in load_migrations(_PACKAGE + ".migrations"):
                if version in done:
                    continue
                conn.execute(sql.replace("{schema}", self.schema))  # type: ignore[arg-type]
                conn.execute(
                    f"INSERT INTO {self.schema}.sqljobs_migrations (version, name) VALUES (%s, %s)",
                    (version, name),
                )
                applied.append(f"{version:04d}_{name}")
            return applied

        return self._run(work)

    # -- claim, finish, lease ----------------------------------------------------------

    def _queue_sql(self, name: str, queues: Sequence[str] | None, tasks: bool = False) -> str:
        """The statement for these queues and, with ``tasks``, only the jobs of the tasks
        in the ``tasks`` parameter: what a worker can run."""
        flt = "" if not queues else "AND queue = ANY(%(queues)s::text[])"
        if tasks:
            flt += " AND task = ANY(%(tasks)s::text[])"
        return self.queries[name].replace("{queue_filter}", flt)

    def claim_jobs(
        self,
        worker: str,
        queues: Sequence[str] | None,
        limit: int,
        leases: Mapping[str, float] | None = None,
        start_now: int | None = None,
        started: Sequence[HeldJob] = (),
    ) -> list[ClaimedJob]:
        if limit <= 0:
            self.finish_jobs([], started)
            return []
        params = {
            **_began(started),
            "start_now": limit if start_now is None else start_now,
            "worker": worker,
            "limit": limit,
            "queues": list(queues or []),
            "leases": json.dumps(dict(leases or {})),
            "tasks": None if leases is None else list(leases),
        }
        rows = self._fetch("claim", params, self._queue_sql("claim", queues, leases is not None))
        rows.sort(key=lambda r: (-r[4], r[12], r[0]))
        return [ClaimedJob(*r[:12]) for r in rows]

    def finish_and_claim(
        self,
        outcomes: Sequence[Outcome],
        worker: str,
        queues: Sequence[str] | None,
        limit: int,
        leases: Mapping[str, float] | None = None,
        start_now: int | None = None,
        started: Sequence[HeldJob] = (),
    ) -> tuple[list[int], list[ClaimedJob]]:
        plain = all(o.state is JobState.DONE and o.history is None for o in outcomes)
        if not outcomes or not plain or limit <= 0:
            written = self.finish_jobs(outcomes)
            return written, self.claim_jobs(worker, queues, limit, leases, start_now, started)
        params = {
            **_fenced(outcomes),
            **_began(started),
            "start_now": limit if start_now is None else start_now,
            "worker": worker,
            "limit": limit,
            "queues": list(queues or []),
            "leases": json.dumps(dict(leases or {})),
            "tasks": None if leases is None else list(leases),
        }
        sql = self._queue_sql("complete_and_claim", queues, leases is not None)
        rows = self._fetch("", params, sql)
        claimed = sorted(
            (r[1:] for r in rows if r[1] is not None), key=lambda r: (-r[4], r[12], r[0])
        )
        return list(rows[0][0] or []), [ClaimedJob(*r[:12]) for r in claimed]

    def claim_suspect(
        self, worker: str, queues: Sequence[str] | None, leases: Mapping[str, float] | None = None
    ) -> ClaimedJob | None:
        params = {
            "worker": worker,
            "queues": list(queues) if queues else None,
            "leases": json.dumps(dict(leases or {})),
            "tasks": None if leases is None else list(leases),
        }
        rows = self._fetch("claim_suspect", params)
        return ClaimedJob(*rows[0][:12]) if rows else None

    def next_due(self, queues: Sequence[str] | None, tasks: Collection[str] | None = None) -> Due:
        sql = self._queue_sql("next_due", queues, tasks is not None)
        params = {"queues": list(queues or []), "tasks": None if tasks is None else list(tasks)}
        wait, suspects = self._fetch("next_due", params, sql)[0]
        return Due(None if wait is None else float(wait), bool(suspects))

    def finish_jobs(
        self, outcomes: Sequence[Outcome], started: Sequence[HeldJob] = ()
    ) -> list[int]:
        if not outcomes and not started:
            return []
        return self._run(lambda conn: self._finish(conn, outcomes, started), transaction=False)

    def _finish(
        self,
        conn: psycopg.Connection[Any],
        outcomes: Sequence[Outcome],
        started: Sequence[HeldJob] = (),
    ) -> list[int]:
        plain = [o for o in outcomes if o.state is JobState.DONE and o.history is None]
        other = [o for o in outcomes if not (o.state is JobState.DONE and o.history is None)]
        written: list[int] = []
        if plain:  # buffered jobs that started ride along with the completions
            rows = conn.execute(
                self.queries["complete_jobs"], {**_fenced(plain), **_began(started)}
            ).fetchall()
            written += [r[0] for r in rows]
        elif started:
            conn.execute(self.queries["mark_started"], _began(started))
        if other:
            params = {
                **_fenced(other),
                "states": [o.state.value for o in other],
                "delays": [o.delay for o in other],
                "uncharges": [1 if o.uncharge else 0 for o in other],
                "errors_text": [o.error for o in other],
                "tracebacks": [o.traceback for o in other],
                "errors": [o.errors for o in other],
                "lease_expiries": [o.lease_expiries for o in other],
                "crashes": [o.crashes for o in other],
                "histories": [None if o.history is None else json.dumps(o.history) for o in other],
            }
            written += [r[0] for r in conn.execute(self.queries["finish_jobs"], params).fetchall()]
        return written

    def renew_leases(self, worker: str, held: Sequence[HeldJob]) -> set[int]:
        params = {
            "worker": worker,
            "ids": int_array(h.id for h in held),
            "tokens": int_array(h.token for h in held),
        }
        return {r[0] for r in self._fetch("renew_leases", params)}

    def rescue_jobs(
        self, decide: Decide, worker: str | None = None, limit: int = 500
    ) -> list[Outcome]:
        def work(conn: psycopg.Connection[Any]) -> list[Outcome]:
            if worker is None:
                rows = conn.execute(self.queries["expired_jobs"], {"limit": limit}).fetchall()
            else:
                rows = conn.execute(
                    self.queries["jobs_of_worker"], {"worker": worker, "limit": limit}
                ).fetchall()
            outcomes = [decide(ExpiredJob(*r[:15]), r[15]) for r in rows]
            written = set(self._finish(conn, outcomes))
            return [o for o in outcomes if o.job_id in written]

        return self._run(work)

    def register_worker(self, info: WorkerInfo) -> None:
        params = {
            "id": info.id,
            "host": info.host,
            "pid": info.pid,
            "queues": json.dumps(list(info.queues) if info.queues else None),
            "tasks": json.dumps([t.name for t in info.tasks]),
            "concurrency": info.concurrency,
            "heartbeat_interval": info.heartbeat_interval,
        }

        def work(conn: psycopg.Connection[Any]) -> None:
            conn.execute(self.queries["register_worker"], params)
            with conn.cursor() as cur:
                cur.executemany(self.queries["save_task"], [asdict(t) for t in info.tasks])

        self._run(work)

    def task_names(self) -> list[str]:
        return [r[0] for r in self._fetch("task_names")]

    def task_info(self, name: str) -> TaskInfo | None:
        rows = self._fetch("task_info", {"name": name})
        return TaskInfo(*rows[0]) if rows else None

    def unregister_worker(self, worker: str) -> None:
        self._fetch_none("unregister_worker", {"worker": worker})

    def _fetch_none(self, name: str, params: Mapping[str, Any]) -> int:
        return self._run(
            lambda conn: conn.execute(self.queries[name], params).rowcount, transaction=False
        )

    # -- wake-ups ----------------------------------------------------------------------

    @property
    def pushes_changes(self) -> bool:
        """True when a LISTEN thread wakes workers, so they need not check for changes."""
        return self.listen

    def change_marker(self) -> int | None:
        """How many notifications the listener has seen (None in poll-only mode)."""
        if not self.listen:
            return None
        self._ensure_listener()
        return self._notified

    def subscribe(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` (from the listener thread) whenever jobs are enqueued."""
        with self._lock:
            self._subscribers.append(callback)
        if self.listen:
            self._ensure_listener()

    def _ensure_listener(self) -> None:
        with self._lock:
            if self._listener is None:
                self._listener = threading.Thread(
                    target=self._listen, name="sqljobs-listen", daemon=True
                )
                self._listener.start()

    def _listen(self) -> None:
        failures = 0
        while not self._closing.is_set():
            try:
                with psycopg.connect(
                    self._conninfo(), autocommit=True, connect_timeout=int(self.connect_timeout)
                ) as conn:
                    conn.execute(f"LISTEN {self.channel}")
                    failures = 0
                    self._wake()  # anything enqueued while we were not listening
                    while not self._closing.is_set():
                        self._drain_notifications(conn)
            except (psycopg.Error, OSError) as exc:
                failures += 1
                pause = min(5.0, 0.1 * 2**failures)
                log.warning("LISTEN connection lost (%s); reconnecting in %.1f s", exc, pause)
                self._closing.wait(pause)

    def _drain_notifications(self, conn: psycopg.Connection[Any]) -> None:
        """Wait up to 0.1 s (so close() is prompt) for the socket, then read every
        notification libpq has. Reading at the libpq level keeps nothing between calls
        that could be dropped, unlike restarting psycopg's notifies() generator."""
        if not select.select([conn.fileno()], [], [], 0.1)[0]:
            return
        pgconn = conn.pgconn
        pgconn.consume_input()
        got = False
        while pgconn.notifies() is not None:
            got = True
        if got:
            self._wake()

    def _wake(self) -> None:
        self._notified += 1
        for callback in list(self._subscribers):
            callback()

    # -- handler transactions ----------------------------------------------------------

    @contextmanager
    def job_transaction(self) -> Iterator[psycopg.Connection[Any]]:
        with self._connection() as conn, conn.transaction():
            if not self.synchronous_commit:
                conn.execute("SET LOCAL synchronous_commit = on")  # effects are durable
            yield conn

    def _durable(self, name: str, params: Mapping[str, Any]) -> list[Any]:
        """One statement that must survive a server crash, whatever this pool's setting."""

        def work(conn: psycopg.Connection[Any]) -> list[Any]:
            if not self.synchronous_commit:
                conn.execute("SET LOCAL synchronous_commit = on")
            cur = conn.execute(self.queries[name], params)
            return cur.fetchall() if cur.description else []

        return self._run(work, transaction=not self.synchronous_commit)

    def finish_in_transaction(self, connection: Any, outcome: Outcome) -> bool:
        return bool(self._finish(connection, [outcome]))

    # -- inspection and admin ----------------------------------------------------------

    def stats(self) -> Stats:
        counts: dict[str, dict[str, int]] = {}
        for queue, state, n in self._fetch("count_by_queue_state"):
            counts.setdefault(queue, {s.value: 0 for s in JobState})[state] = n
        ages = {q: max(0.0, age) for q, age in self._fetch("oldest_due_by_queue")}
        live = [json.loads(r[0]) for r in self._fetch("live_workers")]
        unserved = unserved_tasks(self._fetch("pending_by_task"), live)
        return Stats(counts, max(ages.values()) if ages else None, ages, len(live), unserved)

    def served_tasks(self) -> set[str]:
        return {name for r in self._fetch("live_workers") for name in json.loads(r[0])}

    def get_job(self, job_id: int) -> Job | None:
        rows = self._fetch("", {"id": job_id}, self.queries["job_columns"] + " WHERE id = %(id)s")
        return _to_job(rows[0]) if rows else None

    def list_jobs(
        self, state: str | None = None, queue: str | None = None, limit: int = 50
    ) -> list[Job]:
        sql = self.queries["job_columns"] + (
            " WHERE (%(state)s::text IS NULL OR state = %(state)s::text)"
            " AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)"
            " ORDER BY id DESC LIMIT %(limit)s"
        )
        rows = self._fetch("", {"state": state, "queue": queue, "limit": limit}, sql)
        return [_to_job(r) for r in rows]

    def retry_job(self, job_id: int) -> bool:
        return self._fetch_none("retry_job", {"id": job_id}) == 1

    def retry_dead(self, queue: str | None = None) -> int:
        return self._fetch_none("retry_dead", {"queue": queue})

    def cancel_job(self, job_id: int) -> bool:
        return self._fetch_none("cancel_job", {"id": job_id}) == 1

    def prune_idempotency(self, before: float, limit: int = 1000) -> int:
        return self._fetch_none("prune_idempotency", {"before": before, "limit": limit})

    def effect_begin(self, key: str, job_id: int | None, holder: str, hold: float) -> EffectRecord:
        params = {"key": key, "job_id": job_id, "holder": holder, "hold": hold}
        row = self._durable("effect_begin", params)[0]
        return EffectRecord(key, row[0], row[1], row[2], row[3], bool(row[4]))

    def effect_set(
        self, key: str, holder: str, state: str, result: str | None, error: str | None
    ) -> None:
        self._durable(
            "effect_set",
            {"key": key, "holder": holder, "state": state, "result": result, "error": error},
        )

    def effect_forget(self, key: str, holder: str) -> None:
        self._durable("effect_forget", {"key": key, "holder": holder})

    def prune_finished(self, before: float, limit: int = 1000) -> int:
        return self._fetch_none("prune_finished", {"before": before, "limit": limit})


def _dead_connection(exc: BackendError) -> bool:
    """The server had ended the session before our statement ran: it was shutting down or
    restarting, an admin terminated it, or it sat idle too long. Only these are replayed:
    a connection lost half-way through a statement may have committed it, and replaying
    an enqueue then would insert its jobs twice."""
    return isinstance(exc.__cause__, _SESSION_ENDED)


def _began(started: Sequence[HeldJob]) -> dict[str, str]:
    """Buffered jobs that started since the last round trip: no longer `prefetched`."""
    return {
        "began_ids": int_array(h.id for h in started),
        "began_tokens": int_array(h.token for h in started),
    }


def _fenced(outcomes: Sequence[Outcome]) -> dict[str, str]:
    """The ids and fencing tokens a batch of outcomes is conditional on."""
    return {
        "ids": int_array(o.job_id for o in outcomes),
        "tokens": int_array(o.token for o in outcomes),
    }


def int_array(values: Iterable[int]) -> str:
    """Integers as one array literal (``{1,2,3}``), cast by the statement: psycopg adapts a
    list element by element in Python, which cost more than the claim statement it fed."""
    return "{" + ",".join(map(str, values)) + "}"


def _to_job(row: Sequence[Any]) -> Job:
    values = list(row)
    values[-1] = json.dumps(values[-1])  # jsonb arrives decoded; row_to_job wants text
    return row_to_job(tuple(values))
