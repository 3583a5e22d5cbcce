"""Backlog health and retention."""

from __future__ import annotations

import re
import sqlite3
import time

import pytest

import sqljobs
from sqljobs import App, JobState
from sqljobs.backends.base import Claim
from sqljobs.backends.shared import SharedBackend
from sqljobs.maintenance import Pruner
from sqljobs.stats import COUNT_CAP
from sqljobs.testing import explain

from .conftest import db_execute, is_pg


def test_stats_count_by_queue_and_state_and_age_the_oldest_due_job(app: App) -> None:
    @app.task
    def t() -> None: ...

    now = time.time()
    t.with_options(run_at=now - 42).enqueue()  # due for 42 s
    t.with_options(run_at=now - 12, queue="mail").enqueue()
    t.with_options(delay=3600).enqueue()  # not due: does not age the backlog
    st = app.stats()
    assert st.counts["default"]["pending"] == 2 and st.counts["mail"]["pending"] == 1
    assert st.oldest_pending_age == pytest.approx(42, abs=2)
    assert st.oldest_pending_age_by_queue["mail"] == pytest.approx(12, abs=2)
    assert st.to_dict()["counts"]["mail"]["pending"] == 1
    assert App(app.url).stats().total(JobState.RUNNING) == 0


def test_empty_queue_has_no_oldest_age(app: App) -> None:
    assert app.stats().oldest_pending_age is None


def test_a_registered_tasks_queue_is_counted_with_zeros_while_it_has_no_jobs(url: str) -> None:
    """SPEC's ``st.counts["default"]["pending"]`` on a fresh database, and on one whose
    last job the pruner took, as ``queues()`` lists them; other queues keep their counts."""
    now = [1_000_000.0]
    app = App(url, clock=lambda: now[0], retention=60)

    @app.task
    def t() -> None: ...

    @app.task(queue="mail")
    def m() -> None: ...

    zeros = {s.value: 0 for s in JobState}
    fresh = app.stats()
    assert fresh.counts == {"default": zeros, "mail": zeros}
    assert fresh.counts["default"]["pending"] == 0
    assert fresh.to_dict()["counts"]["mail"] == zeros
    assert [q.name for q in app.queues()] == ["default", "mail"]
    app.enqueue("elsewhere", known=False, queue="other")
    db_execute(
        app,
        "UPDATE sqljobs_jobs SET state = 'done', finished_at = ?",
        "UPDATE sqljobs_jobs SET state = 'done', finished_at = to_timestamp(?)",
        (now[0],),
    )
    assert app.stats().counts["other"]["done"] == 1
    now[0] += 61
    assert Pruner(app.backend, app.retention).run_once() == 1
    assert app.stats().counts == {"default": zeros, "mail": zeros}
    app.close()


def test_pruner_deletes_old_done_jobs_in_batches_and_keeps_dead_ones(url: str) -> None:
    now = [1_000_000.0]
    app = App(url, clock=lambda: now[0], retention=3600)
    ids = [app.enqueue("t", known=False).id for _ in range(25)]
    backend = app.backend
    for state, cmp in (("done", "<="), ("dead", ">")):
        db_execute(
            app,
            f"UPDATE sqljobs_jobs SET state = '{state}', finished_at = ? WHERE id {cmp} ?",
            f"UPDATE sqljobs_jobs SET state = '{state}', finished_at = to_timestamp(?) "
            f"WHERE id {cmp} ?",
            (now[0], ids[19]),
        )
    pruner = Pruner(backend, app.retention, batch=7)
    assert pruner.run_once() == 0
    now[0] += 3601
    assert pruner.run_once() == 20
    assert app.stats().total("dead") == 5 and app.stats().total("done") == 0


# -- what stats costs with a million finished jobs kept --------------------------------------

