"""What happens around ``ctx.transaction()`` once it has committed (errors and results
after it), results that cannot be stored, and ``ctx.transaction_async()`` for async tasks."""

from __future__ import annotations

import asyncio
import datetime
import logging
import sqlite3
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

import sqljobs
from sqljobs import App, JobState, Retry
from sqljobs.backends.base import Claim
from sqljobs.jobs import Outcome
from sqljobs.testing import stepped_worker
from sqljobs.url import url_options
from sqljobs.worker import EventLog

from .conftest import db_execute, is_pg, placeholder, wait_until, worker_thread


def _job(app: App, job_id: int) -> sqljobs.Job:
    job = app.get_job(job_id)
    assert job is not None
    return job


def _effects(app: App) -> int:
    ((count,),) = db_execute(app, "SELECT count(*) FROM effects")
    return int(count)


def _run_one(app: App, job_id: int, state: str) -> None:
    with stepped_worker(app) as worker:
        worker.until_event("finished", job_id, state=state)


def _second_transaction(ctx: sqljobs.JobContext) -> None:
    with ctx.transaction():
        pass


def _raise_runtime_error(_ctx: sqljobs.JobContext) -> None:
    raise RuntimeError("after the commit")


AFTER_COMMIT: dict[str, tuple[Callable[[sqljobs.JobContext], None], str]] = {
    "raise": (_raise_runtime_error, "RuntimeError: after the commit"),
    "second transaction": (_second_transaction, "ConfigurationError: job"),
}


@pytest.mark.parametrize("flavour", ["sync", "async"])
@pytest.mark.parametrize("then", sorted(AFTER_COMMIT))
def test_what_a_handler_raises_after_its_transaction_committed_is_logged_and_recorded(
    app: App, caplog: pytest.LogCaptureFixture, flavour: str, then: str
) -> None:
    """The job stays done (its writes and completion committed together: a retry would
    repeat them), and what it raised is an ERROR line, its last error and an entry in its
    history, not nothing."""
    db_execute(app, "CREATE TABLE effects (job_id INTEGER)")
    mark = placeholder(app)
    after, error = AFTER_COMMIT[then]
    runs: list[int] = []

    def write(ctx: sqljobs.JobContext) -> None:
        runs.append(ctx.attempt)
        with ctx.transaction() as tx:
            tx.execute(f"INSERT INTO effects VALUES ({mark})", (ctx.job_id,))
        after(ctx)

    async def write_async(ctx: sqljobs.JobContext) -> None:
        runs.append(ctx.attempt)
        async with ctx.transaction_async() as tx:
            await tx.execute(f"INSERT INTO effects VALUES ({mark})", (ctx.job_id,))
        if then == "second transaction":
            async with ctx.transaction_async():
                pass
        else:
            after(ctx)

    handler = write if flavour == "sync" else write_async
    task = app.task(name="write", retry=Retry(max_attempts=3, base=0))(handler)
    job_id = task.enqueue().id
    with caplog.at_level(logging.ERROR, logger="sqljobs.worker"):
        _run_one(app, job_id, "done")
    job = _job(app, job_id)
    assert job.state is JobState.DONE and runs == [1] and _effects(app) == 1
    (entry,) = job.history
    assert entry["outcome"] == "raised_after_commit" and entry["attempt"] == 1
    assert "raised after its transaction committed" in entry["error"]
    assert error in entry["error"] and error in (job.last_error or "")
    assert job.last_traceback and error.split(":")[0] in job.last_traceback
    logged = [
        r for r in caplog.records if r.levelno == logging.ERROR and r.name.startswith("sqljobs")
    ]
    assert any(f"job {job_id}" in r.getMessage() and error in r.getMessage() for r in logged)


