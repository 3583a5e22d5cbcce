"""Bulk-loading millions of jobs into sqljobs' own table, by SQL rather than through enqueue.

The scale suite needs tables of 1M pending and 10M finished jobs. ``enqueue_many`` does
about 100k jobs a second here, so 10M would take minutes of loading a backend: instead one
``INSERT ... SELECT`` over ``generate_series`` (PostgreSQL) or a recursive CTE (SQLite)
writes rows shaped like the ones sqljobs writes itself (the columns and values of a
``noop`` job enqueued by the API, and for finished ones what a worker's completion sets),
so every partial index holds what it would in service. Only the loading goes around the
API; everything timed goes through it.

On PostgreSQL the load is followed by ``VACUUM ANALYZE``, as autovacuum would soon do with
the table's own settings; SQLite is left without statistics, as sqljobs leaves it.
"""

from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass

import psycopg

CHUNK = 1_000_000
"""Rows a statement: a transaction of 10M rows would hold the whole load in one go."""


@dataclass(frozen=True)
class Fill:
    """What the table holds besides the measured jobs: ``rows`` jobs in ``queue``, either
    ``done`` or pending, the first due ``due_in`` seconds from now (negative: overdue) and
    the others one a millisecond after it, in id order."""

    rows: int
    queue: str = "default"
    done: bool = False
    due_in: float = -3600.0


# Columns that are not given take the schema's defaults, as in an enqueue. The payload is
# the one `noop(i)` would have.
SQLITE_FILL = """
INSERT INTO sqljobs_jobs (queue, task, payload, state, run_at, created_at, max_attempts,
                          lease, attempts, token, worker, started_at, finished_at)
SELECT :queue, 'noop', '{"args":[' || i || '],"kwargs":{}}',
       CASE WHEN :done THEN 'done' ELSE 'pending' END,
       :now + :due_in + i / 1000.0, :now + :due_in + i / 1000.0,
       5, 30.0,
       CASE WHEN :done THEN 1 ELSE 0 END, CASE WHEN :done THEN 1 ELSE 0 END,
       CASE WHEN :done THEN 'bench-loader' END,
       CASE WHEN :done THEN :now + :due_in + i / 1000.0 END,
       CASE WHEN :done THEN :now + :due_in + i / 1000.0 + 0.001 END
FROM (WITH RECURSIVE n (i) AS (SELECT :first UNION ALL SELECT i + 1 FROM n WHERE i < :last)
      SELECT i FROM n)
"""

PG_FILL = """
INSERT INTO sqljobs_jobs (queue, task, payload, state, run_at, created_at, max_attempts,
                          lease, attempts, token, worker, started_at, finished_at)
SELECT %(queue)s, 'noop', '{"args":[' || i || '],"kwargs":{}}',
       CASE WHEN %(done)s THEN 'done' ELSE 'pending' END,
       t, t, 5, 30.0,
       CASE WHEN %(done)s THEN 1 ELSE 0 END, CASE WHEN %(done)s THEN 1 ELSE 0 END,
       CASE WHEN %(done)s THEN 'bench-loader' END,
       CASE WHEN %(done)s THEN t END,
       CASE WHEN %(done)s THEN t + interval '1 ms' END
FROM generate_series(%(first)s::bigint, %(last)s::bigint) AS i,
     LATERAL (SELECT now() + make_interval(secs => %(due_in)s + i / 1000.0)) AS at(t)
"""


def _chunks(rows: int) -> list[tuple[int, int]]:
    return [(first, min(first + CHUNK - 1, rows)) for first in range(1, rows + 1, CHUNK)]


def sqlite_fill(path: str, fill: Fill) -> float:
    """Add ``fill``'s rows to the SQLite file at ``path``; the seconds it took."""
    started = time.perf_counter()
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA busy_timeout = 60000")
        for first, last in _chunks(fill.rows):
            params = {"queue": fill.queue, "done": int(fill.done), "due_in": fill.due_in,
                      "now": time.time(), "first": first, "last": last}  # fmt: skip
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(SQLITE_FILL, params)
            conn.execute("COMMIT")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # the load's WAL is not the test's
    finally:
        conn.close()
    return time.perf_counter() - started


def pg_fill(url: str, fill: Fill) -> float:
    """Add ``fill``'s rows to the PostgreSQL database at ``url``, then vacuum and analyse
    the table as autovacuum would; the seconds it took."""
    started = time.perf_counter()
    with psycopg.connect(url, autocommit=True) as conn:
        for first, last in _chunks(fill.rows):
            params = {"queue": fill.queue, "done": fill.done, "due_in": fill.due_in,
                      "first": first, "last": last}  # fmt: skip
            conn.execute(PG_FILL, params)
        conn.execute("VACUUM ANALYZE sqljobs_jobs")
    return time.perf_counter() - started
