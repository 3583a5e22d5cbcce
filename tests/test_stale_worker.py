"""A stale worker commits nothing, told or not: ``ctx.transaction()``'s fenced completion
decides when no heartbeat has told the handler its lease is lost, and a write the database
refuses at COMMIT leaves the job not done (docs/guarantees.md, 3 and 4).

A handler that takes its job over after another worker's lease lapsed writes one effect
row; the stale handler, resumed after the takeover, must add none. On SQLite the stale
handler is held just before its transaction (``BEGIN IMMEDIATE`` takes the write lock at
the start, so no other worker can take the job over while one is inside); on PostgreSQL
also inside it, after its write.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest

import sqljobs
from sqljobs import App, JobContext, JobState, LeaseLost, Retry
from sqljobs.backends import WorkerInfo
from sqljobs.backends.base import Claim
from sqljobs.jobs import ClaimedJob, Outcome
from sqljobs.maintenance import Reaper
from sqljobs.testing import stepped_worker
from sqljobs.worker import EventLog

from .conftest import (
    Runs,
    Spawn,
    db_execute,
    expire_lease,
    is_pg,
    placeholder,
    wait_until,
    worker_thread,
)

EFFECTS = "CREATE TABLE effects (job INTEGER, attempt INTEGER)"


def _effects(app: App) -> list[tuple[int, int]]:
    return [tuple(row) for row in db_execute(app, "SELECT job, attempt FROM effects")]


def _holds_a_write_lock_throughout(url: str, where: str) -> None:
    if where == "inside" and not is_pg(url):
        pytest.skip(
            "SQLite: a handler inside ctx.transaction() holds the write lock (BEGIN "
            "IMMEDIATE), so no other worker can take its job over until it commits"
        )


def _take_over(app: App) -> tuple[ClaimedJob, ClaimedJob]:
    """A job claimed by ``old``, its lease lapsed and reaped, then claimed by ``new``."""

    @app.task(lease=30)
    def t() -> None: ...

    job_id = t.enqueue().id
    backend = app.backend
    backend.register_worker(WorkerInfo("old", "host", 1, None, 1, 10.0))  # alive, slow
    (old,) = backend.claim_jobs(Claim("old", None, 1))
    expire_lease(app, job_id)
    Reaper(backend).run_once()
    (new,) = backend.claim_jobs(Claim("new", None, 1))
    assert (new.id, new.token) == (old.id, old.token + 1)
    return old, new


def test_a_stale_context_whose_flag_is_clear_is_refused_at_its_fenced_commit(app: App) -> None:
    """Nothing told this context its lease is lost (``lease_lost`` is False): the fenced
    completion in its transaction finds the job another worker's, so the handler's write
    rolls back and ``LeaseLost`` is raised."""
    db_execute(app, EFFECTS)
    old, new = _take_over(app)
    ctx = JobContext(old, app.backend)
    assert not ctx.lease_lost
    mark = placeholder(app)
    with pytest.raises(LeaseLost, match=f"token {old.token}"), ctx.transaction() as tx:
        tx.execute(f"INSERT INTO effects VALUES ({mark}, {mark})", (old.id, old.attempt))
    assert _effects(app) == [], "the stale handler's write was rolled back"
    assert not ctx.completed_in_transaction
    job = app.get_job(old.id)
    assert job is not None
    assert (job.state, job.token, job.worker) == (JobState.RUNNING, new.token, "new")


@pytest.mark.parametrize("where", ["before", "inside"])
def test_a_handler_resumed_after_a_takeover_before_any_heartbeat_commits_nothing(
    url: str, where: str
) -> None:
    """Worker A's handler is held (before its transaction, or inside it after its write);
    its lease lapses and worker B takes the job over and finishes it, writing its effect;
    then A's handler resumes, with no heartbeat having told it anything (A renews no
    leases), and tries to commit: its effect must roll back, leaving exactly B's."""
    _holds_a_write_lock_throughout(url, where)
    a, b = App(url), App(url)
    db_execute(a, EFFECTS)
    mark = placeholder(a)
    held, resume, ended = threading.Event(), threading.Event(), threading.Event()
    seen: dict[str, Any] = {}

    def hold(ctx: JobContext) -> None:
        held.set()
        assert resume.wait(30)
        seen["lease_lost"] = ctx.lease_lost  # what a heartbeat could have told it by now

    def charge(ctx: JobContext) -> None:
        first = ctx.attempt == 1
        try:
            if first and where == "before":
                hold(ctx)
            with ctx.transaction() as tx:
                tx.execute(
                    f"INSERT INTO effects VALUES ({mark}, {mark})", (ctx.job_id, ctx.attempt)
                )
                if first and where == "inside":
                    hold(ctx)
        except LeaseLost as exc:
            seen["refused"] = str(exc)
            raise
        finally:
            if first:
                ended.set()

    a.task(lease=30, name="charge")(charge)
    b.task(lease=30, name="charge")(charge)
    job_id = a.enqueue("charge").id
    events_a, events_b = EventLog(), EventLog()
    # A: one slot and no buffer (it cannot take the job back itself), and no heartbeat
    # that could tell its handler the lease is lost before the handler commits
    with worker_thread(a, concurrency=1, prefetch=0, heartbeat=False, on_event=events_a):
        try:
            assert held.wait(10), "A's handler reached its hold"
            expire_lease(a, job_id)
            Reaper(b.backend).run_once()
            with worker_thread(b, concurrency=1, on_event=events_b):
                (done,) = events_b.wait("finished", job_id=job_id, state="done")
            assert done.attempt == 2
        finally:
            resume.set()
        assert ended.wait(10), "A's handler ended"
        events_a.wait("discarded", job_id=job_id)
    assert seen["lease_lost"] is False, "nothing told A's handler before its commit"
    assert "no longer held" in seen["refused"]
    assert _effects(a) == [(job_id, 2)], "exactly B's effect"
    job = a.get_job(job_id)
    assert job is not None and (job.state, job.attempts) == (JobState.DONE, 2)


