"""sqljobs on SQLite: drain, bulk and single enqueue, the article's workload, idle cost.

Workers run in a thread of this process (``install_signal_handlers=False``), so the
benchmark can count handler calls exactly and read ``Worker.counters``. Enqueue-to-start
latency from another process lives in ``latency.py``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from common import WAIT_LIMIT, Countdown, Sample, sqlite_url, temp_db, wait_until

import sqljobs


@contextmanager
def running_worker(app: sqljobs.App, **options: Any) -> Iterator[sqljobs.Worker]:
    """A worker in a background thread, stopped gracefully and joined on exit."""
    worker = sqljobs.Worker(app, install_signal_handlers=False, **options)
    thread = threading.Thread(target=worker.run, name="bench-worker", daemon=True)
    thread.start()
    try:
        yield worker
    finally:
        worker.stop()
        thread.join(WAIT_LIMIT)
        if thread.is_alive():
            raise RuntimeError("worker did not stop")


def _count_done(app: sqljobs.App) -> int:
    return app.stats().total("done")


def _wait_registered(app: sqljobs.App) -> None:
    """Until the worker has registered and had a moment to go idle."""
    wait_until(lambda: app.stats().workers >= 1)
    time.sleep(0.2)


def drain(n: int, concurrency: int = 8, prefetch: int = 0) -> Sample:
    """Time from worker start until ``n`` pre-enqueued no-op jobs are ``done`` in the table.

    ``ran_per_s`` stops the clock when the last handler returns; ``jobs_per_s`` when the
    last outcome is committed, which is the honest figure.
    """
    with temp_db() as path:
        app = sqljobs.App(sqlite_url(path))
        countdown = Countdown(n)

        @app.task
        def noop(i: int) -> None:
            countdown.hit()

        noop.enqueue_many([(i,) for i in range(n)])
        started = time.perf_counter()
        with running_worker(app, concurrency=concurrency, prefetch=prefetch) as worker:
            countdown.wait()
            committed = wait_until(lambda: _count_done(app) == n)
            claims = worker.counters["claims"]
        app.close()
    if countdown.hits != n:
        raise RuntimeError(f"{countdown.hits} handler calls for {n} jobs")
    return {
        "jobs_per_s": n / (committed - started),
        "ran_per_s": n / (countdown.finished_at - started),
        "claims": float(claims),
    }


def enqueue_bulk(n: int) -> Sample:
    """One ``enqueue_many`` call of ``n`` jobs (one transaction)."""
    with temp_db() as path:
        app = sqljobs.App(sqlite_url(path))

        @app.task
        def noop(i: int) -> None:
            pass

        app.migrate()  # schema creation is not part of the figure
        started = time.perf_counter()
        handles = noop.enqueue_many([(i,) for i in range(n)])
        elapsed = time.perf_counter() - started
        app.close()
    if len(handles) != n:
        raise RuntimeError(f"enqueue_many returned {len(handles)} handles for {n} jobs")
    return {"jobs_per_s": n / elapsed}


def enqueue_loop(n: int) -> Sample:
    """``n`` single ``enqueue`` calls, each its own durable transaction."""
    with temp_db() as path:
        app = sqljobs.App(sqlite_url(path))

        @app.task
        def noop(i: int) -> None:
            pass

        app.migrate()
        started = time.perf_counter()
        for i in range(n):
            noop.enqueue(i)
        elapsed = time.perf_counter() - started
        app.close()
    return {"jobs_per_s": n / elapsed}


def article(n: int = 200, work: float = 0.002, concurrency: int = 8, prefetch: int = 0) -> Sample:
    """The reference article's workload: ``n`` jobs of ``work`` seconds on an idle worker.

    ``after_enqueue_ms`` runs from the return of ``enqueue_many`` to the last outcome
    committed; ``total_ms`` from the start of the enqueue.
    """
    with temp_db() as path:
        app = sqljobs.App(sqlite_url(path))
        countdown = Countdown(n)

        @app.task
        def work_2ms(i: int) -> None:
            time.sleep(work)
            countdown.hit()

        app.migrate()
        with running_worker(app, concurrency=concurrency, prefetch=prefetch):
            _wait_registered(app)
            started = time.perf_counter()
            work_2ms.enqueue_many([(i,) for i in range(n)])
            enqueued = time.perf_counter()
            countdown.wait()
            committed = wait_until(lambda: _count_done(app) == n, step=0.0005)
        app.close()
    return {
        "after_enqueue_ms": (committed - enqueued) * 1000,
        "total_ms": (committed - started) * 1000,
        "ran_ms": (countdown.finished_at - enqueued) * 1000,
    }


def idle_cost(seconds: float) -> Sample:
    """Claim queries per second and CPU share of an in-process worker with nothing to do.

    The main thread sleeps meanwhile, so the process CPU time is the worker's.
    """
    with temp_db() as path:
        app = sqljobs.App(sqlite_url(path))

        @app.task
        def noop() -> None:
            pass

        app.migrate()
        with running_worker(app, concurrency=8) as worker:
            _wait_registered(app)
            claims, cpu, wall = worker.counters["claims"], time.process_time(), time.perf_counter()
            time.sleep(seconds)
            claims = worker.counters["claims"] - claims
            cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        app.close()
    return {"claims_per_s": claims / wall, "cpu_pct": 100 * cpu / wall}