@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_a_value_returned_after_the_transaction_committed_is_the_jobs_result(
    app: App, flavour: str
) -> None:
    db_execute(app, "CREATE TABLE effects (job_id INTEGER)")
    mark = placeholder(app)

    @app.task
    def pay(ctx: sqljobs.JobContext, order: str) -> dict[str, Any]:
        with ctx.transaction() as tx:
            tx.execute(f"INSERT INTO effects VALUES ({mark})", (ctx.job_id,))
        return {"order": order, "receipt": ctx.job_id}

    @app.task
    async def pay_async(ctx: sqljobs.JobContext, order: str) -> dict[str, Any]:
        async with ctx.transaction_async() as tx:
            await tx.execute(f"INSERT INTO effects VALUES ({mark})", (ctx.job_id,))
        return {"order": order, "receipt": ctx.job_id}

    handle = (pay if flavour == "sync" else pay_async).enqueue("o-17")
    _run_one(app, handle.id, "done")
    assert handle.result(timeout=10) == {"order": "o-17", "receipt": handle.id}
    assert _job(app, handle.id).history == [] and _effects(app) == 1


def test_a_result_after_the_commit_is_fenced_on_the_job_still_done_under_its_token(
    app: App, caplog: pytest.LogCaptureFixture
) -> None:
    """Between the commit and the handler's return the job was sent back (an operator,
    or anything that gives it a new claim): the late result is not written over it."""
    moved = threading.Event()

    @app.task
    def pay(ctx: sqljobs.JobContext) -> str:
        with ctx.transaction():
            pass
        db_execute(
            app, "UPDATE sqljobs_jobs SET token = token + 1, state = 'dead' WHERE id = ?",
            params=(ctx.job_id,),
        )  # fmt: skip
        moved.set()
        return "late"

    job_id = pay.enqueue().id
    with caplog.at_level(logging.WARNING, logger="sqljobs.worker"):
        _run_one(app, job_id, "done")
    assert moved.is_set()
    job = _job(app, job_id)
    assert job.state is JobState.DEAD and job.result is None
    assert any("was not recorded" in r.getMessage() for r in caplog.records)


def test_amend_done_job_writes_only_a_done_job_under_its_token(app: App) -> None:
    """The statement behind both: refused for a stale token and for a job not done."""
    app.task(name="t")(lambda: None)
    job_id = app.enqueue("t").id
    backend = app._open_backend()
    (claimed,) = backend.claim_jobs(Claim("w", None, 1))
    note = {"attempt": 1, "outcome": "raised_after_commit", "error": "boom"}

    def amend(token: int, result: str) -> bool:
        return backend.amend_done_job(
            Outcome(job_id, token, JobState.DONE, result=result, error="boom", history=note)
        )

    assert not amend(claimed.token, '"running"'), "a running job is not amended"
    assert backend.finish_jobs([Outcome(job_id, claimed.token, JobState.DONE)]) == [job_id]
    assert not amend(claimed.token + 1, '"stale"'), "a stale token is refused"
    job = _job(app, job_id)
    assert job.result is None and job.history == [] and job.last_error is None
    assert amend(claimed.token, '"kept"')
    job = _job(app, job_id)
    assert job.result == "kept" and job.history == [note] and job.last_error == "boom"


@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_a_result_that_cannot_be_stored_ends_the_job_dead_without_a_rerun(
    app: App, flavour: str
) -> None:
    """The handler ran to its end: a retry would repeat its effects and fail the same
    way. The job is dead on its first run, its error naming what could not be encoded."""
    runs: list[int] = []

    @app.task(retry=Retry(max_attempts=3, base=0))
    def stamp() -> datetime.datetime:
        runs.append(1)
        return datetime.datetime(2026, 12, 5, tzinfo=datetime.UTC)

    @app.task(retry=Retry(max_attempts=3, base=0))
    async def stamp_async() -> datetime.datetime:
        runs.append(1)
        return datetime.datetime(2026, 12, 5, tzinfo=datetime.UTC)

    job_id = (stamp if flavour == "sync" else stamp_async).enqueue().id
    _run_one(app, job_id, "dead")
    job = _job(app, job_id)
    assert runs == [1] and job.attempts == 1
    assert "not retried" in (job.last_error or "") and "datetime" in (job.last_error or "")
    assert [h["outcome"] for h in job.history] == ["unstorable_result"]


