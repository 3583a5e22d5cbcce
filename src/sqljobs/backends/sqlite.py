"""SQLite backend: one file, WAL, a connection per thread, ``BEGIN IMMEDIATE`` for writes.

Every write starts with ``BEGIN IMMEDIATE`` so a busy database surfaces at the start of a
transaction, where the busy timeout waits it out, never half-way through. The enqueue path
and ``ctx.transaction()`` use ``synchronous=FULL``; a worker's own state changes may use
``NORMAL``, since a lost completion only means a harmless re-run, never a lost job.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict
from typing import Any

from ..errors import BackendError, ConfigurationError
from ..jobs import (
    ClaimedJob,
    Due,
    EnqueueResult,
    ExpiredJob,
    HeldJob,
    Job,
    JobState,
    NewJob,
    Outcome,
)
from ..stats import Stats, unserved_tasks
from ..tasks import TaskInfo
from .base import MISSING_SCHEMA, Decide, EffectRecord, WorkerInfo
from .sqlfile import load_migrations, load_queries
from .sqlite_schedules import SqliteSchedules

_PACKAGE = "sqljobs.backends.sqlite_sql"
Q = load_queries(_PACKAGE, "queries.sql")
MIGRATIONS = load_migrations(_PACKAGE + ".migrations")


JOB_COLUMNS = [
    "id",
    "queue",
    "task",
    "payload",
    "key",
    "state",
    "priority",
    "run_at",
    "created_at",
    "attempts",
    "max_attempts",
    "token",
    "lease",
    "lease_until",
    "worker",
    "started_at",
    "finished_at",
    "errors",
    "lease_expiries",
    "crashes",
    "last_error",
    "last_traceback",
    "deadline_at",
    "history",
]


def row_to_job(row: Sequence[Any]) -> Job:
    """Build a Job from a row of JOB_COLUMNS (shared with other backends)."""
    values = dict(zip(JOB_COLUMNS, row, strict=True))
    payload, history = values.pop("payload"), values.pop("history")
    try:
        data = json.loads(payload)
        args, kwargs = list(data.get("args", [])), dict(data.get("kwargs", {}))
    except (ValueError, TypeError, AttributeError):
        args, kwargs = [payload], {}
    values["state"] = JobState(values["state"])
    hist = json.loads(history) if isinstance(history, str) else list(history or [])
    return Job(args=args, kwargs=kwargs, history=hist, **values)


class SqliteBackend(SqliteSchedules):
    """Jobs in one SQLite file, shared by the processes of one host."""

    def __init__(
        self,
        path: str,
        *,
        url: str | None = None,
        synchronous: str = "FULL",
        busy_timeout: float = 30.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if path in ("", ":memory:") or path.startswith("file::memory:"):
            raise ConfigurationError(
                "an in-memory SQLite database cannot be shared between the enqueuer and the "
                "workers: use a file, e.g. sqlite:///jobs.db"
            )
        if synchronous.upper() not in ("FULL", "NORMAL", "EXTRA", "OFF"):
            raise ConfigurationError(f"unknown SQLite synchronous level {synchronous!r}")
        self.path = path
        self.url = url or f"sqlite:///{path}"
        self.synchronous = synchronous.upper()
        self.busy_timeout = busy_timeout
        self.clock = clock
        self._local = threading.local()
        self._migrated = False
        self._migrate_lock = threading.Lock()

    # -- connections -------------------------------------------------------------------

    def connect(self, synchronous: str | None = None) -> sqlite3.Connection:
        """A new connection with sqljobs' settings (WAL, busy timeout, autocommit mode)."""
        try:
            conn = sqlite3.connect(self.path, timeout=self.busy_timeout, isolation_level=None)
        except sqlite3.Error as exc:
            raise BackendError(f"cannot open SQLite database {self.path!r}: {exc}") from exc
        conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout * 1000)}")
        mode = self._wal(conn)
        if mode.lower() != "wal":
            raise BackendError(f"SQLite database {self.path!r} refused WAL mode (got {mode})")
        conn.execute(f"PRAGMA synchronous = {synchronous or self.synchronous}")
        conn.execute("PRAGMA foreign_keys = ON")
        return conn

    def _wal(self, conn: sqlite3.Connection) -> str:
        """Switch to WAL, waiting out a lock: on a new file another connection may be
        creating the schema, and SQLite answers this pragma "database is locked" at once
        instead of calling the busy handler."""
        deadline = time.monotonic() + self.busy_timeout
        while True:
            try:
                return str(conn.execute("PRAGMA journal_mode = WAL").fetchone()[0])
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
    def _write(self) -> Iterator[sqlite3.Connection]:
        conn = self._conn()
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            raise BackendError(f"cannot start a write on {self.path!r}: {exc}") from exc
        try:
            yield conn
            conn.execute("COMMIT")
        except BaseException as exc:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            if isinstance(exc, sqlite3.Error):
                raise BackendError(self._explain("write", exc)) from exc
            raise

    def _read(self, sql: str, params: Any = ()) -> list[Any]:
        try:
            return self._conn().execute(sql, params).fetchall()
        except sqlite3.Error as exc:
            raise BackendError(self._explain("read", exc)) from exc

    def _explain(self, what: str, exc: sqlite3.Error) -> str:
        """The driver's error, with what to do when the cause is a missing schema."""
        text = f"SQLite {what} failed on {self.path!r}: {exc}"
        if "no such table: sqljobs_" in str(exc) or "no such column" in str(exc):
            text += f"; {MISSING_SCHEMA}"
        return text

    def now(self) -> float:
        return self.clock()

    def close(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None and self._local.pid == os.getpid():
            conn.close()
        self._local = threading.local()

    # -- schema ------------------------------------------------------------------------

    def migrate(self) -> list[str]:
        with self._migrate_lock, self._write() as conn:
            conn.execute(
                "CREATE TABLE IF NOT EXISTS sqljobs_migrations "
                "(version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at REAL NOT NULL)"
            )
            done = {v for (v,) in conn.execute("SELECT version FROM sqljobs_migrations")}
            applied = []
            for version, name, sql in MIGRATIONS:
                if version in done:
                    continue
                for statement in _split_statements(sql):
                    conn.execute(statement)
                conn.execute(
                    "INSERT INTO sqljobs_migrations VALUES (?, ?, ?)", (version, name, self.now())
                )
                applied.append(f"{version:04d}_{name}")
            self._migrated = True
            return applied

    # -- enqueue -----------------------------------------------------------------------

    def enqueue_jobs(
        self, jobs: Iterable[NewJob], connection: Any | None = None
    ) -> list[EnqueueResult]:
        jobs = list(jobs)  # built before the write lock is taken
        if connection is not None:
            if not isinstance(connection, sqlite3.Connection):
                raise ConfigurationError(
                    "a SQLite queue needs a sqlite3.Connection to enqueue in the caller's "
                    f"transaction, got {type(connection).__name__}"
                )
            return self._insert(connection, jobs)
        with self._write() as conn:
            return self._insert(conn, jobs)

    def _insert(self, conn: sqlite3.Connection, jobs: Sequence[NewJob]) -> list[EnqueueResult]:
        now = self.now()
        insert, by_key = Q["insert_job"], Q["job_id_by_key"]
        out = []
        for job in jobs:
            if job.key is not None:
                conn.execute(Q["release_key"], {"key": job.key, "now": now})
            cur = conn.execute(
                insert,
                (
                    job.queue,
                    job.task,
                    job.payload,
                    job.key,
                    job.priority,
                    job.run_at,
                    now,
                    job.deadline_at,
                    job.max_attempts,
                    job.lease,
                    job.key_hold,
                ),
            )
            if cur.rowcount == 1:
                out.append(EnqueueResult(int(cur.lastrowid or 0), True))
            else:
                (existing,) = conn.execute(by_key, (job.key,)).fetchone()
                out.append(EnqueueResult(int(existing), False))
        return out

    # -- claim, finish, lease ----------------------------------------------------------

    def claim_jobs(
        self,
        worker: str,
        queues: Sequence[str] | None,
        limit: int,
        leases: Mapping[str, float] | None = None,
        start_now: int | None = None,
        started: Sequence[HeldJob] = (),
    ) -> list[ClaimedJob]:
        return self.finish_and_claim([], worker, queues, limit, leases, start_now, started)[1]

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
        if limit <= 0:
            return self.finish_jobs(outcomes, started), []
        sql, params = self._by_queues("claim", queues, None if leases is None else list(leases))
        params.update(
            worker=worker, now=self.now(), limit=limit, leases=json.dumps(dict(leases or {}))
        )
        with self._write() as conn:
            written = self._finish(conn, outcomes) if outcomes else []
            self._mark_started(conn, started)
            rows = conn.execute(sql, params).fetchall()
            rows.sort(key=lambda r: (-r[4], r[12], r[0]))
            if start_now is not None and len(rows) > start_now:
                buffered = json.dumps([r[0] for r in rows[start_now:]])
                conn.execute(Q["mark_prefetched"], {"ids": buffered})
        return written, [ClaimedJob(*r[:12]) for r in rows]

    @staticmethod
    def _mark_started(conn: sqlite3.Connection, started: Sequence[HeldJob]) -> None:
        if started:
            held = json.dumps([[h.id, h.token] for h in started])
            conn.execute(Q["mark_started"], {"held": held})

    def claim_suspect(
        self, worker: str, queues: Sequence[str] | None, leases: Mapping[str, float] | None = None
    ) -> ClaimedJob | None:
        params = {
            "worker": worker,
            "now": self.now(),
            "leases": json.dumps(dict(leases or {})),
            "queues": json.dumps(list(queues)) if queues else None,
            "tasks": None if leases is None else json.dumps(list(leases)),
        }
        with self._write() as conn:
            row = conn.execute(Q["claim_suspect"], params).fetchone()
        return None if row is None else ClaimedJob(*row[:12])

    def next_due(self, queues: Sequence[str] | None, tasks: Collection[str] | None = None) -> Due:
        sql, params = self._by_queues("next_due", queues, tasks)
        run_at, suspects = self._read(sql, params)[0]
        return Due(None if run_at is None else float(run_at) - self.now(), bool(suspects))

    @staticmethod
    def _by_queues(
        name: str, queues: Sequence[str] | None, tasks: Collection[str] | None = None
    ) -> tuple[str, dict[str, Any]]:
        """The statement for these queues (one queue uses the (queue, ...) index directly)
        and, given ``tasks``, only jobs of those tasks: what a worker can run."""
        params: dict[str, Any] = {}
        if not queues:
            flt = ""
        elif len(queues) == 1:
            flt, params["queue"] = "AND queue = :queue", queues[0]
        else:
            flt = "AND queue IN (SELECT value FROM json_each(:queues))"
            params["queues"] = json.dumps(list(queues))
        if tasks is not None:
            flt += " AND task IN (SELECT value FROM json_each(:tasks))"
            params["tasks"] = json.dumps(list(tasks))
        return Q[name].replace("{queue_filter}", flt), params

    def finish_jobs(
        self, outcomes: Sequence[Outcome], started: Sequence[HeldJob] = ()
    ) -> list[int]:
        if not outcomes and not started:
            return []
        with self._write() as conn:
            self._mark_started(conn, started)
            return self._finish(conn, outcomes)

    def _finish(self, conn: sqlite3.Connection, outcomes: Sequence[Outcome]) -> list[int]:
        now = self.now()
        written = []
        complete, finish = Q["complete_job"], Q["finish_job"]
        for o in outcomes:
            if o.state is JobState.DONE and o.history is None:
                cur = conn.execute(complete, {"id": o.job_id, "token": o.token, "now": now})
            else:
                cur = conn.execute(finish, _outcome_params(o, now))
            if cur.rowcount == 1:
                written.append(o.job_id)
        return written

    def renew_leases(self, worker: str, held: Sequence[HeldJob]) -> set[int]:
        now = self.now()
        with self._write() as conn:
            conn.execute(Q["touch_worker"], {"worker": worker, "now": now})
            if not held:
                return set()
            packed = json.dumps([[h.id, h.token] for h in held])
            rows = conn.execute(Q["renew_leases"], {"held": packed, "now": now}).fetchall()
        return {r[0] for r in rows}

    def rescue_jobs(
        self, decide: Decide, worker: str | None = None, limit: int = 500
    ) -> list[Outcome]:
        with self._write() as conn:
            now = self.now()
            if worker is None:
                rows = conn.execute(Q["expired_jobs"], {"now": now, "limit": limit}).fetchall()
            else:
                rows = conn.execute(
                    Q["jobs_of_worker"], {"worker": worker, "limit": limit}
                ).fetchall()
            outcomes = [decide(_expired(r), now) for r in rows]
            written = set(self._finish(conn, outcomes))
        return [o for o in outcomes if o.job_id in written]

    def register_worker(self, info: WorkerInfo) -> None:
        now = self.now()
        params = {
            "id": info.id,
            "host": info.host,
            "pid": info.pid,
            "queues": json.dumps(list(info.queues) if info.queues else None),
            "concurrency": info.concurrency,
            "heartbeat_interval": info.heartbeat_interval,
            "tasks": json.dumps([t.name for t in info.tasks]),
            "now": now,
        }
        with self._write() as conn:
            conn.execute(Q["register_worker"], params)
            conn.executemany(Q["save_task"], [{**asdict(t), "now": now} for t in info.tasks])

    def task_names(self) -> list[str]:
        return [r[0] for r in self._read(Q["task_names"])]

    def task_info(self, name: str) -> TaskInfo | None:
        rows = self._read(Q["task_info"], (name,))
        return TaskInfo(*rows[0]) if rows else None

    def unregister_worker(self, worker: str) -> None:
        with self._write() as conn:
            conn.execute(Q["unregister_worker"], {"worker": worker})

    def subscribe(self, callback: Callable[[], None]) -> None:
        """Nothing to subscribe to: workers watch ``change_marker`` (PRAGMA data_version)."""

    pushes_changes = False  # workers watch change_marker (PRAGMA data_version) instead
    claim_lanes = 1  # one writer at a time: a second claim in flight would only wait

    def change_marker(self) -> int | None:
        (value,) = self._read("PRAGMA data_version")[0]
        return int(value)

    # -- handler transactions ----------------------------------------------------------

    @contextmanager
    def job_transaction(self) -> Iterator[sqlite3.Connection]:
        conn = self.connect(synchronous="FULL")
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
        finally:
            conn.close()

    def finish_in_transaction(self, connection: Any, outcome: Outcome) -> bool:
        return bool(self._finish(connection, [outcome]))

    # -- inspection and admin ----------------------------------------------------------

    def stats(self) -> Stats:
        now = self.now()
        counts: dict[str, dict[str, int]] = {}
        for queue, state, n in self._read(Q["count_by_queue_state"]):
            counts.setdefault(queue, {s.value: 0 for s in JobState})[state] = n
        ages = {q: max(0.0, now - t) for q, t in self._read(Q["oldest_due_by_queue"], {"now": now})}
        live = [json.loads(r[0]) for r in self._read(Q["live_workers"], {"now": now})]
        unserved = unserved_tasks(self._read(Q["pending_by_task"]), live)
        return Stats(counts, max(ages.values()) if ages else None, ages, len(live), unserved)

    def served_tasks(self) -> set[str]:
        rows = self._read(Q["live_workers"], {"now": self.now()})
        return {name for r in rows for name in json.loads(r[0])}

    def get_job(self, job_id: int) -> Job | None:
        rows = self._read(Q["get_job"], (job_id,))
        return row_to_job(rows[0]) if rows else None

    def list_jobs(
        self, state: str | None = None, queue: str | None = None, limit: int = 50
    ) -> list[Job]:
        rows = self._read(Q["list_jobs"], {"state": state, "queue": queue, "limit": limit})
        return [row_to_job(r) for r in rows]

    def retry_job(self, job_id: int) -> bool:
        with self._write() as conn:
            return conn.execute(Q["retry_job"], {"id": job_id, "now": self.now()}).rowcount == 1

    def retry_dead(self, queue: str | None = None) -> int:
        with self._write() as conn:
            return conn.execute(Q["retry_dead"], {"queue": queue, "now": self.now()}).rowcount

    def cancel_job(self, job_id: int) -> bool:
        with self._write() as conn:
            return conn.execute(Q["cancel_job"], {"id": job_id, "now": self.now()}).rowcount == 1

    def prune_idempotency(self, before: float, limit: int = 1000) -> int:
        with self._write() as conn:
            return conn.execute(Q["prune_idempotency"], {"before": before, "limit": limit}).rowcount

    def effect_begin(self, key: str, job_id: int | None, holder: str, hold: float) -> EffectRecord:
        params = {"key": key, "job_id": job_id, "holder": holder, "hold": hold, "now": self.now()}
        with self._write() as conn:
            row = conn.execute(Q["effect_begin"], params).fetchone()
        return EffectRecord(key, row[0], row[1], row[2], row[3], bool(row[4]))

    def effect_set(
        self, key: str, holder: str, state: str, result: str | None, error: str | None
    ) -> None:
        params = {
            "key": key,
            "holder": holder,
            "state": state,
            "result": result,
            "error": error,
            "now": self.now(),
        }
        with self._write() as conn:
            conn.execute(Q["effect_set"], params)

    def effect_forget(self, key: str, holder: str) -> None:
        with self._write() as conn:
            conn.execute(Q["effect_forget"], {"key": key, "holder": holder})

    def prune_finished(self, before: float, limit: int = 1000) -> int:
        with self._write() as conn:
            return conn.execute(Q["prune_finished"], {"before": before, "limit": limit}).rowcount


def _outcome_params(o: Outcome, now: float) -> dict[str, Any]:
    return {
        "id": o.job_id,
        "token": o.token,
        "state": o.state.value,
        "delay": o.delay,
        "uncharge": 1 if o.uncharge else 0,
        "now": now,
        "error": o.error,
        "traceback": o.traceback,
        "errors": o.errors,
        "lease_expiries": o.lease_expiries,
        "crashes": o.crashes,
        "history": None if o.history is None else json.dumps(o.history),
    }


def _expired(r: Sequence[Any]) -> ExpiredJob:
    return ExpiredJob(
        r[0],
        r[1],
        r[2],
        r[3],
        r[4],
        r[5],
        r[6],
        r[7],
        r[8],
        r[9],
        bool(r[10]),
        r[11],
        r[12],
        r[13],
        bool(r[14]),
    )


def _split_statements(sql: str) -> list[str]:
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
