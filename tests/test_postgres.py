"""What only PostgreSQL has: schemas, the caller's psycopg transaction, LISTEN/NOTIFY,
connection pools, server errors and restarts."""

from __future__ import annotations

import re
import signal
import threading
import time
from collections.abc import Callable, Iterator
from importlib import resources
from typing import Any

import psycopg
import pytest

import sqljobs
from sqljobs import App, BackendError, JobState
from sqljobs.backends.base import Claim
from sqljobs.backends.postgres import PostgresBackend
from sqljobs.backends.postgres import pool as pg_pool
from sqljobs.backends.postgres import sql as pg_sql
from sqljobs.backends.sqlfile import load_migrations
from sqljobs.jobs import HeldJob, Outcome
from sqljobs.testing import Clock, Plan, explain

from .conftest import Runs, Spawn, db_execute, fresh_pg_database, wait_until, worker_thread
from .pg_cluster import PrivateCluster


@pytest.fixture
def url(request: pytest.FixtureRequest) -> Iterator[str]:
    """PostgreSQL only here (overrides the conftest fixture that covers both backends); a
    test that asks for ``private_pg`` gets its database on that server of its own."""
    if "private_pg" in request.fixturenames:
        cluster: PrivateCluster = request.getfixturevalue("private_pg")
        App(cluster.url()).migrate()
        yield cluster.url()
        return
    with fresh_pg_database(request.getfixturevalue("pg_template")) as url:
        yield url


def _describe(conn: psycopg.Connection, schema: str) -> dict[str, object]:
    columns = conn.execute(
        "SELECT table_name, column_name, data_type, is_nullable, column_default "
        "FROM information_schema.columns WHERE table_schema = %s AND table_name <> "
        "'sqljobs_migrations' ORDER BY 1, 2",
        (schema,),
    ).fetchall()
    indexes = conn.execute(
        "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = %s ORDER BY 1", (schema,)
    ).fetchall()
    options = conn.execute(
        "SELECT c.relname, c.reloptions FROM pg_class c JOIN pg_namespace n ON n.oid = "
        "c.relnamespace WHERE n.nspname = %s AND c.relkind = 'r' ORDER BY 1",
        (schema,),
    ).fetchall()
    checks = conn.execute(
        "SELECT conname, pg_get_constraintdef(c.oid) FROM pg_constraint c JOIN pg_namespace n "
        "ON n.oid = c.connamespace WHERE n.nspname = %s ORDER BY 1",
        (schema,),
    ).fetchall()
    functions = conn.execute(
        "SELECT p.proname, pg_get_functiondef(p.oid) FROM pg_proc p JOIN pg_namespace n "
        "ON n.oid = p.pronamespace WHERE n.nspname = %s ORDER BY 1",
        (schema,),
    ).fetchall()
    described = [
        [r for r in rows if "sqljobs_migrations" not in r[0]]
        for rows in (columns, indexes, options, checks, functions)
    ]
    text = repr(described).replace(schema, "SCHEMA")
    return {"described": re.sub(r"\s+", " ", text)}


def test_fresh_schema_equals_replayed_migrations(url: str) -> None:
    PostgresBackend(url, schema="migrated").migrate()
    schema_sql = resources.files("sqljobs.backends.postgres.sql").joinpath("schema.sql")
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA fresh")
        conn.execute(schema_sql.read_text().replace("{schema}", "fresh"))
        assert _describe(conn, "fresh") == _describe(conn, "migrated")
    versions = [v for v, _, _ in load_migrations("sqljobs.backends.postgres.sql.migrations")]
    assert versions == sorted(set(versions)) and versions[0] == 1


