"""procrastinate, driven only through its public API, as a PostgreSQL peer.

Each function gets the URL of a fresh, empty database, applies procrastinate's schema there
and returns one repetition's figures; procrastinate is an asyncio library, so each runs
its own event loop. The drain clock stops when the last handler returns, which flatters
it a little (sqljobs' clock stops only when the last outcome is committed).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import procrastinate
from common import WAIT_LIMIT, Countdown, Sample

logging.getLogger("procrastinate").setLevel(logging.WARNING)


def _app(url: str, counter: Countdown | None) -> tuple[procrastinate.App, Any]:
    """An App with one async no-op task; ``counter`` (if any) counts its calls."""
    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=url))

    @app.task(name="noop")
    async def noop(i: int) -> None:
        if counter is not None:
            counter.hit()

    return app, noop


async def _drain(url: str, n: int, concurrency: int) -> Sample:
    counter = Countdown(n)
    app, noop = _app(url, counter)
    async with app.open_async():
        await app.schema_manager.apply_schema_async()
        await noop.batch_defer_async(*({"i": i} for i in range(n)))
        started = time.perf_counter()
        # wait=False: the worker returns once it has caught up with the queue
        run = app.run_worker_async(concurrency=concurrency, wait=False,
                                   install_signal_handlers=False)  # fmt: skip
        await asyncio.wait_for(run, WAIT_LIMIT)
        returned = time.perf_counter()
    counter.check()
    return {"jobs_per_s": n / (counter.finished_at - started),
            "returned_per_s": n / (returned - started)}  # fmt: skip


async def _enqueue(url: str, n: int) -> Sample:
    app, noop = _app(url, None)
    async with app.open_async():
        await app.schema_manager.apply_schema_async()
        started = time.perf_counter()
        ids = await noop.batch_defer_async(*({"i": i} for i in range(n)))
        elapsed = time.perf_counter() - started
    if len(ids) != n:
        raise RuntimeError(f"procrastinate returned {len(ids)} ids for {n} jobs")
    return {"jobs_per_s": n / elapsed}


def drain(url: str, n: int, concurrency: int = 8) -> Sample:
    """Drain ``n`` pre-deferred no-op jobs with one worker at ``concurrency``."""
    return asyncio.run(_drain(url, n, concurrency))


def enqueue(url: str, n: int) -> Sample:
    """One ``batch_defer_async`` call of ``n`` jobs."""
    return asyncio.run(_enqueue(url, n))
