"""What a single ``enqueue()`` costs a producer while workers drain the same queue, against
the same calls with no worker running: the writes a drain makes (claims, completions,
their commits) compete with the producer's for the database.

Each repetition is a fresh database holding a backlog of no-op jobs (one
``enqueue_many``). The producer, this process, first makes CALLS single ``enqueue()``
calls into the queue with no worker running, then starts ``sqljobs worker --processes 2
--concurrency 8`` and, once both processes have registered and jobs are being done, makes
CALLS more. The backlog must outlast the second series (checked: a run that ran out of
backlog is an error, since its last calls would have met no load).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import sqljobs_cases as sq
from common import Sample, percentile, wait_until
from scale_fleet import stop

WORKER_PROCESSES = 2


def _calls(noop: Any, count: int) -> list[float]:
    """``count`` single enqueues back to back; how long each call took, in seconds."""
    taken = []
    for i in range(count):
        began = time.perf_counter()
        noop.enqueue(i)
        taken.append(time.perf_counter() - began)
    return taken


def _pending(app: Any) -> int:
    return int(app.stats().total("pending"))


def under_load(url: str, backlog: int, calls: int, folder: Path) -> Sample:
    """p50 and p99 of ``enqueue()`` without, then with, two worker processes draining."""
    app = sq.new_app(url)
    noop = app.tasks["noop"]
    try:
        noop.enqueue_many([(i,) for i in range(backlog)])
        quiet = _calls(noop, calls)
        worker = sq.WorkerProcess(url, folder, "--processes", str(WORKER_PROCESSES),
                                  "--concurrency", "8")  # fmt: skip
        try:
            wait_until(lambda: worker.alive() and app.stats().workers >= WORKER_PROCESSES,
                       step=0.01)  # fmt: skip
            wait_until(lambda: app.stats().total("done") > 0, step=0.01)
            before, started = _pending(app), time.perf_counter()
            busy = _calls(noop, calls)
            elapsed, after = time.perf_counter() - started, _pending(app)
        finally:
            stop(worker)
    finally:
        app.close()
    if after == 0:
        raise RuntimeError(f"the backlog of {backlog:,} ran out during the calls: raise it")
    return {
        "quiet_p50_ms": percentile(quiet, 50) * 1000,
        "quiet_p99_ms": percentile(quiet, 99) * 1000,
        "busy_p50_ms": percentile(busy, 50) * 1000,
        "busy_p99_ms": percentile(busy, 99) * 1000,
        "claimed_per_s": (before + calls - after) / elapsed,
    }