def test_a_schema_option_keeps_sqljobs_beside_the_users_tables(url: str) -> None:
    app = App(url, backend_options={"schema": "jobs"})
    done: list[int] = []

    @app.task
    def t(n: int) -> None:
        done.append(n)

    t.enqueue(1)
    with worker_thread(app):
        wait_until(lambda: done == [1])
    with psycopg.connect(url) as conn:
        (n,) = conn.execute("SELECT count(*) FROM jobs.sqljobs_jobs").fetchone()  # type: ignore[misc]
    assert n == 1
    with pytest.raises(sqljobs.ConfigurationError, match="identifier"):
        App(url, backend_options={"schema": "x; drop table y"}).migrate()


def test_transactional_enqueue_commits_or_rolls_back_with_the_caller(url: str) -> None:
    app = App(url)

    @app.task
    def t() -> None: ...

    with psycopg.connect(url) as conn:
        handle = t.with_options(connection=conn).enqueue()
        assert app.get_job(handle.id) is None, "invisible before the caller commits"
        conn.rollback()
    assert app.get_job(handle.id) is None
    with psycopg.connect(url) as conn:
        handle = t.with_options(connection=conn).enqueue()
        conn.commit()
    assert app.get_job(handle.id) is not None


def test_a_wrong_password_or_database_fails_clearly_at_startup(url: str) -> None:
    base = url.rsplit("/", 1)[0]
    with pytest.raises(BackendError, match=r"cannot connect to PostgreSQL .*no_such_db"):
        App(base + "/no_such_db").stats()
    with pytest.raises(BackendError, match=r"cannot connect to PostgreSQL at .*:\*\*\*@"):
        App(url.replace("postgres@", "nobody:secret@")).stats()
    missing = App(base + "/no_such_db")
    missing.task(name="t")(lambda: None)
    with pytest.raises(BackendError, match="cannot connect"):  # the server answered: no wait
        sqljobs.Worker(missing, install_signal_handlers=False).run()
    # (a server that does not answer at all is waited for: test_pg_startup.py)


def test_a_full_pool_is_a_clear_error_not_a_hang(url: str) -> None:
    app = App(url, backend_options={"pool_size": 2, "pool_timeout": 0.3})
    app.stats()
    backend = app.backend
    full = pytest.raises(BackendError, match=r"no free PostgreSQL connection within 0\.3 s")
    with backend.job_transaction(), backend.job_transaction(), full:
        app.stats()
    assert app.stats().total("pending") == 0


def test_serialization_failures_are_retried(url: str) -> None:
    backend = PostgresBackend(url)
    calls: list[int] = []

    def work(conn: psycopg.Connection) -> str:
        calls.append(1)
        if len(calls) < 3:  # a real server error of class 40001, twice
            conn.execute("DO $$ BEGIN RAISE EXCEPTION 'conflict' USING ERRCODE = '40001'; END $$")
        return "ok"

    assert backend._run(work) == "ok" and len(calls) == 3
    backend.close()


class Notifications:
    """Every NOTIFY on sqljobs' channel, as a LISTEN connection of the test receives it."""

    def __init__(self, url: str) -> None:
        self.got: list[tuple[float, str]] = []  # (time.monotonic() on arrival, payload)
        self._conn = psycopg.connect(url, autocommit=True)
        self._conn.execute("LISTEN sqljobs_public")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        while not self._stop.is_set():
            for n in self._conn.notifies(timeout=0.05):
                self.got.append((time.monotonic(), n.payload))

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._conn.close()