@pytest.mark.parametrize("returns", [None, 7])
def test_a_late_result_returned_before_any_heartbeat_is_discarded_while_the_new_holder_runs(
    app: App, returns: int | None
) -> None:
    """A plain handler (no transaction) returns after its job was taken over, with no
    heartbeat having told its worker: the worker's completion, sent with its next claim
    (the hot path's one statement), is refused, and the new holder still holds the job.
    Returning a value takes the completion that stores a result."""
    resume, ended = threading.Event(), threading.Event()
    held = threading.Event()

    @app.task(lease=30)
    def work() -> int | None:
        held.set()
        assert resume.wait(30)
        ended.set()
        return returns

    job_id = work.enqueue().id
    events = EventLog()
    with worker_thread(app, concurrency=1, prefetch=0, heartbeat=False, on_event=events):
        try:
            assert held.wait(10), "A's handler began"
            expire_lease(app, job_id)
            other = App(app.url)._open_backend()
            other.register_worker(WorkerInfo("new", "host", 1, None, 1, 10.0))
            Reaper(other).run_once()
            (new,) = other.claim_jobs(Claim("new", None, 1))
        finally:
            resume.set()
        assert ended.wait(10)
        (late,) = events.wait("discarded", job_id=job_id)
    assert late.state == "done" and late.attempt == 1
    job = app.get_job(job_id)
    assert job is not None
    assert (job.state, job.token, job.worker) == (JobState.RUNNING, new.token, "new")
    assert job.result is None
    assert other.finish_jobs([Outcome(job_id, new.token, JobState.DONE)]) == [job_id]


def _freeze(app: App, pid: int) -> None:
    """Stop process ``pid`` (SIGSTOP) where it holds no lock of SQLite's: a thread of it
    that was writing when it stopped would keep every other worker waiting."""
    while True:
        os.kill(pid, signal.SIGSTOP)
        wait_until(lambda: _stopped(pid), 10, "the worker stopped")
        if is_pg(app) or _write_lock_free(app):
            return
        os.kill(pid, signal.SIGCONT)  # caught mid-write: let it finish and try again