STATS_STATEMENTS = (
    "count_by_queue_state",
    "pending_by_queue",
    "pending_by_task",
    "pending_by_task_in_queue",
)
WORKING_SET_INDEXES = {
    "sqljobs_jobs_claim",
    "sqljobs_jobs_claim_any",
    "sqljobs_jobs_suspects",
    "sqljobs_jobs_due",
    "sqljobs_jobs_lease",
    "sqljobs_jobs_limited",  # pending jobs under a concurrency limit
    "sqljobs_jobs_limited_due",
    "sqljobs_jobs_limit_running",
}
"""Partial indexes of pending and running jobs: reading one whole costs the working set."""


def _fill(app: App, queue: str, state: str, n: int) -> None:
    """Insert ``n`` jobs of ``queue`` in ``state`` with one statement (tens of thousands of
    rows: the enqueue API would take most of the test's time)."""
    app.migrate()  # the App creates its tables on first use; this SQL comes before that
    db_execute(
        app,
        "INSERT INTO sqljobs_jobs (queue, task, payload, state, run_at, created_at, "
        "finished_at, max_attempts, lease) SELECT ?, 'filler', '[]', ?, 0, 0, "
        "CASE WHEN ? IN ('pending', 'running') THEN NULL ELSE 0 END, 1, 30 FROM ("
        "WITH RECURSIVE n (i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?) "
        "SELECT i FROM n)",
        "INSERT INTO sqljobs_jobs (queue, task, payload, state, run_at, finished_at, "
        "max_attempts, lease) SELECT ?, 'filler', '[]', ?, now(), "
        "CASE WHEN ? IN ('pending', 'running') THEN NULL ELSE now() END, 1, 30 "
        "FROM generate_series(1, ?)",
        (queue, state, state, n),
    )


def test_counts_are_exact_below_the_cap_and_say_where_they_stopped(app: App) -> None:
    """Done and cancelled jobs are counted up to the cap per queue, and a count that
    stopped there says so; dead, pending and running jobs are always counted exactly."""
    _fill(app, "big", "done", COUNT_CAP + 5)
    _fill(app, "big", "cancelled", COUNT_CAP)  # at the cap, not over it: exact
    _fill(app, "big", "dead", COUNT_CAP + 3)
    for state, n in (("done", 3), ("cancelled", 2), ("dead", 1), ("pending", 4)):
        _fill(app, "small", state, n)
    st = app.stats()
    assert st.counts["big"] == {
        "pending": 0, "waiting": 0, "running": 0, "done": COUNT_CAP, "dead": COUNT_CAP + 3,
        "cancelled": COUNT_CAP,
    }  # fmt: skip
    assert st.counts["small"] == {
        "pending": 4, "waiting": 0, "running": 0, "done": 3, "dead": 1, "cancelled": 2,
    }  # fmt: skip
    assert st.capped == {"big": ["done"]} and st.count_cap == COUNT_CAP
    assert st.is_capped("done", "big") and not st.is_capped("cancelled", "big")
    assert not st.is_capped(JobState.DONE, "small") and not st.is_capped("dead")
    assert st.count_text("done", "big") == f"{COUNT_CAP}+"
    assert st.count_text("done", "small") == "3"
    assert st.total("done") == COUNT_CAP + 3 and st.is_capped("done")
    assert st.count_text(JobState.DONE) == f"{COUNT_CAP + 3}+"
    assert st.to_dict()["capped"] == {"big": ["done"]}
    assert st.to_dict()["count_cap"] == COUNT_CAP


