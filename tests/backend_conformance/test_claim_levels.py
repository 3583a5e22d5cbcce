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
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest
from psycopg import sql as pg_sql

from sqljobs import App
from sqljobs.backends import open_backend
from sqljobs.backends.base import Claim
from sqljobs.url import url_options

from ..conftest import db_execute, is_pg

COVERS = {"claim_jobs"}

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
    sql, params = backend.filtered(name, queues, ["noop"])
    return _measured(url, sql, {**_PARAMS, **params, "now": time.time()}).work


@dataclass
class Measured:
    """A statement's work (PostgreSQL buffers, SQLite VM steps), the rows it returned,
    and on PostgreSQL its plan as text."""

    work: int
    rows: list[tuple[Any, ...]]
    plan: str = ""


def _measured(url: str, sql: str, params: dict[str, Any], before: str = "") -> Measured:
    """Run ``sql`` once, rolled back, as a worker runs it (``before`` first, in the same
    transaction, unmeasured)."""
    if is_pg(url):
        return _generic_plan(url, sql, params, before)
    conn = sqlite3.connect(url.removeprefix("sqlite:///"), isolation_level=None)
    steps = [0]

    def step() -> int:
        steps[0] += 1
        return 0

    conn.execute("BEGIN IMMEDIATE")
    if before:
        conn.execute(before)
    conn.set_progress_handler(step, 1)
    rows = conn.execute(sql, params).fetchall()
    conn.execute("ROLLBACK")
    conn.close()
    return Measured(steps[0], rows)


def _generic_plan(url: str, sql: str, params: dict[str, Any], before: str = "") -> Measured:
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
        if before:
            conn.execute(before)
        conn.execute("SET plan_cache_mode = force_generic_plan")
        conn.execute(pg_sql.SQL("PREPARE measured AS {}").format(pg_sql.SQL(text)))
        query = pg_sql.SQL("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) EXECUTE measured ({})")
        (doc,) = conn.execute(query.format(values)).fetchone()  # type: ignore[misc]
        conn.rollback()
        if before:
            conn.execute(before)
        rows = conn.execute(sql, params).fetchall()
        conn.rollback()
    plan = doc[0]["Plan"]
    return Measured(int(plan["Shared Hit Blocks"] + plan["Shared Read Blocks"]), rows,
                    json.dumps(plan))  # fmt: skip


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
    claimed = backend.claim_jobs(Claim("w", queues, 40))
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
    assert {job.queue for job in backend.claim_jobs(Claim("w", queues, 40))} == {"default"}
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
    claimed = backend.claim_jobs(Claim("w", ["default", "mail"], 10))
    order = [json.loads(job.payload)["args"][0] for job in claimed]
    assert order == ["mail high", "mail mid", "note mid", "low"]
    assert backend.claim_jobs(Claim("w", None, 10)) == []  # the high one is not due
    backend.close()
    app.close()


def _fill_limited(url: str, key: str, due_in: float, rows: int, priorities: int) -> None:
    """``rows`` jobs of limit key ``key`` (5 at once), due in ``due_in`` seconds."""
    _fill(url, "default", due_in, rows, priorities=priorities, analyze=False)
    limited = "UPDATE sqljobs_jobs SET limit_key = {0}, limit_max = 5 WHERE limit_key IS NULL"
    if is_pg(url):
        with psycopg.connect(url_options(url)[0], autocommit=True) as conn:
            conn.execute(limited.format("%s"), (key,))
            conn.execute("VACUUM ANALYZE sqljobs_jobs")
        return
    file = sqlite3.connect(url.removeprefix("sqlite:///"))
    with file:
        file.execute(limited.format("?"), (key,))
    file.close()


def _limited_work(url: str, backend: Any, key: str, ended: tuple[int, int] | None) -> Measured:
    """A limited claim's scan of ``key`` (up to 5 a level), or (``ended``: a running job's
    id and token) the hand-over of its slot as it completes, measured and rolled back."""
    before = ""
    if ended is None:
        name = "claim_limited" if is_pg(url) else "limited_candidates"
        extra: dict[str, Any] = {"keys": [key] if is_pg(url) else json.dumps([key]), "most": 5}
    elif is_pg(url):
        name = "complete_and_hand_over"
        extra = {"ids": [ended[0]], "tokens": [ended[1]], "results": None, "progress": None,
                 "channel": "sqljobs_public", "hand_over": 5}  # fmt: skip
    else:  # hand_over follows its job's outcome, in the same transaction
        name, extra = "hand_over", {"ended": json.dumps([ended[0]]), "all_buffered": False}
        before = (
            f"UPDATE sqljobs_jobs SET state = 'done', lease_until = NULL WHERE id = {int(ended[0])}"
        )
    sql, params = backend.filtered(name, None, ["noop"])
    return _measured(url, sql, {**_PARAMS, **params, **extra, "now": time.time()}, before)


