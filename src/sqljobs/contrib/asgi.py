"""A worker inside an ASGI application's lifespan (FastAPI, Starlette, any framework with a
``lifespan=``): one process that serves requests and runs jobs.

``FastAPI(lifespan=worker_lifespan(jobs, concurrency=4))`` starts the worker when the
application starts and, when it shuts down, stops it as SIGTERM stops ``sqljobs worker``:
no new claims, running jobs drained (up to the drain timeout), the rest released for
another worker. When the application has a lifespan of its own, nest
``background_worker`` in it instead. The worker installs no signal handlers: the server
(uvicorn, hypercorn) owns them and runs the lifespan's shutdown when told to stop.

Nothing here imports a web framework: a lifespan is a plain async context manager.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

from ..app import App

__all__ = ["background_worker", "worker_lifespan"]

log = logging.getLogger("sqljobs")


@asynccontextmanager
async def background_worker(
    app: App, concurrency: int = 8, queues: str | Sequence[str] | None = None, **options: Any
) -> AsyncIterator[asyncio.Task[None]]:
    """Run ``app.run_worker_async(...)`` as a task of the running loop while the block
    runs; on leaving it, cancel the task and wait for the drain. ``options`` are
    :class:`~sqljobs.WorkerConfig`'s (``drain_timeout``, ...). Gives the worker's task:
    ``task.done()`` is True once the worker stopped, which a health check can report.

    A worker that stops by itself (its database unreachable at start, say) is logged at
    once as an error, since the application goes on serving without it, and what it
    raised is raised again when the block ends."""
    worker = asyncio.create_task(
        app.run_worker_async(concurrency, queues, **options), name="sqljobs worker"
    )
    worker.add_done_callback(_report_early_end)
    try:
        yield worker
    finally:
        worker.cancel()  # the worker drains, then its task ends cancelled
        await asyncio.wait([worker])
    if not worker.cancelled() and (error := worker.exception()) is not None:
        raise error


def _report_early_end(worker: asyncio.Task[None]) -> None:
    """Say so when the worker ended before it was asked to."""
    if worker.cancelled():
        return
    error = worker.exception()
    if error is not None:
        log.error("the application's sqljobs worker stopped: %r", error, exc_info=error)
    else:
        log.error("the application's sqljobs worker stopped before the application did")


def worker_lifespan(
    app: App, concurrency: int = 8, queues: str | Sequence[str] | None = None, **options: Any
) -> Callable[[Any], AbstractAsyncContextManager[None]]:
    """A ``lifespan=`` for FastAPI or Starlette that runs a worker of ``app`` while the
    application runs (see :func:`background_worker` for the arguments)."""

    @asynccontextmanager
    async def lifespan(_asgi_app: Any) -> AsyncIterator[None]:
        async with background_worker(app, concurrency, queues, **options):
            yield

    return lifespan
