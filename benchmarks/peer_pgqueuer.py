"""pgqueuer, driven only through its public API, as a PostgreSQL peer.

Each function gets the URL of a fresh, empty database, installs pgqueuer's schema there and
returns one repetition's figures; pgqueuer is an asyncio library, so each runs its own
event loop. The drain clock stops when the last handler returns, which flatters it a
little (sqljobs' clock stops only when the last outcome is committed).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import psycopg
from common import WAIT_LIMIT, Countdown, Sample
from pgqueuer import PsycopgDriver, Queries, QueueManager
from pgqueuer.models import Job
from pgqueuer.types import QueueExecutionMode

logging.getLogger("pgqueuer").setLevel(logging.WARNING)


async def _connect(url: str) -> tuple[psycopg.AsyncConnection[Any], Queries]:
    """pgqueuer's psycopg driver wants one autocommit async connection."""
    conn = await psycopg.AsyncConnection.connect(url, autocommit=True)
    queries = Queries(PsycopgDriver(conn))
    await queries.install()
    return conn, queries


async def _drain(url: str, n: int, concurrency: int | None) -> Sample:
    conn, queries = await _connect(url)
    try:
        await queries.enqueue(["noop"] * n, [None] * n, [0] * n)
        counter = Countdown(n)
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


async def _enqueue(url: str, n: int) -> Sample:
    conn, queries = await _connect(url)
    try:
        started = time.perf_counter()
        ids = await queries.enqueue(["noop"] * n, [str(i).encode() for i in range(n)], [0] * n)
        elapsed = time.perf_counter() - started
    finally:
        await conn.close()
    if len(ids) != n:
        raise RuntimeError(f"pgqueuer returned {len(ids)} ids for {n} jobs")
    return {"jobs_per_s": n / elapsed}


def drain(url: str, n: int, concurrency: int | None = 8) -> Sample:
    """Drain ``n`` pre-enqueued no-op jobs with one QueueManager capped at ``concurrency``
    jobs in flight (None: pgqueuer's defaults, which do not cap it)."""
    return asyncio.run(_drain(url, n, concurrency))


def enqueue(url: str, n: int) -> Sample:
    """One batch ``Queries.enqueue`` call of ``n`` jobs (lists of entrypoints/payloads)."""
    return asyncio.run(_enqueue(url, n))