def test_a_burst_of_enqueues_is_debounced_and_none_waits_for_the_poll(url: str) -> None:
    """100 enqueues in a burst send one NOTIFY per queue per window and a trailing one
    after it, not 100; the trailing one announces the last job, so an idle worker whose
    poll is 60 s away runs every job at once."""
    app = App(url)
    got: list[int] = []

    @app.task
    def t(n: int) -> None:
        got.append(n)

    window = 1.0  # longer than the burst takes, so the count does not depend on speed
    producer = App(url, backend_options={"notify_window": window})
    notifications = Notifications(url)
    try:
        with worker_thread(app, poll_interval=60) as worker:
            wait_until(lambda: worker.counters["claims"] >= 1)
            for i in range(99):
                producer.enqueue("t", args=[i], known=False)
            last_started = time.monotonic()
            producer.enqueue("t", args=[99], known=False)
            wait_until(lambda: len(got) == 100, timeout=10, what="all jobs, without the poll")
            wait_until(lambda: notifications.got and notifications.got[-1][0] > last_started)
    finally:
        notifications.close()
    sent = [at for at, queue in notifications.got if queue == "default"]
    assert 2 <= len(sent) <= 10, f"100 enqueues sent {len(sent)} NOTIFYs"
    assert sent[-1] > last_started, "the last NOTIFY came after the last enqueue began"


def test_a_pipelined_enqueue_many_notifies_at_its_commit(url: str) -> None:
    """A batch big enough to go in chunks sends its NOTIFY as the last statement of its
    transaction: an idle worker with a 60 s poll starts on it at once."""
    app = App(url)
    got: list[int] = []
    app.task(name="t")(got.append)
    producer = App(url)
    producer.task(name="t")(got.append)
    with worker_thread(app, poll_interval=60) as worker:
        wait_until(lambda: worker.counters["claims"] >= 1)
        producer.tasks["t"].enqueue_many([(i,) for i in range(2500)])
        wait_until(lambda: len(got) == 2500, timeout=20, what="the batch, without the poll")
    assert sorted(got) == list(range(2500))


def test_poll_only_mode_works_without_listen(url: str) -> None:
    app = App(url, backend_options={"listen": False})
    got: list[int] = []

    @app.task
    def t(n: int) -> None:
        got.append(n)

    with worker_thread(app, poll_interval=0.1):
        App(url, backend_options={"listen": False}).enqueue("t", args=[1], known=False)
        wait_until(lambda: got == [1])


def _terminate_connections(url: str, wait: bool = False) -> int:
    """End every session on the test's database; with ``wait``, return once they are
    gone (pg_terminate_backend only signals them)."""
    database = url.rsplit("/", 1)[1]
    with psycopg.connect(url.rsplit("/", 1)[0] + "/test", autocommit=True) as admin:
        rows = admin.execute(
            "SELECT pid, pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s "
            "AND pid <> pg_backend_pid()",
            (database,),
        ).fetchall()
        pids = [pid for pid, _ in rows]
        if wait:
            alive = "SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(%s)"
            wait_until(lambda: admin.execute(alive, (pids,)).fetchone() == (0,),
                       what="the ended sessions to be gone")  # fmt: skip
    return len(rows)


def test_workers_survive_lost_connections_and_lose_nothing(
    url: str, spawn: Spawn, runs: Runs
) -> None:
    app = App(url)
    n = 60
    for i in range(n):
        app.enqueue("record", args=[f"job{i}", 0.05], known=False)
    proc = spawn("--concurrency", "4", lease=2.0)

    def ended(count: int) -> Callable[[], bool]:
        return lambda: len(runs.count("end")) >= count

    for count in (5, 20, 35):  # cut every connection of the database, three times, mid-run
        wait_until(ended(count), timeout=30, what=f"{count} jobs to end")
        # the worker may hold no connection at this instant (jobs in hand, the listener
        # waiting to reconnect after the last cut): cut the next one it opens
        wait_until(lambda: _terminate_connections(url) >= 1, timeout=10, what="a connection")
    wait_until(lambda: App(url).stats().total("done") == n, timeout=60)
    assert set(runs.count("end")) == {f"job{i}" for i in range(n)}
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=20) == 0


