"""huey's SqliteHuey as the peer, used only through its public API with default settings.

The consumer runs in this process with 8 thread workers (``create_consumer`` and
``start``/``stop``), so handler calls are counted the same way as for sqljobs. huey sets
signal handlers in ``start``; they are put back afterwards.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from common import Countdown, Sample, temp_db
from huey import SqliteHuey
from huey.consumer import Consumer

_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _huey(path: Path) -> SqliteHuey:
    return SqliteHuey("bench", filename=str(path))


@contextmanager
def running_consumer(huey: SqliteHuey, workers: int = 8) -> Iterator[Consumer]:
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
    """Time from consumer start until ``n`` pre-enqueued no-op tasks have run."""
    with temp_db("huey.db") as path:
        huey = _huey(path)
        countdown = Countdown(n)

        @huey.task()
        def noop(i: int) -> None:
            countdown.hit()

        for i in range(n):
            noop(i)
        started = time.perf_counter()
        with running_consumer(huey, workers):
            countdown.wait()
        huey.storage.close()
    return {"jobs_per_s": n / (countdown.finished_at - started)}


def enqueue_loop(n: int) -> Sample:
    """``n`` task calls, huey's way to enqueue (one insert each)."""
    with temp_db("huey.db") as path:
        huey = _huey(path)

        @huey.task()
        def noop(i: int) -> None:
            pass

        noop(-1)  # open the connection and create tables outside the timing
        started = time.perf_counter()
        for i in range(n):
            noop(i)
        elapsed = time.perf_counter() - started
        huey.storage.close()
    return {"jobs_per_s": n / elapsed}


def article(n: int = 200, work: float = 0.002, workers: int = 8) -> Sample:
    """The article's workload on an idle huey consumer; huey has no bulk enqueue."""
    with temp_db("huey.db") as path:
        huey = _huey(path)
        countdown = Countdown(n)

        @huey.task()
        def work_2ms(i: int) -> None:
            time.sleep(work)
            countdown.hit()

        huey.flush()  # create tables before the consumer starts polling
        with running_consumer(huey, workers):
            time.sleep(0.2)
            started = time.perf_counter()
            for i in range(n):
                work_2ms(i)
            enqueued = time.perf_counter()
            countdown.wait()
        huey.storage.close()
    return {
        "after_enqueue_ms": (countdown.finished_at - enqueued) * 1000,
        "total_ms": (countdown.finished_at - started) * 1000,
    }
