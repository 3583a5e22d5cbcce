"""The App for asyncio callers: awaitable enqueues, stats and results that never block the
event loop (no database call is made on the loop's thread, and asyncio's debug mode
reports any callback over a second), an enqueue in the caller's psycopg AsyncConnection
transaction, and a worker inside a running loop that stops cleanly when its task is
cancelled, on both backends."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import pytest

import sqljobs.enqueue
from sqljobs import App, ConfigurationError, JobState
from sqljobs.backends.postgres.pool import PostgresPool
from sqljobs.backends.sqlite.connections import SqliteConnections

from .conftest import is_pg

T = TypeVar("T")
SLOW = 1.0
"""Seconds: a callback this long on the loop is a blocked loop. Wall time, so not less:
on a loaded machine a step of a few microseconds may wait a quarter of a second for a
core. Database calls are caught exactly instead (see ``database_off``)."""


@contextmanager
def database_off(thread: int) -> Iterator[list[str]]:
    """Record every use of a backend's connection from ``thread`` (the loop's): the
    choke points of each backend, which every statement passes through."""
    seen: list[str] = []
    points = [(SqliteConnections, "_conn"), (PostgresPool, "_connection")]
    originals = [(owner, name, owner.__dict__[name]) for owner, name in points]

    def watch(name: str, original: Callable[..., Any]) -> Callable[..., Any]:
        def watched(*args: Any, **kwargs: Any) -> Any:
            if threading.get_ident() == thread:
                seen.append(name)
            return original(*args, **kwargs)

        return watched

    for owner, name, original in originals:
        setattr(owner, name, watch(f"{owner.__name__}.{name}", original))
    try:
        yield seen
    finally:
        for owner, name, original in originals:
            setattr(owner, name, original)


def run_watched(main: Callable[[], Awaitable[T]], caplog: pytest.LogCaptureFixture) -> T:
    """Run ``main`` in debug mode; fail if the loop's thread touched a database, or if
    any callback held the loop over SLOW."""

    async def watched() -> T:
        asyncio.get_running_loop().slow_callback_duration = SLOW
        with database_off(threading.get_ident()) as seen:
            value = await main()
        assert not seen, f"the event loop's thread used the database: {seen}"
        return value

    with caplog.at_level(logging.WARNING, logger="asyncio"):
        value = asyncio.run(watched(), debug=True)
    slow = [
        r.getMessage() for r in caplog.records if r.name == "asyncio" and "took" in r.getMessage()
    ]
    assert not slow, f"the event loop was blocked: {slow}"
    return value


def test_awaitable_enqueues_results_and_reads_never_block_the_loop(
    app: App, caplog: pytest.LogCaptureFixture
) -> None:
    @app.task(queue="math")
    def add(a: int, b: int) -> int:
        return a + b

    async def main() -> tuple[Any, ...]:
        worker = asyncio.create_task(app.run_worker_async(concurrency=2))
        first = await add.enqueue_async(1, 2)
        keyed = await add.with_options(key="k").enqueue_async(3, 4)
        again = await add.with_options(key="k").enqueue_async(3, 4)
        many = await add.enqueue_many_async([(5, 6), {"a": 7, "b": 8}])
        named = await app.enqueue_async("add", [9, 10])
        results = [await h.result_async(timeout=10) for h in (first, keyed, *many, named)]
        stats = await app.stats_async()
        found = await app.get_job_async(first.id)
        worker.cancel()
        with pytest.raises(asyncio.CancelledError):
            await worker
        return results, (keyed.id, again.id, again.created), stats, found

    results, (keyed, again, created), stats, found = run_watched(main, caplog)
    assert results == [3, 7, 11, 15, 19]
    assert keyed == again and created is False  # a key is a key, awaited or not
    assert stats.counts["math"]["done"] == 5
    assert found is not None and found.state is JobState.DONE
    assert app.workers() == []  # the cancelled worker drained and unregistered


def test_a_cancelled_worker_task_drains_its_running_job(
    app: App, caplog: pytest.LogCaptureFixture
) -> None:
    started = threading.Event()

    @app.task
    async def slow(n: int) -> int:
        started.set()
        await asyncio.sleep(0.3)
        return n

    async def main() -> JobState:
        handle = await slow.enqueue_async(1)
        worker = asyncio.create_task(app.run_worker_async())
        assert await asyncio.to_thread(started.wait, 10)
        worker.cancel()  # mid-job: the worker drains it before the task ends
        with pytest.raises(asyncio.CancelledError):
            await worker
        job = await app.get_job_async(handle.id)
        assert job is not None
        return job.state

    assert run_watched(main, caplog) is JobState.DONE


def test_an_async_enqueue_joins_the_callers_asyncconnection_transaction(app: App) -> None:
    @app.task
    def note(text: str) -> None: ...

    if not is_pg(app):  # no async sqlite3: the documented way is the sync one, in a thread
        import sqlite3

        app.migrate()  # the schema first: the transaction below holds the write lock

        def unit_of_work() -> int:  # the handler's whole transaction, in a thread
            conn = sqlite3.connect(app.url.removeprefix("sqlite:///"), isolation_level=None)
            try:
                conn.execute("BEGIN IMMEDIATE")
                handle = note.with_options(connection=conn).enqueue("in a thread")
                conn.execute("COMMIT")
                return handle.id
            finally:
                conn.close()

        async def offloaded() -> int:
            return await asyncio.to_thread(unit_of_work)

        job = app.get_job(asyncio.run(offloaded()))
        assert job is not None and job.args == ["in a thread"]
        with pytest.raises(ConfigurationError, match="needs a psycopg AsyncConnection"):
            asyncio.run(sqljobs.enqueue.insert_async(app, [], object()))
        return
    import psycopg

    async def main() -> tuple[int, int, bool]:
        async with await psycopg.AsyncConnection.connect(app.url) as conn:
            async with conn.transaction():
                kept = await note.with_options(connection=conn).enqueue_async("kept")
                named = await app.enqueue_async("note", ["named"], connection=conn)
                # not visible outside the transaction until it commits
                assert await app.get_job_async(kept.id) is None
            try:
                async with conn.transaction():
                    gone = await note.with_options(connection=conn).enqueue_async("gone")
                    raise RuntimeError("the request failed")
            except RuntimeError:
                pass
            return kept.id, named.id, await app.get_job_async(gone.id) is None

    kept, named, rolled_back = asyncio.run(main())
    assert rolled_back
    assert {j.id for j in app.find_jobs().jobs} == {kept, named}
    job = app.get_job(kept)
    assert job is not None and job.args == ["kept"]