def test_workers_survive_a_postgresql_restart(
    url: str, private_pg: PrivateCluster, spawn: Spawn, runs: Runs
) -> None:
    """The server of this test's own restarts under a working worker (the shared server
    is never restarted: other tests use it)."""
    app = App(url)
    n = 40
    for i in range(n):
        app.enqueue("record", args=[f"job{i}", 0.05], known=False)
    app.close()
    proc = spawn("--concurrency", "4", lease=2.0)
    wait_until(lambda: len(runs.count("end")) >= 5, timeout=30)
    restarter = threading.Thread(target=private_pg.restart)
    restarter.start()
    restarter.join(timeout=90)

    def all_done() -> bool:
        try:
            return App(url).stats().total(JobState.DONE) == n
        except BackendError:
            return False

    wait_until(all_done, timeout=90, what="every job done after the restart")
    assert set(runs.count("end")) == {f"job{i}" for i in range(n)}
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=20) == 0


CLAIM_INDEXES = {"sqljobs_jobs_claim", "sqljobs_jobs_claim_any"}


def _walks_the_claim_index(plan: Plan) -> bool:
    """Whether ``plan`` reads a claim index in its order (no bitmap scan, which loses it)."""
    walks = ("Index Scan", "Index Only Scan")
    bitmap = any(n.operation.startswith("Bitmap") for n in plan.nodes)
    return not bitmap and any(n.index in CLAIM_INDEXES and n.operation in walks for n in plan.nodes)


def _stray_sorts(plan: Plan) -> list[str]:
    """Sort keys other than the picked rows' (at most ``limit``) and the levels' heads (at
    most ``limit`` a level), which are the only sorts a claim may do."""
    keys = [k for n in plan.nodes if n.operation == "Sort" for k in n.raw.get("Sort Key", [])]
    return [k for k in keys if not re.match(r"(picked|j_?\d*)\.", k)]


CLAIM_PARAMS: dict[str, object] = {
    "worker": "w", "limit": 40, "leases": "{}", "began_ids": "{}", "began_tokens": "{}",
    "start_now": 40, "results": None, "progress": None, "channel": "sqljobs_public",
}  # fmt: skip
"""What claim and complete_and_claim take besides the queues, tasks and completed ids."""


def test_claims_stay_on_the_claim_index_when_statistics_are_stale(url: str) -> None:
    """The table analysed when every job was done, then a burst: the planner believes few
    rows are pending. A claim must still walk the claim index in order and stop at its
    limit, never fetch and sort every pending row (which an index on run_at allowed)."""
    app = App(url)
    noop = app.task(name="noop")(lambda i: None)
    noop.enqueue_many([(i,) for i in range(2000)])
    backend = PostgresBackend(url)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("UPDATE sqljobs_jobs SET state = 'done', finished_at = now()")
        conn.execute("VACUUM ANALYZE sqljobs_jobs")
        noop.enqueue_many([(i,) for i in range(20000)])
        params = {**CLAIM_PARAMS, "ids": "{}", "tokens": "{}"}
        for name in ("claim", "complete_and_claim"):
            for queues in (None, ["default"]):
                sql, _ = backend.filtered(name, queues, None)
                plan = explain(conn, sql, {**params, "queues": queues or []})
                assert _walks_the_claim_index(plan) and not _stray_sorts(plan), plan
        for queues in (None, ["default"]):
            due_sql, _ = backend.filtered("next_due", queues, None)
            due = explain(conn, due_sql, {"queues": queues or []})
            assert _walks_the_claim_index(due), due
            assert not any(n.operation == "Sort" for n in due.nodes), due
    backend.close()


