"""A bare sqlite3 reference loop: the ceiling for a Python job loop on this machine.

One thread claims 100 jobs per ``UPDATE ... RETURNING``, decodes and calls each, and marks
the 100 done in one statement. No leases renewed, no threads, no fencing beyond state:
whatever sqljobs adds on top (safety, concurrency) shows up as the gap to this figure.
"""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path
from typing import Any

from common import Sample, temp_db

BATCH = 100

SCHEMA = """
CREATE TABLE jobs (
    id          INTEGER PRIMARY KEY,
    task        TEXT NOT NULL,
    payload     TEXT NOT NULL,
    state       TEXT NOT NULL DEFAULT 'pending',
    token       INTEGER NOT NULL DEFAULT 0,
    run_at      REAL NOT NULL,
    started_at  REAL,
    lease_until REAL,
    finished_at REAL
);
CREATE INDEX jobs_pending ON jobs (run_at, id) WHERE state = 'pending';
"""

CLAIM = """
UPDATE jobs SET state = 'running', token = token + 1, started_at = :now,
                lease_until = :now + 30
WHERE id IN (SELECT id FROM jobs WHERE state = 'pending' AND run_at <= :now
             ORDER BY run_at, id LIMIT :limit)
RETURNING id, task, payload
"""

COMPLETE = """
UPDATE jobs SET state = 'done', finished_at = :now, lease_until = NULL
WHERE id IN (SELECT value FROM json_each(:ids)) AND state = 'running'
"""


def _connect(path: Path) -> sqlite3.Connection:
    """WAL and synchronous=NORMAL: the settings a sqljobs worker uses for its own writes."""
    conn = sqlite3.connect(path, isolation_level=None, timeout=30)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = NORMAL")
    return conn


def _fill(conn: sqlite3.Connection, n: int) -> None:
    conn.executescript(SCHEMA)
    now = time.time()
    rows = [("noop", json.dumps({"args": [i], "kwargs": {}}), now) for i in range(n)]
    conn.execute("BEGIN IMMEDIATE")
    conn.executemany("INSERT INTO jobs (task, payload, run_at) VALUES (?, ?, ?)", rows)
    conn.execute("COMMIT")


def _write(conn: sqlite3.Connection, sql: str, params: dict[str, Any]) -> list[Any]:
    conn.execute("BEGIN IMMEDIATE")
    rows = conn.execute(sql, params).fetchall()
    conn.execute("COMMIT")
    return rows


def _noop(*_args: Any) -> None:
    """The handler: does nothing, like the queue benchmarks' no-op task."""


def drain(n: int) -> Sample:
    """Claim, run and complete ``n`` no-op jobs, 100 per statement; return jobs/s."""
    with temp_db() as path:
        conn = _connect(path)
        try:
            _fill(conn, n)
            started = time.perf_counter()
            done = 0
            while rows := _write(conn, CLAIM, {"now": time.time(), "limit": BATCH}):
                for _id, _task, payload in rows:
                    data = json.loads(payload)
                    _noop(*data["args"], **data["kwargs"])
                ids = json.dumps([r[0] for r in rows])
                _write(conn, COMPLETE, {"now": time.time(), "ids": ids})
                done += len(rows)
            elapsed = time.perf_counter() - started
        finally:
            conn.close()
    if done != n:
        raise RuntimeError(f"bare loop completed {done} of {n} jobs")
    return {"jobs_per_s": n / elapsed}
