"""``ctx.set_result()``: a result that commits with the job's ``ctx.transaction()``, so the
waiters and dependants that commit wakes see it; and what a returned value does then."""

from __future__ import annotations

import asyncio
import datetime
import logging
import threading
from typing import Any

import pytest

import sqljobs
from sqljobs import App, JobState, Retry
from sqljobs.testing import stepped_worker

from .conftest import db_execute, placeholder


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


def _held_parent(
    app: App, flavour: str, committed: threading.Event, release: threading.Event, use_set: bool
) -> sqljobs.Task:
    """A task that writes an effect in its transaction, gives its receipt to
    ``ctx.set_result()`` inside the block (or, without ``use_set``, returns it), and after
    the commit waits for ``release``: between its commit and its return."""
    mark = placeholder(app)

    def receipt(ctx: sqljobs.JobContext) -> dict[str, Any]:
        return {"receipt": ctx.job_id}

    @app.task(name="pay")
    def pay(ctx: sqljobs.JobContext) -> dict[str, Any] | None:
        with ctx.transaction() as tx:
            tx.execute(f"INSERT INTO effects VALUES ({mark})", (ctx.job_id,))
            if use_set:
                ctx.set_result(receipt(ctx))
        committed.set()
        assert release.wait(10)
        return None if use_set else receipt(ctx)

    @app.task(name="pay_async")
    async def pay_async(ctx: sqljobs.JobContext) -> dict[str, Any] | None:
        async with ctx.transaction_async() as tx:
            await tx.execute(f"INSERT INTO effects VALUES ({mark})", (ctx.job_id,))
            if use_set:
                ctx.set_result(receipt(ctx))
        committed.set()
        assert await asyncio.to_thread(release.wait, 10)
        return None if use_set else receipt(ctx)

    return pay if flavour == "sync" else pay_async


@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_a_result_set_in_the_transaction_commits_with_it_for_waiters_and_callbacks(
    app: App, flavour: str
) -> None:
    """The parent is held between its commit and its return: its ``result()`` and its
    group's callback already have the value, which came with the commit."""
    db_execute(app, "CREATE TABLE effects (job_id INTEGER)")
    committed, release = threading.Event(), threading.Event()
    parent = _held_parent(app, flavour, committed, release, use_set=True)

    @app.task
    def merge(results: list[Any]) -> list[Any]:
        return results

    group = app.group([parent.s()], then=merge.s())
    (member,) = group.members
    try:
        with stepped_worker(app, concurrency=2) as worker:
            worker.until(committed.is_set, what="committed")
            assert worker.result(member) == {"receipt": member.id}
            assert worker.result(group) == [{"receipt": member.id}]
            release.set()
    finally:
        release.set()
    job = _job(app, member.id)
    assert job.state is JobState.DONE and job.history == [] and _effects(app) == 1


@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_a_value_returned_after_the_transaction_comes_after_its_commit(
    app: App, flavour: str
) -> None:
    """Without ``ctx.set_result()`` the value is written when the handler returns, a
    moment after the commit that ended the job: what the commit woke reads None (the
    documented gap that ``set_result`` closes), and the value is there once it returns."""
    db_execute(app, "CREATE TABLE effects (job_id INTEGER)")
    committed, release = threading.Event(), threading.Event()
    parent = _held_parent(app, flavour, committed, release, use_set=False)

    @app.task
    def merge(results: list[Any]) -> list[Any]:
        return results

    group = app.group([parent.s()], then=merge.s())
    (member,) = group.members
    try:
        with stepped_worker(app, concurrency=2) as worker:
            worker.until(committed.is_set, what="committed")
            assert worker.result(member) is None
            assert worker.result(group) == [None]
            release.set()
            worker.until_event("finished", member.id, state="done")
    finally:
        release.set()
    assert member.result(timeout=10) == {"receipt": member.id}


@pytest.mark.parametrize("flavour", ["sync", "async"])
@pytest.mark.parametrize("where", ["before", "inside"])
def test_a_value_set_result_cannot_store_is_refused_before_anything_commits(
    app: App, flavour: str, where: str
) -> None:
    """The value is encoded at once, as a returned one would be: the call raises, the
    block rolls back (its write included) and the attempt fails like any other."""
    db_execute(app, "CREATE TABLE effects (job_id INTEGER)")
    mark = placeholder(app)
    stamp = datetime.datetime(2026, 12, 5, tzinfo=datetime.UTC)
    raised: list[BaseException] = []

    @app.task(name="pay", retry=Retry(max_attempts=1))
    def pay(ctx: sqljobs.JobContext) -> None:
        try:
            if where == "before":
                ctx.set_result(stamp)
            with ctx.transaction() as tx:
                tx.execute(f"INSERT INTO effects VALUES ({mark})", (ctx.job_id,))
                ctx.set_result(stamp)
        except Exception as exc:
            raised.append(exc)
            raise

    @app.task(name="pay_async", retry=Retry(max_attempts=1))
    async def pay_async(ctx: sqljobs.JobContext) -> None:
        try:
            if where == "before":
                ctx.set_result(stamp)
            async with ctx.transaction_async() as tx:
                await tx.execute(f"INSERT INTO effects VALUES ({mark})", (ctx.job_id,))
                ctx.set_result(stamp)
        except Exception as exc:
            raised.append(exc)
            raise

    job_id = (pay if flavour == "sync" else pay_async).enqueue().id
    _run_one(app, job_id, "dead")
    (exc,) = raised
    assert isinstance(exc, sqljobs.PayloadError) and "not JSON-serialisable" in str(exc)
    job = _job(app, job_id)
    assert _effects(app) == 0 and job.result is None
    assert "datetime" in (job.last_error or "")
    assert [h["outcome"] for h in job.history] == ["failed"]


