"""PostgreSQL faults (issue 16): a server that stays down, statement and lock timeouts, a
connection pool held by slow handlers. A server is stopped only when it is this test's own
(``private_pg``); timeouts are set on the test's own database."""

from __future__ import annotations

import logging
import os
import re
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

import sqljobs
from sqljobs import App, BackendError, JobState

from .conftest import Runs, Spawn, fresh_pg_database, wait_until, worker_thread
from .pg_cluster import PrivateCluster

DOWN_FOR = float(os.environ.get("SQLJOBS_TEST_PG_DOWN", "20"))
"""How long the outage test keeps its server down, seconds. 20 s by default, to keep the
suite in its time budget: past the worker's backoff cap (5 s), so it shows the steady
state of a long outage (a few attempts, each 5 s apart); set 60 for a full minute."""


@pytest.fixture
def url(request: pytest.FixtureRequest) -> Iterator[str]:
    """PostgreSQL only; a test that asks for ``private_pg`` gets its database there."""
    if "private_pg" in request.fixturenames:
        cluster: PrivateCluster = request.getfixturevalue("private_pg")
        App(cluster.url()).migrate()
        yield cluster.url()
        return
    with fresh_pg_database(request.getfixturevalue("pg_template")) as url:
        yield url


def _cpu_seconds(pid: int) -> float:
    """User plus system CPU time of a process (and its waited-for children), from
    /proc/PID/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = sum(int(f) for f in fields[11:15])  # utime, stime, cutime, cstime
    return ticks / os.sysconf("SC_CLK_TCK")


def _done(url: str) -> int:
    try:
        app = App(url)
        try:
            return app.stats().total(JobState.DONE)
        finally:
            app.close()
    except BackendError:
        return -1


@pytest.mark.slow
def test_a_server_down_for_long_is_waited_for_quietly_and_work_resumes(
    url: str, private_pg: PrivateCluster, spawn: Spawn, runs: Runs, tmp_path: Path
) -> None:
    """The server stops under a working worker and stays down for ``DOWN_FOR`` seconds.
    The worker says the database is unreachable and that it retries, backs off (a few
    attempts, little CPU: no busy loop), says when it is back, and finishes every job. An
    enqueue during the outage is refused with a clear error."""
    app = App(url)
    n = 30
    for i in range(n):
        app.enqueue("record", args=[f"job{i}", 0.02], known=False)
    app.close()
    proc = spawn("--concurrency", "4", lease=5.0)
    wait_until(lambda: len(runs.count("end")) >= 5, timeout=30, what="work under way")
    log_path = tmp_path / "worker-0.log"
    private_pg.stop()
    down_at, cpu_before = time.monotonic(), _cpu_seconds(proc.pid)
    lines_before = len(log_path.read_text().splitlines())

    with pytest.raises(BackendError, match=r"PostgreSQL") as refused:
        App(url).enqueue("record", args=["during"], known=False)
    print("an enqueue during the outage:", refused.value)

    time.sleep(max(0.0, DOWN_FOR - (time.monotonic() - down_at)))  # the outage itself
    cpu = _cpu_seconds(proc.pid) - cpu_before
    during = "\n".join(log_path.read_text().splitlines()[lines_before:])
    private_pg.start()
    assert proc.poll() is None, "the worker waited for the server"
    assert cpu < 0.1 * DOWN_FOR, f"{cpu:.2f} s of CPU in a {DOWN_FOR:g} s outage: a busy loop?"
    # each pass waits up to pool_timeout (10 s) for a connection, then backs off: a few
    # lines in all, each saying what is wrong and that it retries
    retrying = re.findall(r"database unreachable \(cannot connect to PostgreSQL.*?\); retrying in",
                          during, re.DOTALL)  # fmt: skip
    assert 1 <= len(retrying) <= DOWN_FOR / 2, during[-3000:]

    wait_until(lambda: _done(url) == n, timeout=60, what="every job done after the outage")
    assert set(runs.count("end")) == {f"job{i}" for i in range(n)}
    # the handlers that returned during the outage kept their jobs: their outcomes were
    # written when the server came back, not discarded as the reaper's (no second run)
    assert max(runs.count("end").values()) == 1, runs.count("end").most_common(3)
    with psycopg.connect(url) as look:
        (expired,) = look.execute("SELECT sum(lease_expiries) FROM sqljobs_jobs").fetchone()  # type: ignore[misc]
    assert expired == 0
    after = log_path.read_text().splitlines()[lines_before:]
    assert any(re.search(r"database reachable again after \d+\.\d s", ln) for ln in after), (
        "\n".join(after[-20:])
    )
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=20) == 0


# -- statement and lock timeouts ----------------------------------------------------------


@pytest.mark.parametrize("setting", ["lock_timeout", "statement_timeout"])
def test_server_timeouts_are_clear_errors_workers_retry_and_nothing_is_lost(
    url: str, setting: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The test's own database gets a short ``lock_timeout`` or ``statement_timeout``
    (ALTER DATABASE: its new sessions only), and another session holds a lock on the jobs
    table. An enqueue is refused saying which timeout and that nothing was committed; a
    running worker's passes fail and are retried, as are those of a worker started
    meanwhile; once the lock goes, every job committed before runs."""
    database = url.rsplit("/", 1)[1]
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(f"ALTER DATABASE {database} SET {setting} = '200ms'")
    app = App(url)
    ran: list[int] = []

    @app.task
    def note(n: int) -> None:
        ran.append(n)

    due = [note.with_options(delay=0.3).enqueue(i).id for i in range(10)]
    holder = psycopg.connect(url)
    with caplog.at_level(logging.WARNING, logger="sqljobs.worker"), worker_thread(app) as worker:
        holder.execute("SET lock_timeout = 0; SET statement_timeout = 0")
        holder.execute("LOCK TABLE sqljobs_jobs IN ACCESS EXCLUSIVE MODE")
        with pytest.raises(BackendError, match=setting) as refused:
            note.enqueue(99)
        assert "Nothing of it was committed" in str(refused.value)
        assert "connection failed" not in str(refused.value)
        wait_until(
            lambda: any(setting in r.getMessage() and "retrying in" in r.getMessage()
                        for r in caplog.records),
            what="the running worker to meet the timeout",
        )  # fmt: skip
        second = sqljobs.Worker(app, concurrency=1, install_signal_handlers=False)
        starting = threading.Thread(target=second.run)
        starting.start()
        wait_until(
            lambda: sum(setting in r.getMessage() for r in caplog.records) >= 3,
            what="more failed passes",
        )
        assert starting.is_alive(), "a worker started during the lock waited for it"
        holder.rollback()  # the lock goes
        holder.close()
        wait_until(lambda: sorted(ran) == list(range(10)), what="every committed job to run")
        second.stop()
        starting.join(timeout=20)
        assert not starting.is_alive() and second.stopped.is_set()
    assert all(app.get_job(i).state is JobState.DONE for i in due)  # type: ignore[union-attr]
    assert app.stats().total(JobState.DONE) == 10, "the refused enqueue left no job"
    assert worker.counters["leases_lost"] == 0


