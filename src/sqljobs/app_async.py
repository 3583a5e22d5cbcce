"""The App's operations for asyncio callers: what a web handler needs, awaitable, without
ever blocking the event loop.

sqljobs' core is synchronous (the standard library's sqlite3 and psycopg's sync pool), so
an awaitable operation runs its synchronous twin in a worker thread
(``asyncio.to_thread``, which carries the caller's context variables along: a current
trace span, say). The one exception is an enqueue inside the caller's transaction on a
``psycopg.AsyncConnection``: that runs on the caller's connection, awaited, so the job
commits or rolls back with the caller's own rows. SQLite has no async connection in the
standard library: to enqueue in a SQLite transaction from async code, run the synchronous
enqueue with its ``sqlite3`` connection in a thread (``asyncio.to_thread``).

A worker inside an existing event loop (:meth:`App.run_worker_async`) runs the
ordinary worker in a thread: its handlers, sync and async, run exactly as in ``sqljobs
worker``, and cancelling the awaiting task stops it gracefully (it drains).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .errors import ConfigurationError
from .handles import JobHandle
from .hooks import around_enqueue_async
from .jobs import NewJob

if TYPE_CHECKING:
    from .app import App
    from .worker import WorkerConfig

log = logging.getLogger("sqljobs")


def is_async_connection(connection: Any) -> bool:
    """Whether ``connection`` is one to await (psycopg's AsyncConnection), without
    importing psycopg where it is not installed."""
    module = type(connection).__module__
    return module.startswith("psycopg") and hasattr(connection, "__aenter__")


async def enqueue_named(app: App, task: str, *args: Any, **kwargs: Any) -> JobHandle:
    """``app.enqueue`` awaitable; on an AsyncConnection, in the caller's transaction."""
    connection = kwargs.get("connection")
    if connection is not None and is_async_connection(connection):
        # the build may read the task catalogue (a task this app does not register)
        job = await asyncio.to_thread(app.build_named_job, task, *args, **kwargs)
        return (await insert_on(app, [job], connection))[0]
    return await asyncio.to_thread(app.enqueue, task, *args, **kwargs)


async def insert_on(app: App, jobs: Sequence[NewJob], connection: Any) -> list[JobHandle]:
    """Insert built jobs on the caller's AsyncConnection, in its transaction (never
    committing it): the jobs are stored if and only if the caller commits."""
    if not is_async_connection(connection):
        raise ConfigurationError(
            f"an async enqueue on a connection needs a psycopg AsyncConnection, got "
            f"{type(connection).__name__}"
        )
    if not app.backend.async_connections:
        raise ConfigurationError(
            f"{type(app.backend).__name__} cannot enqueue on an async connection: on "
            "SQLite, run the enqueue with its sqlite3 connection in a thread "
            "(await asyncio.to_thread(task.with_options(connection=conn).enqueue, ...))"
        )

    async def store(rows: Sequence[NewJob]) -> list[JobHandle]:
        results = await app.backend.enqueue_jobs_async(rows, connection)
        return [JobHandle(r.id, r.created, app) for r in results]

    if app.hooks.around_enqueue:  # enqueue middleware (tracing) and job_enqueued hooks
        return await around_enqueue_async(app.hooks, jobs, store)
    return await store(jobs)


async def run_worker(app: App, config: WorkerConfig) -> None:
    """Run a worker in a thread until the awaiting task is cancelled, then stop it
    gracefully (it drains, as on SIGTERM) and re-raise the cancellation."""
    from .worker import Worker

    worker = Worker(app, config)
    running = asyncio.ensure_future(asyncio.to_thread(worker.run))
    try:
        await asyncio.shield(running)
    except asyncio.CancelledError:
        log.info("worker %s: the awaiting task was cancelled; stopping", worker.id)
        worker.stop()
        await running  # the drain, bounded by the worker's drain timeout
        raise
