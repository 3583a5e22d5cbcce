"""PostgreSQL peers: procrastinate and pgqueuer, driven only through their public APIs.

Each function gets the URL of a fresh, empty database (``postgres_bench.py`` creates and
drops it), installs the peer's schema there, and returns one repetition's figures. Both
peers are asyncio libraries, so each function runs its own event loop. Handlers count
their calls; a peer's drain clock stops when its last handler returns, which flatters the
peer a little (sqljobs' clock stops only when the last outcome is committed).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import procrastinate
import psycopg
from pgqueuer import PsycopgDriver, Queries, QueueManager
from pgqueuer.models import Job
from pgqueuer.types import QueueExecutionMode

Sample = dict[str, float]
WAIT_LIMIT = 120.0

logging.getLogger("procrastinate").setLevel(logging.WARNING)
logging.getLogger("pgqueuer").setLevel(logging.WARNING)


class Counter:
    """Counts handler calls on the event loop; remembers when the last expected one ran."""

    def __init__(self, expected: int) -> None:
        self.expected = expected
        self.hits = 0
        self.finished_at = 0.0

    def hit(self) -> None:
        self.hits += 1
        if self.hits == self.expected:
            self.finished_at = time.perf_counter()

    def check(self) -> None:
        if self.hits != self.expected:
            raise RuntimeError(f"{self.hits} handler calls for {self.expected} jobs")


# -- pgqueuer ------------------------------------------------------------------------------


async def _pgq_connect(url: str) -> tuple[psycopg.AsyncConnection[Any], Queries]:
    """pgqueuer's psycopg driver wants one autocommit async connection."""
    conn = await psycopg.AsyncConnection.connect(url, autocommit=True)
    queries = Queries(PsycopgDriver(conn))
    await queries.install()
    return conn, queries


async def _pgq_drain(url: str, n: int, concurrency: int | None) -> Sample:
    conn, queries = await _pgq_connect(url)
    try:
        await queries.enqueue(["noop"] * n, [None] * n, [0] * n)
        counter = Counter(n)
        qm = QueueManager(queries)

        @qm.entrypoint("noop")
        async def noop(job: Job) -> None:
            counter.hit()
            if counter.hits == n:  # drain mode would idle ~4 s more before returning
                qm.shutdown.set()

        # max_concurrent_tasks caps jobs in flight at ``concurrency``; pgqueuer requires
        # it to be at least twice the dequeue batch size. None: its defaults (batch 10,
        # no cap).
        batch = 10 if concurrency is None else max(1, concurrency // 2)
        started = time.perf_counter()
        run = qm.run(batch_size=batch, max_concurrent_tasks=concurrency,
                     mode=QueueExecutionMode.drain)  # fmt: skip
        await asyncio.wait_for(run, WAIT_LIMIT)
        returned = time.perf_counter()
    finally:
        await conn.close()
    counter.check()
    return {"jobs_per_s": n / (counter.finished_at - started),
            "returned_per_s": n / (returned - started)}  # fmt: skip


async def _pgq_enqueue(url: str, n: int) -> Sample:
    conn, queries = await _pgq_connect(url)
    try:
        started = time.perf_counter()
        ids = await queries.enqueue(["noop"] * n, [str(i).encode() for i in range(n)], [0] * n)
        elapsed = time.perf_counter() - started
    finally:
        await conn.close()
    if len(ids) != n:
        raise RuntimeError(f"pgqueuer returned {len(ids)} ids for {n} jobs")
    return {"jobs_per_s": n / elapsed}


def pgqueuer_drain(url: str, n: int, concurrency: int | None = 8) -> Sample:
    """Drain ``n`` pre-enqueued no-op jobs with one QueueManager capped at ``concurrency``
    jobs in flight (None: pgqueuer's defaults, which do not cap it)."""
    return asyncio.run(_pgq_drain(url, n, concurrency))


def pgqueuer_enqueue(url: str, n: int) -> Sample:
    """One batch ``Queries.enqueue`` call of ``n`` jobs (lists of entrypoints/payloads)."""
    return asyncio.run(_pgq_enqueue(url, n))


# -- procrastinate -------------------------------------------------------------------------


def _procrastinate_app(url: str, counter: Counter | None) -> tuple[procrastinate.App, Any]:
    """An App with one async no-op task; ``counter`` (if any) counts its calls."""
    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=url))

    @app.task(name="noop")
    async def noop(i: int) -> None:
        if counter is not None:
            counter.hit()

    return app, noop


async def _proc_drain(url: str, n: int, concurrency: int) -> Sample:
    counter = Counter(n)
    app, noop = _procrastinate_app(url, counter)
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


async def _proc_enqueue(url: str, n: int) -> Sample:
    app, noop = _procrastinate_app(url, None)
    async with app.open_async():
        await app.schema_manager.apply_schema_async()
        started = time.perf_counter()
        ids = await noop.batch_defer_async(*({"i": i} for i in range(n)))
        elapsed = time.perf_counter() - started
    if len(ids) != n:
        raise RuntimeError(f"procrastinate returned {len(ids)} ids for {n} jobs")
    return {"jobs_per_s": n / elapsed}


def procrastinate_drain(url: str, n: int, concurrency: int = 8) -> Sample:
    """Drain ``n`` pre-deferred no-op jobs with one worker at ``concurrency``."""
    return asyncio.run(_proc_drain(url, n, concurrency))


def procrastinate_enqueue(url: str, n: int) -> Sample:
    """One ``batch_defer_async`` call of ``n`` jobs."""
    return asyncio.run(_proc_enqueue(url, n))