def _heirs(url: str, found: Measured) -> int:
    """How many jobs a measured hand-over started."""
    if is_pg(url):
        return int(found.rows[0][2])  # (ids, limited, handed, the claimed rows...)
    return len(found.rows)


@pytest.mark.slow
def test_limited_claims_and_hand_overs_read_no_job_that_is_not_due(url: str) -> None:
    """A limit key whose 5,000 due jobs wait behind 40k of higher priorities (and 20k of
    their own) due in a day: the limited claim's scan of the key, and a completion
    handing its slot over to the key's next due job, cost about what they cost behind
    100 such jobs. Read in claim order as one scan of the key, each walked every job of
    the key not yet due. On PostgreSQL no level is read through the run_at index of
    limited jobs, which holds every due one of every key."""
    app = App(url)
    app.migrate()
    backend: Any = open_backend(app.url)  # (its statements are measured: _filtered)
    noop = app.task(name="noop", concurrency=5)(lambda: None)  # one limit key: the task's name
    noop.enqueue()
    (running,) = backend.claim_jobs(Claim("w", None, 1, limited=True))
    ended = (running.id, running.token)
    _fill_limited(url, "noop", -60.0, 5_000, priorities=1)
    _fill_limited(url, "noop", 86_400.0, 100, priorities=3)
    small = [_limited_work(url, backend, "noop", None), _limited_work(url, backend, "noop", ended)]
    _fill_limited(url, "noop", 86_400.0, FUTURE, priorities=3)
    big = [_limited_work(url, backend, "noop", None), _limited_work(url, backend, "noop", ended)]
    for name, s, b in zip(("claim", "hand over"), small, big, strict=True):
        assert b.work < 3 * s.work + 50, (name, b.work, s.work)
        assert "sqljobs_jobs_limited_due" not in b.plan, (name, b.plan)
    # the claim found the key's 4 free slots' worth (SQLite: the 5 a level it was asked
    # for, the caller keeps 4), and the hand-over its one heir
    assert len(big[0].rows) == (4 if is_pg(url) else 5)
    assert _heirs(url, big[1]) == 1
    claimed = backend.claim_jobs(Claim("w", None, 40, limited=True))
    assert len(claimed) == 4  # the key's free slots, taken by due jobs of the lowest priority
    assert all(job.priority == 0 and job.run_at <= time.time() for job in claimed)
    if is_pg(url):  # the index is kept for when the next delayed limited job falls due
        due_sql, due_params = backend.filtered("next_limited_due", None, ["noop"])
        assert "sqljobs_jobs_limited_due" in _generic_plan(url, due_sql, due_params).plan
    backend.close()
    app.close()


def test_limited_claims_take_free_slots_in_claim_order_across_levels(url: str) -> None:
    """Four free slots of a key whose due jobs sit at two priorities: the two of the
    higher, then the two oldest of the lower; a higher priority not yet due waits. A
    completion then hands its slot to the next job in line, or to none if that one
    carries a rate: never to a job further back."""
    app = App(url)
    note = app.task(name="noop", concurrency=5)(lambda label: None)
    backend = open_backend(app.url)
    note.with_options(priority=0).enqueue("first")
    (first,) = backend.claim_jobs(Claim("w", None, 1, limited=True))  # holds one of the 5 slots
    low = {label: note.with_options(priority=0).enqueue(label).id
           for label in ("low 1", "low 2", "low 3", "low 4")}  # fmt: skip
    note.with_options(priority=2).enqueue("high 1")
    note.with_options(priority=2).enqueue("high 2")
    note.with_options(priority=5, delay=3600).enqueue("later, higher")
    claimed = backend.claim_jobs(Claim("w", None, 40, limited=True))
    labels = [json.loads(job.payload)["args"][0] for job in claimed]
    assert labels == ["high 1", "high 2", "low 1", "low 2"]
    ended = (first.id, first.token)
    assert _heirs(url, _limited_work(url, backend, "noop", ended)) == 1  # "low 3"
    rated = f"UPDATE sqljobs_jobs SET rate_max = 1, rate_window = 1 WHERE id = {low['low 3']}"
    db_execute(app, rated)  # "low 3" now carries a rate
    assert _heirs(url, _limited_work(url, backend, "noop", ended)) == 0  # not "low 4"
    backend.close()
    app.close()