# -- connection pools held by slow handlers ------------------------------------------------


def test_slow_handlers_holding_connections_starve_neither_heartbeats_nor_leases(
    url: str,
) -> None:
    """Every worker slot runs a handler that sits in ``ctx.transaction()`` (a connection of
    the worker's pool each) for longer than its lease, and two of them also hold
    connections of the App's own small pool. The worker's pool has room beyond its
    handlers (``concurrency + 4``), so heartbeats go on and no lease is lost; an enqueue on
    the exhausted App pool fails within its ``pool_timeout``, saying what to raise."""
    app = App(url, backend_options={"pool_size": 2, "pool_timeout": 0.5})
    release = threading.Event()
    inside = threading.Semaphore(0)

    @app.task(lease=1.0)
    def slow(ctx: sqljobs.JobContext) -> None:
        with ctx.transaction() as tx:
            tx.execute("SELECT 1")
            inside.release()
            release.wait(20)

    @app.task(lease=1.0)
    def hog(ctx: sqljobs.JobContext) -> None:
        with ctx.transaction(), app.backend.job_transaction() as own:
            own.execute("SELECT 1")
            inside.release()
            release.wait(20)

    @app.task
    def note() -> None: ...

    concurrency = 8
    ids = [slow.enqueue().id for _ in range(concurrency - 2)] + [hog.enqueue().id for _ in "ab"]
    try:
        with worker_thread(app, concurrency=concurrency) as worker:
            for _ in range(concurrency):
                assert inside.acquire(timeout=20), "every handler got its connections"
            beats = worker.counters["heartbeats"]
            began = time.monotonic()
            with pytest.raises(BackendError, match=r"no free PostgreSQL connection.*pool_size"):
                note.enqueue()
            assert time.monotonic() - began < 5, "the enqueue failed within its pool_timeout"
            # leases of 1 s, renewed every 1/3 s: wait out more than one lease
            wait_until(lambda: worker.counters["heartbeats"] >= beats + 5, what="heartbeats")
            with psycopg.connect(url) as look:  # (the App's own pool is the one held)
                states = look.execute("SELECT state, attempts FROM sqljobs_jobs").fetchall()
            assert states == [("running", 1)] * concurrency
            release.set()
            wait_until(lambda: app.stats().total(JobState.DONE) == concurrency, timeout=20)
            assert worker.counters["leases_lost"] == 0
        note.enqueue()  # the App's pool is free again
    finally:
        release.set()
    for job_id in ids:
        job = app.get_job(job_id)
        assert job is not None and job.attempts == 1 and job.lease_expiries == 0
