"""Claims and next_due read the claim indexes level by level, (queue, priority), each
level's due head: jobs not yet due and other queues' backlogs are never walked.

The work a statement does is counted, not timed: PostgreSQL's buffers (EXPLAIN ANALYZE)
and SQLite's virtual machine steps (a progress handler called on every one), each against
the same statement on a small table.
"""

from __future__ import annotations

import json
import re
import sqlite3
import time
from typing import Any

import psycopg
import pytest
from psycopg import sql as pg_sql

from sqljobs import App
from sqljobs.backends import open_backend
from sqljobs.url import url_options

from .conftest import db_execute, is_pg

FUTURE, BACKLOG = 60_000, 100_000
"""Jobs of the measured queue due in a day (in three priorities), and due jobs of another
queue (in one)."""

_PG_FILL = (
    "INSERT INTO sqljobs_jobs (queue, task, payload, state, run_at, created_at, max_attempts,"
    " lease, priority) SELECT %s, 'noop', '{}', 'pending',"
    " now() + make_interval(secs => %s + i / 1000.0), now(), 5, 30, i %% %s"
    " FROM generate_series(1, %s) AS i"
)
_SQLITE_FILL = (
    "INSERT INTO sqljobs_jobs (queue, task, payload, state, run_at, created_at, max_attempts,"
    " lease, priority) SELECT ?, 'noop', '{}', 'pending', ? + ? + i / 1000.0, ?, 5, 30, i % ?"
    " FROM (WITH RECURSIVE n (i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?)"
    " SELECT i FROM n)"
)


def _fill(
    url: str, queue: str, due_in: float, rows: int, priorities: int = 1, analyze: bool = True
) -> None:
    if is_pg(url):
        with psycopg.connect(url_options(url)[0], autocommit=True) as conn:
            if not analyze:  # (the statistics stay those of the table before)
                conn.execute("ALTER TABLE sqljobs_jobs SET (autovacuum_enabled = false)")
            conn.execute(_PG_FILL, (queue, due_in, priorities, rows))
            if analyze:
                conn.execute("VACUUM ANALYZE sqljobs_jobs")
        return
    file = sqlite3.connect(url.removeprefix("sqlite:///"))
    now = time.time()
    with file:
        file.execute(_SQLITE_FILL, (queue, now, due_in, now, priorities, rows))
    file.close()


_PARAMS = {"worker": "w", "limit": 40, "leases": "{}", "start_now": 40,
           "began_ids": "{}", "began_tokens": "{}"}  # fmt: skip


def _work(url: str, backend: Any, name: str, queues: list[str] | None) -> int:
    """What statement ``name`` (a claim of 40, rolled back, or next_due) costs: buffers on
    PostgreSQL, virtual machine steps on SQLite."""
    sql, params = backend._filtered(name, queues, ["noop"])
    params = {**_PARAMS, **params, "now": time.time()}
    if is_pg(url):
        return _generic_plan_buffers(url, sql, params)
    conn = sqlite3.connect(url.removeprefix("sqlite:///"), isolation_level=None)
    steps = [0]

    def step() -> int:
        steps[0] += 1
        return 0

    conn.set_progress_handler(step, 1)
    conn.execute("BEGIN IMMEDIATE")
    conn.execute(sql, params).fetchall()
    conn.execute("ROLLBACK")
    conn.close()
    return steps[0]


def _generic_plan_buffers(url: str, sql: str, params: dict[str, Any]) -> int:
    """Buffers the statement touches run as a worker runs it: prepared, with the generic
    plan (made without the parameters' values, which a custom plan would see)."""
    names: list[str] = []

    def number(match: re.Match[str]) -> str:
        if match[1] not in names:
            names.append(match[1])
        return f"${names.index(match[1]) + 1}"

    text = re.sub(r"%\((\w+)\)s", number, sql)
    values = pg_sql.SQL(", ").join(pg_sql.Literal(params[n]) for n in names)
    with psycopg.connect(url_options(url)[0]) as conn:
        conn.execute("SET plan_cache_mode = force_generic_plan")
        conn.execute(pg_sql.SQL("PREPARE measured AS {}").format(pg_sql.SQL(text)))
        query = pg_sql.SQL("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) EXECUTE measured ({})")
        (doc,) = conn.execute(query.format(values)).fetchone()  # type: ignore[misc]
        conn.rollback()
    plan = doc[0]["Plan"]
    return int(plan["Shared Hit Blocks"] + plan["Shared Read Blocks"])


