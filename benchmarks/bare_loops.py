"""What each database does for a job loop with no queue library: the ceiling on this box.

Each loop claims 100 jobs per statement and marks the 100 done in one statement: no leases
renewed, no fencing beyond state and token, no threads handing work around. Whatever
sqljobs adds on top (safety, concurrency, a handler call) shows up as the gap to these.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from common import WAIT_LIMIT, Sample, scratch_dir

if TYPE_CHECKING:  # the SQLite half runs without psycopg
    import psycopg


# -- SQLite: one thread, decoding and calling each job -------------------------------------

BATCH = 100
SQLITE_SCHEMA = """
CREATE TABLE jobs (
    id INTEGER PRIMARY KEY, task TEXT NOT NULL, payload TEXT NOT NULL,
    state TEXT NOT NULL DEFAULT 'pending', token INTEGER NOT NULL DEFAULT 0,
    run_at REAL NOT NULL, started_at REAL, lease_until REAL, finished_at REAL);
CREATE INDEX jobs_pending ON jobs (run_at, id) WHERE state = 'pending';
"""
SQLITE_CLAIM = """
UPDATE jobs SET state = 'running', token = token + 1, started_at = :now, lease_until = :now + 30
WHERE id IN (SELECT id FROM jobs WHERE state = 'pending' AND run_at <= :now
             ORDER BY run_at, id LIMIT :limit)
RETURNING id, task, payload
"""
SQLITE_COMPLETE = """
UPDATE jobs SET state = 'done', finished_at = :now, lease_until = NULL
WHERE id IN (SELECT value FROM json_each(:ids)) AND state = 'running'
"""


def _write(conn: sqlite3.Connection, sql: str, params: dict[str, Any]) -> list[Any]:
    conn.execute("BEGIN IMMEDIATE")
    rows = conn.execute(sql, params).fetchall()
    conn.execute("COMMIT")
    return rows


def _noop(*_args: Any) -> None:
    """The handler: does nothing, like the queues' no-op task."""


def _fill(path: Path, n: int) -> sqlite3.Connection:
    """WAL and synchronous=NORMAL: what a sqljobs worker uses for its own writes."""
    conn = sqlite3.connect(path, isolation_level=None, timeout=30)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = NORMAL")
    conn.executescript(SQLITE_SCHEMA)
    now = time.time()
    rows = [("noop", json.dumps({"args": [i], "kwargs": {}}), now) for i in range(n)]
    conn.execute("BEGIN IMMEDIATE")
    conn.executemany("INSERT INTO jobs (task, payload, run_at) VALUES (?, ?, ?)", rows)
    conn.execute("COMMIT")
    return conn


def sqlite_drain(n: int) -> Sample:
    """Claim, run and complete ``n`` no-op jobs, 100 per statement, on one thread."""
    with scratch_dir() as folder:
        conn = _fill(folder / "bare.db", n)
        try:
            started = time.perf_counter()
            done = 0
            while rows := _write(conn, SQLITE_CLAIM, {"now": time.time(), "limit": BATCH}):
                for _id, _task, payload in rows:
                    data = json.loads(payload)
                    _noop(*data["args"], **data["kwargs"])
                ids = json.dumps([r[0] for r in rows])
                _write(conn, SQLITE_COMPLETE, {"now": time.time(), "ids": ids})
                done += len(rows)
            elapsed = time.perf_counter() - started
        finally:
            conn.close()
    if done != n:
        raise RuntimeError(f"bare loop completed {done} of {n} jobs")
    return {"jobs_per_s": n / elapsed}


# -- PostgreSQL: 8 connections on 8 threads, no handler called -----------------------------

PG_SCHEMA = """
CREATE TABLE bare_jobs (
    id bigserial PRIMARY KEY, queue text NOT NULL DEFAULT 'default', payload text NOT NULL,
    state text NOT NULL DEFAULT 'pending', run_at timestamptz NOT NULL DEFAULT now(),
    token bigint NOT NULL DEFAULT 0, started_at timestamptz, finished_at timestamptz);
CREATE INDEX bare_jobs_pending ON bare_jobs (run_at, id) WHERE state = 'pending'
"""
PG_CLAIM = """
WITH picked AS MATERIALIZED (
    SELECT id FROM bare_jobs WHERE state = 'pending' AND run_at <= now()
    ORDER BY run_at, id LIMIT 100 FOR UPDATE SKIP LOCKED)
UPDATE bare_jobs AS j SET state = 'running', token = j.token + 1, started_at = now()
FROM picked WHERE j.id = picked.id RETURNING j.id, j.token, j.payload
"""
PG_COMPLETE = """
UPDATE bare_jobs AS j SET state = 'done', finished_at = now()
FROM unnest(%s::bigint[], %s::bigint[]) AS o(id, token)
WHERE j.id = o.id AND j.token = o.token AND j.state = 'running'
"""


def _bare_loop(conn: psycopg.Connection[Any], done: list[int]) -> None:
    while rows := conn.execute(PG_CLAIM).fetchall():
        conn.execute(PG_COMPLETE, ([r[0] for r in rows], [r[1] for r in rows]))
        done.append(len(rows))


def postgres_drain(url: str, n: int, connections: int = 8) -> Sample:
    """Claim 100 and complete 100 per autocommit statement on ``connections`` threads:
    what the hot path costs with no library, and no handler called."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as setup:
        setup.execute(PG_SCHEMA)
        setup.execute("INSERT INTO bare_jobs (payload) SELECT '[' || i || ']' "
                      "FROM generate_series(1, %s) AS i", (n,))  # fmt: skip
    conns = [psycopg.connect(url, autocommit=True) for _ in range(connections)]
    done: list[int] = []
    try:
        threads = [threading.Thread(target=_bare_loop, args=(c, done)) for c in conns]
        started = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join(WAIT_LIMIT)
        elapsed = time.perf_counter() - started
    finally:
        for c in conns:
            c.close()
    if sum(done) != n:
        raise RuntimeError(f"bare loop finished {sum(done)} of {n} jobs")
    return {"jobs_per_s": n / elapsed}