def test_counts_ages_and_unserved_tasks_match_a_count_of_the_whole_table(app: App) -> None:
    """Read through partial indexes, the figures are still those of the table: pending jobs
    of crashed workers (suspects) and a job made dead without an end time included."""
    app.enqueue("a", known=False, queue="default", run_at=time.time() - 30)
    ids = [app.enqueue("b", known=False, queue="mail").id for _ in range(3)]
    app.enqueue("c", known=False, queue="mail", delay=3600)
    assert len(app.backend.claim_jobs(Claim("w", ["default"], 1))) == 1
    db_execute(  # a suspect, and the mail queue's oldest due job
        app,
        "UPDATE sqljobs_jobs SET crashes = 2, run_at = run_at - 120 WHERE id = ?",
        "UPDATE sqljobs_jobs SET crashes = 2, run_at = run_at - interval '120 s' WHERE id = ?",
        (ids[0],),
    )
    db_execute(app, "UPDATE sqljobs_jobs SET state = 'dead' WHERE id = ?", params=(ids[1],))
    app.enqueue("a", known=False, queue="default", run_at=time.time() - 60)
    _fill(app, "default", "done", 5)
    _fill(app, "mail", "cancelled", 2)
    _fill(app, "other", "dead", 3)

    st = app.stats()
    whole = db_execute(app, "SELECT queue, state, count(*) FROM sqljobs_jobs GROUP BY 1, 2")
    assert {(q, s): n for q, by_state in st.counts.items() for s, n in by_state.items() if n} == {
        (q, s): n for q, s, n in whole
    }
    assert st.capped == {}
    pending = db_execute(
        app, "SELECT task, count(*) FROM sqljobs_jobs WHERE state = 'pending' GROUP BY task"
    )
    assert st.unserved == dict(pending) and st.unserved["b"] == 2  # the suspect counts
    assert st.oldest_pending_age_by_queue["default"] == pytest.approx(60, abs=5)
    assert st.oldest_pending_age_by_queue["mail"] == pytest.approx(120, abs=5)
    assert set(st.oldest_pending_age_by_queue) == {"default", "mail"}