def test_no_plan_for_some_queues_can_read_the_index_of_every_queue(url: str) -> None:
    """A generic plan for one queue's level took sqljobs_jobs_claim_any (the same order
    for one priority, and smaller) and filtered it by queue, walking another queue's
    backlog: 4x slower drains beside 100k jobs of another queue. That index's predicate
    holds `run_at > '-infinity'`, which only the statements of every queue state. Proved
    here without costs: with the claim index gone, the one-queue statements still never
    take it."""
    App(url).migrate()
    backend = PostgresBackend(url)
    # (ids: no statement made false by an empty list, which any index fits)
    params = {**CLAIM_PARAMS, "ids": "{1}", "tokens": "{1}", "tasks": ["noop"]}
    with psycopg.connect(url) as conn:
        conn.execute("DROP INDEX sqljobs_jobs_claim")  # (rolled back below)
        for queues in (["default"], ["default", "mail"]):
            for name in ("claim", "complete_and_claim", "next_due"):
                sql, _ = backend.filtered(name, queues, ["noop"])
                plan = explain(conn, sql, {**params, "queues": queues})
                assert "sqljobs_jobs_claim_any" not in plan.indexes, (name, plan)
        conn.rollback()
    backend.close()


def test_a_host_with_a_wrong_clock_enqueues_on_the_servers_time(url: str) -> None:
    """Claims compare run_at with the server's now(): a delay counts from it too, so a host
    whose clock runs an hour fast neither holds its jobs back an hour nor pushes them ahead."""
    fast = App(url, clock=lambda: time.time() + 3600, backend_options={"server_clock": True})
    runs: list[str] = []
    fast.task(name="note")(runs.append)
    now_handle = fast.enqueue("note", args=["now"], known=False)
    later = fast.tasks["note"].with_options(delay=60).enqueue("later").job()
    with psycopg.connect(url, autocommit=True) as conn:
        (server_now,) = conn.execute("SELECT extract(epoch FROM now())::float8").fetchone()  # type: ignore[misc]
    assert later is not None and abs(later.run_at - (server_now + 60)) < 5
    worker_app = App(url)
    worker_app.task(name="note")(runs.append)
    with worker_thread(worker_app):
        wait_until(lambda: runs == ["now"], timeout=5, what="the job from the fast host")
    assert now_handle.job() is not None and now_handle.job().state is JobState.DONE  # type: ignore[union-attr]


def test_app_calls_after_the_server_dropped_its_connections_just_work(url: str) -> None:
    """An App (no worker) whose pooled connections were all ended while idle, as by a
    server restart: its next calls reconnect instead of failing once per dead connection."""
    app = App(url, backend_options={"pool_size": 4})
    app.task(name="noop")(lambda: None)
    held = [app.enqueue("noop", known=False) for _ in range(3)]
    assert _terminate_connections(url, wait=True) >= 1  # ended while idle, as by a restart
    handle = app.enqueue("noop", known=False)
    assert handle.created and app.stats().total("pending") == 4
    assert [h.job() is not None for h in held] == [True] * 3


def _claim_buffers(conn: psycopg.Connection, backend: PostgresBackend) -> tuple[int, Plan]:
    """Buffers one claim of 40 touches (it really claims them), and its plan."""
    sql, _ = backend.filtered("claim", None, None)
    plan = explain(conn, sql, {**CLAIM_PARAMS, "queues": []}, analyze=True)
    top = plan.nodes[0].raw
    return top["Shared Hit Blocks"] + top["Shared Read Blocks"], plan


_FILL = (
    "INSERT INTO sqljobs_jobs (queue, task, payload, state, run_at, finished_at, max_attempts, "
    "lease) SELECT 'default', 'noop', '{}', %s, now() - interval '1 hour', "
    "CASE WHEN %s = 'done' THEN now() END, 5, 30 FROM generate_series(1, %s)"
)