def _stopped(pid: int) -> bool:
    """Whether process ``pid`` is stopped by a signal (state T in /proc)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat.rsplit(")", 1)[1].split()[0] == "T"


def _write_lock_free(app: App) -> bool:
    conn = sqlite3.connect(app.url.removeprefix("sqlite:///"), timeout=0, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("ROLLBACK")
        return True
    except sqlite3.OperationalError:
        return False
    finally:
        conn.close()


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_a_worker_process_frozen_by_sigstop_and_thawed_after_a_takeover_commits_nothing(
    app: App, spawn: Spawn, runs: Runs, tmp_path: Path
) -> None:
    """A real worker process is frozen (SIGSTOP: its heartbeat thread too) in its handler,
    inside ctx.transaction() after its write on PostgreSQL, just before it on SQLite; its
    1 s lease lapses, a second worker process reaps the job, runs it and commits its
    effect; then SIGCONT: the first worker's effect must roll back."""
    db_execute(app, "CREATE TABLE effects (label TEXT, attempt INTEGER)")
    where = "inside" if is_pg(app) else "before"
    go = tmp_path / "go"
    job_id = app.enqueue("charge", args=["pay", where, str(go)], known=False).id
    frozen = spawn("--concurrency", "1", lease=1.0, app="tests.apps.frozen:app")
    wait_until(lambda: ("pay", frozen.pid, "holding") in runs.lines(), 30, "the hold")
    _freeze(app, frozen.pid)
    try:
        go.touch()  # seen only once thawed
        rescuer = spawn("--concurrency", "1", lease=1.0, app="tests.apps.frozen:app")
        wait_until(lambda: ("pay", rescuer.pid, "committed") in runs.lines(), 30, "the takeover")
    finally:
        os.kill(frozen.pid, signal.SIGCONT)
    wait_until(lambda: ("pay", frozen.pid, "refused") in runs.lines(), 30, "the stale commit")
    assert db_execute(app, "SELECT label, attempt FROM effects") == [("pay", 2)]
    job = app.get_job(job_id)
    assert job is not None and (job.state, job.attempts) == (JobState.DONE, 2)
    assert frozen.poll() is None and rescuer.poll() is None, "both workers run on"


def test_a_write_refused_at_commit_leaves_the_job_not_done(url: str) -> None:
    """The handler's write breaks a deferred foreign key, so the database refuses it only
    at COMMIT, after the job's completion was written in the same transaction: all of it
    rolls back, and the attempt fails on the refusal (SQLite's busy timeout is short, so
    a completion sent on another connection, which would wait for this transaction's
    write lock, fails fast with a different error)."""
    app = App(url, backend_options={} if is_pg(url) else {"busy_timeout": 2.0})
    db_execute(app, "CREATE TABLE parents (id INTEGER PRIMARY KEY)")
    db_execute(
        app,
        "CREATE TABLE children (parent INTEGER REFERENCES parents (id) "
        "DEFERRABLE INITIALLY DEFERRED)",
    )
    mark = placeholder(app)

    @app.task(lease=30, retry=Retry(max_attempts=1))
    def orphan(ctx: sqljobs.JobContext) -> None:
        with ctx.transaction() as tx:
            tx.execute(f"INSERT INTO children VALUES ({mark})", (42,))  # no parent 42

    job_id = orphan.enqueue().id
    with stepped_worker(app) as worker:
        worker.until_event("finished", job_id=job_id)
    job = app.get_job(job_id)
    assert job is not None
    assert job.state is JobState.DEAD, "the refused commit took the completion with it"
    assert job.last_error is not None and "foreign key" in job.last_error.lower()
    assert db_execute(app, "SELECT count(*) FROM children") == [(0,)]