@pytest.mark.parametrize("name", STATS_STATEMENTS)
def test_stats_read_no_whole_table_or_index_of_finished_jobs(app: App, name: str) -> None:
    """Each stats statement reads pending and running jobs through their partial indexes,
    and finished ones only by seeks into sqljobs_jobs_ended: never the jobs table whole,
    which keeps every finished job until the pruner takes it."""
    for state, n in (("done", 3000), ("dead", 50), ("cancelled", 100), ("pending", 100)):
        _fill(app, "default", state, n)
        _fill(app, "mail", state, n // 2)
    if is_pg(app):
        db_execute(app, "VACUUM ANALYZE sqljobs_jobs")  # the plans of a table in service
    core = _core(app)
    sql = core.sql[name]
    reads = _pg_reads(core, sql) if is_pg(app) else _sqlite_reads(core, sql)
    assert len(reads) == len(re.findall(r"FROM (?:\w+\.)?sqljobs_jobs\b", sql)), reads
    for how, index, condition in reads:
        seek = index == "sqljobs_jobs_ended" and condition.startswith("state")
        assert index in WORKING_SET_INDEXES or seek, f"{name}: {how} {index} {condition}"


def _core(app: App) -> SharedBackend:
    """The app's backend, as the shared core that holds the statements."""
    assert isinstance(app.backend, SharedBackend)
    return app.backend


def _params(core: SharedBackend) -> dict[str, object]:
    return {"now": core.now(), "cap": COUNT_CAP, "queue": "default"}


def _sqlite_reads(core: SharedBackend, sql: str) -> list[tuple[str, str, str]]:
    """(SCAN or SEARCH, index or "", condition) for each read of sqljobs_jobs in the plan."""
    plan = explain(core, sql, _params(core))
    return [(n.operation, n.index or "", n.condition) for n in plan.reads("sqljobs_jobs")]


def _pg_reads(core: SharedBackend, sql: str) -> list[tuple[str, str, str]]:
    """(node type, index or "", index condition) for each read of sqljobs_jobs in the plan,
    on one of the backend's own connections (its session settings shape plans). ANALYZE:
    without it, PostgreSQL 15 leaves out the subplan of a recursive query's step."""
    plan = explain(core, sql, _params(core), analyze=True)
    found = []
    for node in plan.nodes:
        index = node.index or ""
        on_jobs = node.table == "sqljobs_jobs" or index.startswith("sqljobs_jobs")
        if on_jobs and node.operation != "Bitmap Heap Scan":  # its Bitmap Index Scan counts
            found.append((node.operation, index, node.condition.lstrip("(")))
    return found


def test_the_cost_of_stats_does_not_grow_with_finished_jobs(app: App) -> None:
    """Five times as many done jobs (all over the cap) cost stats about the same work:
    SQLite's virtual machine steps, PostgreSQL's buffers touched."""
    _fill(app, "default", "pending", 200)
    _fill(app, "default", "dead", 50)
    _fill(app, "default", "done", COUNT_CAP + 2000)
    small = _stats_work(app)
    _fill(app, "default", "done", 4 * (COUNT_CAP + 2000))
    big = _stats_work(app)
    assert big < 1.5 * small, f"stats did {big} units of work with 5x the done jobs, {small} before"


def _stats_work(app: App) -> int:
    """What the stats statements cost, in a unit of the engine's that noise cannot move."""
    core = _core(app)
    params = _params(core)
    if is_pg(app):
        db_execute(app, "VACUUM ANALYZE sqljobs_jobs")  # else visibility checks dominate

        total = 0
        for name in STATS_STATEMENTS:
            top = explain(core, core.sql[name], params, analyze=True).nodes[0].raw
            total += int(top["Shared Hit Blocks"]) + int(top["Shared Read Blocks"])
        return total
    steps = [0]

    def step() -> int:
        steps[0] += 1
        return 0  # go on

    def run(conn: sqlite3.Connection) -> None:
        conn.set_progress_handler(step, 100)  # called every 100 virtual machine steps
        try:
            for name in STATS_STATEMENTS:
                conn.execute(core.sql[name], params).fetchall()
        finally:
            conn.set_progress_handler(None, 0)

    core.read(run)
    return steps[0]


def test_capped_counts_read_as_lower_bounds_wherever_they_are_shown() -> None:
    """The CLI's stats and queues tables and the dashboard say "10000+", not 10000."""
    from sqljobs.cli.format import queues_columns, stats_columns
    from sqljobs.dashboard.render import count
    from sqljobs.jobs import QueueInfo
    from sqljobs.stats import COUNT_CAP, Stats

    counts = {"big": {"pending": 3, "done": COUNT_CAP, "dead": COUNT_CAP}}
    st = Stats(counts, None, capped={"big": ["done"]})
    by_name = {c.header: c.cells for c in stats_columns(st)}
    assert by_name["done"] == [f"{COUNT_CAP}+"] and by_name["dead"] == [str(COUNT_CAP)]
    queue = QueueInfo("big", False, counts["big"], None)
    by_name = {c.header: c.cells for c in queues_columns([queue], {}, 0.0)}
    assert by_name["done"] == [f"{COUNT_CAP}+"] and by_name["pending"] == ["3"]
    assert count(COUNT_CAP, "done").endswith("+</span>") and count(5, "dead") == "5"


def test_the_pruner_keeps_up_with_more_expired_markers_than_one_run_deletes(url: str) -> None:
    """A soak found it: each run deleted one batch of idempotency markers, so a steady
    stream of more markers than that grew the table for ever. A run now takes several
    batches, and says when it left some, so its worker runs it again soon."""
    now = [1_000_000.0]
    app = App(url, clock=lambda: now[0])
    with app.backend.job_transaction() as tx:
        for i in range(25):
            assert sqljobs.idempotent(tx, f"marker-{i}", ttl=1)
    now[0] += 10
    pruner = Pruner(app.backend, app.retention, batch=4)
    left = []
    for _ in range(3):
        pruner.run_once(max_batches=3)  # 12 markers a run at most
        (count,) = db_execute(app, "SELECT count(*) FROM sqljobs_idempotency")[0]
        left.append((count, pruner.behind))
    assert left == [(13, True), (1, True), (0, False)]