def test_a_claim_costs_the_same_with_1m_finished_and_100k_pending_rows(url: str) -> None:
    """A claim touches about as many pages among 1M finished and 100k pending rows as
    among 1,000 pending, and still after 20,000 claims left dead index entries behind."""
    App(url).migrate()
    backend = PostgresBackend(url)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(_FILL, ("pending", "pending", 1000))
        conn.execute("VACUUM ANALYZE sqljobs_jobs")
        small, _ = _claim_buffers(conn, backend)
        conn.execute("TRUNCATE sqljobs_jobs CASCADE")  # (and the workflow steps)
        conn.execute(_FILL, ("done", "done", 1_000_000))
        conn.execute(_FILL, ("pending", "pending", 100_000))
        conn.execute("VACUUM ANALYZE sqljobs_jobs")
        big, plan = _claim_buffers(conn, backend)
        # (the paused-queues table is tiny: a full scan of it is fine)
        assert "sqljobs_jobs" not in plan.full_scans() and not _stray_sorts(plan), plan
        assert big < 3 * small, (
            f"{big} buffers for a claim in the big table, {small} in a small one"
        )
        claimed = 0
        while claimed < 20_000:
            claimed += len(backend.claim_jobs(Claim("w", None, 500)))
        after, _ = _claim_buffers(conn, backend)
        assert after < 3 * small, f"{after} buffers after 20,000 claims, {small} in a small table"
    backend.close()


def test_a_worker_with_a_wrong_clock_waits_for_a_delayed_job_without_spinning(url: str) -> None:
    """next_due answers in seconds from the server's now(): a worker whose clock runs an
    hour fast sleeps until the job falls due instead of claiming every few milliseconds.
    (The host's own time.time() would be off: ``server_clock`` says so for the stand-in.)"""
    ran: list[float] = []
    fast = App(url, clock=lambda: time.time() + 3600, backend_options={"server_clock": True})
    fast.task(name="later")(lambda: ran.append(time.monotonic()))
    producer = App(url)
    producer.task(name="later")(lambda: None)
    with worker_thread(fast, poll_interval=60) as worker:
        wait_until(lambda: worker.counters["claims"] >= 1)
        sent = time.monotonic()
        producer.tasks["later"].with_options(delay=1.0).enqueue()
        before = worker.counters["claims"]
        wait_until(lambda: ran, timeout=10, what="the delayed job")
        claims = worker.counters["claims"] - before
    assert 0.9 <= ran[0] - sent < 3.0
    assert claims < 10, f"{claims} claims while waiting 1 s for one delayed job"