@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_a_result_that_cannot_be_stored_after_the_commit_leaves_the_job_done_and_says_so(
    app: App, flavour: str
) -> None:
    db_execute(app, "CREATE TABLE effects (job_id INTEGER)")
    mark = placeholder(app)
    runs: list[int] = []

    @app.task(retry=Retry(max_attempts=3, base=0))
    def stamp(ctx: sqljobs.JobContext) -> datetime.datetime:
        runs.append(1)
        with ctx.transaction() as tx:
            tx.execute(f"INSERT INTO effects VALUES ({mark})", (ctx.job_id,))
        return datetime.datetime(2026, 12, 5, tzinfo=datetime.UTC)

    @app.task(retry=Retry(max_attempts=3, base=0))
    async def stamp_async(ctx: sqljobs.JobContext) -> datetime.datetime:
        runs.append(1)
        async with ctx.transaction_async() as tx:
            await tx.execute(f"INSERT INTO effects VALUES ({mark})", (ctx.job_id,))
        return datetime.datetime(2026, 12, 5, tzinfo=datetime.UTC)

    job_id = (stamp if flavour == "sync" else stamp_async).enqueue().id
    _run_one(app, job_id, "done")
    job = _job(app, job_id)
    assert runs == [1] and _effects(app) == 1 and job.state is JobState.DONE
    assert job.result is None
    (entry,) = job.history
    assert entry["outcome"] == "raised_after_commit"
    assert "cannot be stored" in entry["error"] and "datetime" in entry["error"]


