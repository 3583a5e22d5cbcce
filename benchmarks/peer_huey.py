"""huey's SqliteHuey, driven only through its public API with default settings, as the
SQLite peer.

The consumer runs in this process with 8 thread workers (``create_consumer``,
``start``/``stop``), so handler calls are counted the same way as for sqljobs. huey sets
signal handlers in ``start``; they are put back afterwards.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from common import Countdown, Sample, scratch_dir
from huey import SqliteHuey
from huey.consumer import Consumer

_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@contextmanager
def _huey() -> Iterator[SqliteHuey]:
    with scratch_dir() as folder:
        huey = SqliteHuey("bench", filename=str(folder / "huey.db"))
        try:
            yield huey
        finally:
            huey.storage.close()


@contextmanager
def _consumer(huey: SqliteHuey, workers: int = 8) -> Iterator[Consumer]:
    """A started consumer with thread workers; stopped gracefully, signals restored."""
    saved: dict[int, Any] = {s: signal.getsignal(s) for s in _SIGNALS}
    consumer = huey.create_consumer(workers=workers, worker_type="thread", periodic=False)
    consumer.start()
    try:
        yield consumer
    finally:
        consumer.stop(graceful=True)
        for signum, handler in saved.items():
            signal.signal(signum, handler)


def drain(n: int, workers: int = 8) -> Sample:
    """From consumer start until ``n`` pre-enqueued no-op tasks have run (huey writes no
    outcome for a task that returns None, so the last handler return is its finish)."""
    countdown = Countdown(n)
    with _huey() as huey:

        @huey.task()
        def noop(i: int) -> None:
            countdown.hit()

        for i in range(n):
            noop(i)
        started = time.perf_counter()
        with _consumer(huey, workers):
            countdown.wait()
    countdown.check()
    return {"jobs_per_s": n / (countdown.finished_at - started)}


def enqueue_loop(n: int) -> Sample:
    """``n`` task calls, huey's way to enqueue (one insert each; it has no bulk enqueue)."""
    with _huey() as huey:

        @huey.task()
        def noop(i: int) -> None:
            pass

        noop(-1)  # open the connection and create tables outside the timing
        started = time.perf_counter()
        for i in range(n):
            noop(i)
        elapsed = time.perf_counter() - started
    return {"jobs_per_s": n / elapsed}


def article(n: int = 200, work: float = 0.002, workers: int = 8) -> Sample:
    """The article's workload on an idle consumer; the jobs run while the 200 enqueues go on."""
    countdown = Countdown(n)
    with _huey() as huey:

        @huey.task()
        def work_(i: int) -> None:
            time.sleep(work)
            countdown.hit()

        huey.flush()  # create tables before the consumer starts polling
        with _consumer(huey, workers):
            time.sleep(0.2)
            started = time.perf_counter()
            for i in range(n):
                work_(i)
            enqueued = time.perf_counter()
            countdown.wait()
    return {"after_enqueue_ms": (countdown.finished_at - enqueued) * 1000,
            "total_ms": (countdown.finished_at - started) * 1000}  # fmt: skip