@pytest.mark.slow
@pytest.mark.parametrize("queues", [["default"], ["default", "mail"], None])
def test_claims_and_next_due_read_no_job_that_is_not_due(
    url: str, queues: list[str] | None
) -> None:
    """A queue holding 60k jobs due in a day, in three priorities: a claim that finds its
    one due job, and next_due, cost about what they cost beside 100 such jobs. Read in
    claim order as one scan, the claim walked every job not yet due."""
    app = App(url)
    app.migrate()
    backend = open_backend(app.url)
    app.task(name="noop")(lambda: None).enqueue()
    _fill(url, "default", 86_400.0, 100, priorities=3)
    small = {name: _work(url, backend, name, queues) for name in ("claim", "next_due")}
    _fill(url, "default", 86_400.0, FUTURE, priorities=3)
    big = {name: _work(url, backend, name, queues) for name in ("claim", "next_due")}
    for name in small:
        assert big[name] < 3 * small[name] + 50, (name, big, small)
    claimed = backend.claim_jobs("w", queues, 40)
    assert [job.task for job in claimed] == ["noop"]  # the one due job of the queue
    backend.close()
    app.close()


@pytest.mark.slow
@pytest.mark.parametrize("queues", [["default"], ["default", "mail"]])
def test_claims_and_next_due_read_no_job_of_a_queue_they_do_not_serve(
    url: str, queues: list[str]
) -> None:
    """Another queue's backlog of 100k jobs, all due before this queue's 500: a claim of
    40 of these, and next_due, cost about what they cost without it. Filtering the
    pending jobs in due order by queue walked that backlog: next_due always, and the
    claim wherever a plan took the index of every queue (a generic plan did)."""
    app = App(url)
    app.migrate()
    backend = open_backend(app.url)
    app.task(name="noop")(lambda: None)
    _fill(url, "default", -60.0, 500)
    small = {name: _work(url, backend, name, queues) for name in ("claim", "next_due")}
    db_execute(app, "DELETE FROM sqljobs_jobs")
    # the statistics know only the backlog's queue, as after a burst into a quiet queue
    _fill(url, "other", -3_600.0, BACKLOG)
    _fill(url, "default", -60.0, 500, analyze=False)
    big = {name: _work(url, backend, name, queues) for name in ("claim", "next_due")}
    for name in small:
        assert big[name] < 3 * small[name] + 50, (name, big, small)
    assert {job.queue for job in backend.claim_jobs("w", queues, 40)} == {"default"}
    backend.close()
    app.close()


def test_claims_keep_priority_then_due_time_order_across_queues_and_levels(url: str) -> None:
    """The levels are read best first: the highest priority's due jobs, oldest first,
    across the queues served; a job of a higher priority that is not due yet waits."""
    app = App(url)
    note = app.task(name="note")(lambda label: None)
    mail = app.task(name="mail", queue="mail")(lambda label: None)
    note.with_options(priority=9, delay=3600).enqueue("later, high")
    note.with_options(priority=1).enqueue("low")
    mail.with_options(priority=5).enqueue("mail mid")
    note.with_options(priority=5).enqueue("note mid")
    mail.with_options(priority=7).enqueue("mail high")
    backend = open_backend(app.url)
    claimed = backend.claim_jobs("w", ["default", "mail"], 10)
    order = [json.loads(job.payload)["args"][0] for job in claimed]
    assert order == ["mail high", "mail mid", "note mid", "low"]
    assert backend.claim_jobs("w", None, 10) == []  # the high one is not due
    backend.close()
    app.close()