@contextmanager
def _write_lock(app: App) -> Iterator[None]:
    """Hold what the handler's transaction must wait for: SQLite's write lock (its
    BEGIN waits), or on PostgreSQL the lock on the row it updates."""
    if is_pg(app):
        import psycopg

        with psycopg.connect(url_options(app.url)[0]) as pg:
            pg.execute("SELECT * FROM accounts WHERE id = 1 FOR UPDATE")
            yield
            pg.rollback()
        return
    conn = sqlite3.connect(app.url.removeprefix("sqlite:///"), isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        yield
        conn.execute("ROLLBACK")
    finally:
        conn.close()


def test_transaction_async_waits_off_the_event_loop(app: App) -> None:
    """While the handler's transaction waits for a lock, another async task of the same
    worker runs: nothing of the transaction blocks the loop (a ``ctx.transaction()``
    there would hold it until the lock is let go)."""
    db_execute(app, "CREATE TABLE accounts (id INTEGER PRIMARY KEY, balance INTEGER)")
    db_execute(app, "INSERT INTO accounts VALUES (1, 10000)")
    mark = placeholder(app)
    locked, entering, go, pinged = (threading.Event() for _ in range(4))

    @app.task
    async def pay(ctx: sqljobs.JobContext) -> None:
        assert await asyncio.to_thread(locked.wait, 10)
        entering.set()
        async with ctx.transaction_async() as tx:
            if await tx.run(sqljobs.idempotent, f"pay:{ctx.job_id}"):
                await tx.execute(
                    f"UPDATE accounts SET balance = balance - 100 WHERE id = {mark}", (1,)
                )

    @app.task
    async def ping() -> None:
        assert await asyncio.to_thread(go.wait, 10)
        pinged.set()  # on the loop: it ran while the transaction waited

    paid, pong = pay.enqueue().id, ping.enqueue().id
    with stepped_worker(app, concurrency=2) as worker:
        worker.until_event("started", count=2)  # both claimed before the lock is taken
        with _write_lock(app):  # the handlers go on without the coordinator's passes
            locked.set()
            assert entering.wait(10)
            go.set()
            ran_meanwhile = pinged.wait(10)
        worker.until_event("finished", paid, state="done")
        worker.until_event("finished", pong, state="done")
    assert ran_meanwhile, "the event loop was blocked while the transaction waited"
    assert db_execute(app, "SELECT balance FROM accounts") == [(9900,)]


def test_a_cancelled_transaction_async_rolls_back_on_its_thread(app: App) -> None:
    """The task is cancelled (it timed out) while a statement runs on the transaction's
    thread: the transaction is rolled back there once the statement ends. No write
    survives, and no lock is left held (the attempt's end is written, a later write goes
    through). A timeout, not ``app.cancel``: that is a write, which SQLite's lock, held by
    the transaction, would make wait."""
    db_execute(app, "CREATE TABLE effects (job_id INTEGER)")
    mark = placeholder(app)
    inside, release = threading.Event(), threading.Event()

    @app.task(timeout=2.0, retry=Retry(max_attempts=1))
    async def write(ctx: sqljobs.JobContext) -> None:
        async with ctx.transaction_async() as tx:
            await tx.execute(f"INSERT INTO effects VALUES ({mark})", (ctx.job_id,))

            def slow(_conn: Any) -> None:
                inside.set()
                release.wait(10)

            await tx.run(slow)

    job_id = write.enqueue().id
    # a worker of its own thread: on SQLite the pass that reports the timeout then waits
    # for the write lock the transaction holds, until the test releases it
    events = EventLog()
    with worker_thread(app, on_event=events):
        assert inside.wait(10)
        events.wait("timed_out", job_id)
        release.set()
        events.wait("finished", job_id, state="dead")
        wait_until(
            lambda: not any(t.name.startswith("sqljobs-tx-") for t in threading.enumerate()),
            what="the transaction's thread to end",
        )
    assert _effects(app) == 0
    db_execute(app, "INSERT INTO effects VALUES (0)")  # the write lock is free again
    assert _effects(app) == 1


def test_a_long_transaction_does_not_stall_its_workers_upkeep(app: App) -> None:
    """SQLite has one write lock, and a handler inside ``ctx.transaction()`` holds it: the
    worker's own periodic passes must not queue behind it. The reaper, due every 50 ms
    here, looks before it writes, so the handler's timeout is still noticed while the
    transaction waits (had the reaper waited for the lock, nothing would be noticed until
    it is let go)."""
    db_execute(app, "CREATE TABLE effects (job_id INTEGER)")
    mark = placeholder(app)
    inside, release = threading.Event(), threading.Event()

    @app.task(timeout=0.5, retry=Retry(max_attempts=1))
    def hold(ctx: sqljobs.JobContext) -> None:
        with ctx.transaction() as conn:
            conn.execute(f"INSERT INTO effects VALUES ({mark})", (ctx.job_id,))
            inside.set()
            release.wait(30)

    job_id = hold.enqueue().id
    events = EventLog()  # a worker of its own thread: its passes then wait for the lock
    try:
        with worker_thread(app, on_event=events, reap_interval=0.05):
            assert inside.wait(10)
            events.wait("timed_out", job_id, timeout=10)
            release.set()
    finally:
        release.set()
    assert _job(app, job_id).state is JobState.DEAD
    assert _effects(app) == 0


def test_a_blocking_transaction_on_the_event_loop_is_warned_of_once_per_task(
    app: App, caplog: pytest.LogCaptureFixture
) -> None:
    name = f"blocking_{uuid.uuid4().hex[:8]}"  # a task this process never warned of

    @app.task(name=name)
    async def blocking(ctx: sqljobs.JobContext) -> None:
        with ctx.transaction():
            pass

    ids = [blocking.enqueue().id for _ in range(2)]
    with (
        caplog.at_level(logging.WARNING, logger="sqljobs.worker"),
        stepped_worker(app) as worker,
    ):
        for job_id in ids:
            worker.until_event("finished", job_id, state="done")
    warned = [r for r in caplog.records if "transaction_async()" in r.getMessage()]
    assert len(warned) == 1 and name in warned[0].getMessage()


def test_an_error_after_the_commit_shows_in_jobs_show_and_the_dashboard(app: App) -> None:
    from .test_cli_control import sqljobs as cli
    from .test_dashboard_pages import _client

    @app.task
    def pay(ctx: sqljobs.JobContext) -> None:
        with ctx.transaction():
            pass
        raise RuntimeError("receipt printer jammed")

    job_id = pay.enqueue().id
    _run_one(app, job_id, "done")
    shown = " ".join(cli(app.url, "jobs", "show", str(job_id)).stdout.split())
    page = _client(app).get(f"/jobs/{job_id}").text
    for text in (shown, page):
        assert "raised_after_commit" in text
        assert "raised after its transaction committed" in text
        assert "receipt printer jammed" in text