def test_a_result_model_and_max_payload_judge_set_result_as_a_returned_value(
    url: str,
) -> None:
    app = App(url, max_payload=1000)
    try:
        seen: list[BaseException] = []

        @app.task(retry=Retry(max_attempts=1))
        def big(ctx: sqljobs.JobContext) -> None:
            try:
                ctx.set_result("x" * 2000)
            except sqljobs.PayloadError as exc:
                seen.append(exc)
            ctx.set_result("small")

        job_id = big.enqueue().id
        _run_one(app, job_id, "done")
        assert len(seen) == 1 and "over the limit of 1,000 bytes" in str(seen[0])
        assert _job(app, job_id).result == "small"
    finally:
        app.close()


def test_set_result_without_a_transaction_is_the_jobs_result(app: App) -> None:
    @app.task
    def report(ctx: sqljobs.JobContext) -> None:
        ctx.set_result({"rows": 3})

    handle = report.enqueue()
    _run_one(app, handle.id, "done")
    assert handle.result(timeout=10) == {"rows": 3} and _job(app, handle.id).history == []


def test_set_result_refuses_a_task_that_stores_no_result_and_a_committed_job(
    app: App,
) -> None:
    """Both are mistakes the handler learns of where it made them."""
    raised: list[BaseException] = []

    @app.task(store_result=False, retry=Retry(max_attempts=1))
    def quiet(ctx: sqljobs.JobContext) -> None:
        try:
            ctx.set_result(1)
        except sqljobs.ConfigurationError as exc:
            raised.append(exc)

    @app.task
    def late(ctx: sqljobs.JobContext) -> None:
        with ctx.transaction():
            pass
        ctx.set_result("too late")

    quiet_id, late_id = quiet.enqueue().id, late.enqueue().id
    with stepped_worker(app) as worker:
        worker.until_event("finished", quiet_id, state="done")
        worker.until_event("finished", late_id, state="done")
    (exc,) = raised
    assert "store_result=False" in str(exc)
    job = _job(app, late_id)
    assert job.result is None
    (entry,) = job.history
    assert entry["outcome"] == "raised_after_commit"
    assert "before the transaction's block ends" in entry["error"]


@pytest.mark.parametrize("transaction", [True, False])
@pytest.mark.parametrize("returned", ["same", "none", "other"])
def test_a_value_returned_beside_set_result_must_be_the_same_or_none(
    app: App, caplog: pytest.LogCaptureFixture, transaction: bool, returned: str
) -> None:
    """The set value is the result (in a transaction, waiters may have read it already):
    a handler that returns another is told so in the log and the job's history, and the
    set value is kept. The same value (keys in any order) or None says nothing."""
    give = {"a": 1, "b": [1, 2]}
    back = {"same": {"b": [1, 2], "a": 1}, "none": None, "other": {"a": 1, "b": [1, 3]}}

    @app.task
    def pay(ctx: sqljobs.JobContext) -> dict[str, Any] | None:
        ctx.set_result(give)
        if transaction:
            with ctx.transaction():
                pass
        return back[returned]

    job_id = pay.enqueue().id
    with caplog.at_level(logging.ERROR, logger="sqljobs.worker"):
        _run_one(app, job_id, "done")
    job = _job(app, job_id)
    assert job.state is JobState.DONE and job.result == give
    if returned != "other":
        assert job.history == [] and job.last_error is None
        return
    (entry,) = job.history
    assert entry["outcome"] == "result_mismatch"
    for text in (entry["error"], job.last_error or ""):
        assert '"b":[1,3]' in text and "the set value is kept" in text
    assert any(f"job {job_id}" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_a_stale_attempts_set_result_does_not_land(app: App, flavour: str) -> None:
    """A newer attempt ended the job with its own result while this one ran: this
    attempt's transaction, its write and its set result roll back, fenced off."""
    db_execute(app, "CREATE TABLE effects (job_id INTEGER)")
    mark = placeholder(app)
    lost: list[BaseException] = []

    def overtake(job_id: int) -> None:
        db_execute(
            app,
            "UPDATE sqljobs_jobs SET token = token + 1, state = 'done', result = ? WHERE id = ?",
            params=('"newer"', job_id),
        )

    @app.task(name="pay", retry=Retry(max_attempts=1))
    def pay(ctx: sqljobs.JobContext) -> None:
        ctx.set_result("stale")
        overtake(ctx.job_id)
        try:
            with ctx.transaction() as tx:
                tx.execute(f"INSERT INTO effects VALUES ({mark})", (ctx.job_id,))
        except sqljobs.LeaseLost as exc:
            lost.append(exc)
            raise

    @app.task(name="pay_async", retry=Retry(max_attempts=1))
    async def pay_async(ctx: sqljobs.JobContext) -> None:
        ctx.set_result("stale")
        await asyncio.to_thread(overtake, ctx.job_id)
        try:
            async with ctx.transaction_async() as tx:
                await tx.execute(f"INSERT INTO effects VALUES ({mark})", (ctx.job_id,))
        except sqljobs.LeaseLost as exc:
            lost.append(exc)
            raise

    job_id = (pay if flavour == "sync" else pay_async).enqueue().id
    with stepped_worker(app) as worker:
        worker.until_event("discarded", job_id)
    assert len(lost) == 1
    job = _job(app, job_id)
    assert job.state is JobState.DONE and job.result == "newer" and _effects(app) == 0