def test_two_lanes_claims_never_deadlock_on_a_row_the_skip_locked_scan_touched(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A claim's ``FOR UPDATE SKIP LOCKED`` scan, whose snapshot still saw a row pending
    that another claim has since taken, locks that row's newest version and keeps the lock
    (it is then filtered out, not unlocked). If its statement went on to wait for a row
    (its ``began`` marks, sent last), a second lane completing both rows waited on it in
    turn: a deadlock, found after ``deadlock_timeout`` (1 s) and retried, every job start
    stopped meanwhile (issue 28, point 6). Here each step is held by a row lock of the
    test's own, so the interleaving is certain; deadlocks are not retried, so one shows."""
    monkeypatch.setattr(pg_pool, "_RETRYABLE", (psycopg.errors.SerializationFailure,))
    app = App(url)
    noop = app.task(name="noop")(lambda i: None)
    noop.enqueue_many([(i,) for i in range(3)])
    lane_a, lane_b = PostgresBackend(url), PostgresBackend(url)
    x, p, q = sorted(lane_a.claim_jobs(Claim("w", None, 3)), key=lambda job: job.id)
    (r_id,) = [h.id for h in noop.enqueue_many([(3,)])]

    def held_by(holder: int) -> list[int]:
        return [pid for (pid,) in admin.execute(
            "SELECT pid FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))", (holder,)
        ).fetchall()]  # fmt: skip

    errors: list[BaseException] = []

    def run(work: Callable[[], object]) -> threading.Thread:
        def target() -> None:
            try:
                work()
            except BaseException as exc:  # asserted below
                errors.append(exc)

        thread = threading.Thread(target=target)
        thread.start()
        return thread

    def done(job: Any) -> Outcome:
        return Outcome(job.id, job.token, JobState.DONE)

    with (
        psycopg.connect(url, autocommit=True) as admin,
        psycopg.connect(url) as hold_x,
        psycopg.connect(url) as hold_p,
    ):
        lock = "SELECT id FROM sqljobs_jobs WHERE id = %s FOR UPDATE"
        hold_x.execute(lock, (x.id,))
        hold_p.execute(lock, (p.id,))
        # lane B: completes x (held: its snapshot, taken now, sees r pending), marks p and
        # q begun (p held), and claims
        held = [HeldJob(p.id, p.token), HeldJob(q.id, q.token)]
        lane_b_trip = run(
            lambda: lane_b.finish_and_claim([done(x)], Claim("w", None, 1, started=held))
        )
        (b_pid,) = wait_until(lambda: held_by(hold_x.info.backend_pid), what="lane B on x")
        (r,) = lane_a.claim_jobs(Claim("w", None, 1))  # another claim takes r
        assert r.id == r_id
        hold_x.commit()
        wait_until(lambda: held_by(hold_p.info.backend_pid) == [b_pid], what="lane B on p")
        # lane A: q and r ended; a statement that finds r locked by lane B waits for it
        lane_a_trip = run(lambda: lane_a.finish_and_claim([done(q), done(r)], Claim("w", None, 1)))
        wait_until(lambda: not lane_a_trip.is_alive() or held_by(b_pid), what="lane A")
        hold_p.commit()
        lane_a_trip.join(timeout=30)
        lane_b_trip.join(timeout=30)
    assert not errors, errors
    states = dict(db_execute(app, "SELECT id, state FROM sqljobs_jobs"))
    assert states == {x.id: "done", p.id: "running", q.id: "done", r.id: "done"}
    lane_a.close()
    lane_b.close()
    app.close()


def test_only_an_app_on_a_clock_of_its_own_reads_it_in_the_statements(url: str) -> None:
    """Production (time.time) runs the .sql files' statements as written, on the server's
    now(); a test clock's backend reads ``%(now)s`` wherever they read the server's clock,
    whoever runs them: a statement whose caller passes no ``now`` gets the clock's."""
    served = PostgresBackend(url)
    assert served.server_clock and served.sql == pg_sql.statements("public")
    clock = Clock(1_000_000_000)
    backend = PostgresBackend(url, clock=clock)
    assert not backend.server_clock
    for name, sql in backend.sql.items():
        code = "\n".join(line.partition("--")[0] for line in sql.splitlines())
        if name not in pg_pool.SERVER_CLOCK_ONLY:
            assert not pg_pool.SERVER_CLOCK.search(code), name
    with backend._connection() as conn:  # a statement of its own, passed no now
        row = conn.execute(pg_pool.on_client_clock("SELECT extract(epoch FROM now())"))
        assert float(row.fetchone()[0]) == 1_000_000_000  # type: ignore[index]
    served.close()
    backend.close()


def test_a_workflow_checkpoint_makes_its_own_commit_durable(url: str) -> None:
    """Workers commit with synchronous_commit off; a checkpoint must survive a server
    crash (a finished step never runs again), so its one statement sets it on for the
    commit that ends it: one round trip, where BEGIN/SET LOCAL/COMMIT took four."""
    from sqljobs.backends.base import Checkpoint
    from sqljobs.jobs import WorkflowStep

    app = App(url)
    backend = app.backend
    backend.enqueue_jobs(
        [sqljobs.jobs.NewJob("wf", "[[], {}]", "default", 0, time.time(), 30.0, 3)]
    )
    (job,) = backend.claim_jobs(Claim("w", None, 1))
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SET synchronous_commit = off")
        with conn.transaction():
            step = WorkflowStep(0, "s", "step", "done", "1")
            assert backend.save_step(Checkpoint(HeldJob(job.id, job.token), step), conn)
            assert conn.execute("SHOW synchronous_commit").fetchone() == ("on",)
        assert conn.execute("SHOW synchronous_commit").fetchone() == ("off",), "for it alone"
