"""1, 2, 4, 8 and 16 worker processes on one PostgreSQL draining one backlog: how the drain
scales, and whether SKIP LOCKED claims start to wait on each other.

Each repetition is a scratch database holding N no-op jobs (one ``enqueue_many``) and
``sqljobs worker --processes P --concurrency 8``, the command line as in production, run
until the backlog is gone. The rate is read afterwards from the jobs' own ``finished_at``
(the server's clock), between the 10th and the 90th percentile, so the processes'
start-up, which grows with P, does not count; the claims in that window are the distinct
(worker, ``started_at``) pairs, since one claim statement starts all its jobs at one
``now()``. Meanwhile :mod:`pg_activity` samples the server's backends every ~10 ms.
Reading the table afterwards costs the drain nothing; the sampling costs it one query
per 10 ms on another connection.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path
from typing import Any

import psycopg
import sqljobs_cases as sq
from common import Sample, scratch_dir, wait_until
from pg_activity import ActivitySampler

PROCESSES = (1, 2, 4, 8, 16)
CONCURRENCY = 8

WINDOW = """
SELECT percentile_disc(0.1) WITHIN GROUP (ORDER BY f), percentile_disc(0.9)
       WITHIN GROUP (ORDER BY f), count(*)
FROM (SELECT extract(epoch FROM finished_at)::float8 AS f FROM sqljobs_jobs
      WHERE state = 'done') AS d
"""

IN_WINDOW = """
SELECT count(*) FILTER (WHERE finished_at BETWEEN to_timestamp(%(start)s)
                                              AND to_timestamp(%(end)s)),
       count(DISTINCT (worker, started_at)) FILTER (WHERE started_at BETWEEN
           to_timestamp(%(start)s) AND to_timestamp(%(end)s)),
       count(*) FILTER (WHERE started_at BETWEEN to_timestamp(%(start)s) AND to_timestamp(%(end)s))
FROM sqljobs_jobs WHERE state = 'done'
"""


def _drained(app: Any, worker: sq.WorkerProcess) -> bool:
    st = app.stats()
    return worker.alive() and st.total("pending") == 0 and st.total("running") == 0


def drain(url: str, n: int, processes: int, waits: dict[int, list[str]]) -> Sample:
    """``sqljobs worker --processes P`` draining ``n`` pre-enqueued no-op jobs, sampled;
    the commonest waits go to ``waits[processes]`` for the table's note."""
    app = sq.new_app(url)
    try:
        app.tasks["noop"].enqueue_many([(i,) for i in range(n)])
        with scratch_dir() as folder, ActivitySampler(url) as sampler:
            worker = sq.WorkerProcess(url, folder, "--processes", str(processes),
                                      "--concurrency", str(CONCURRENCY))  # fmt: skip
            try:
                wait_until(lambda: _drained(app, worker), step=0.1)
            finally:
                stop(worker)
    finally:
        app.close()
    with psycopg.connect(url) as conn:
        start, end, done = conn.execute(WINDOW).fetchone()  # type: ignore[misc]
        if done != n:
            raise RuntimeError(f"{done} of {n} jobs done")
        jobs, claims, started = conn.execute(IN_WINDOW, {"start": start, "end": end}).fetchone()  # type: ignore[misc]
    w = sampler.window(start, end)
    seconds = end - start
    waits[processes] = [f"{name} {mean:.2f}" for name, mean in w.top_waits]
    return {
        "jobs_per_s": jobs / seconds,
        "claims_per_s": claims / seconds,
        "jobs_per_claim": started / claims,
        "claim_ms": 1000 * w.mean_claiming * seconds / claims,
        "lock_wait_ms_per_claim": 1000 * (w.mean_lock + w.mean_lwlock) * seconds / claims,
        "active": w.mean_active,
        "lock": w.mean_lock,
        "lwlock": w.mean_lwlock,
        "any_lock_pct": 100 * w.any_lock_share,
        "runnable": w.mean_runnable,
        "cpu_pct": 100 * w.cpu_busy_share,
        "samples": float(w.samples),
    }


def children(pid: int) -> list[int]:
    """The processes ``pid`` forked (``--processes``' workers), from /proc."""
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(x) for x in text.split()]


def stop(worker: sq.WorkerProcess) -> None:
    """Stop the supervisor gracefully and make sure none of its workers outlives it: one
    left behind would drain the next repetition's jobs. A straggler is killed, and said."""
    forked = children(worker.proc.pid)
    worker.stop()
    deadline = time.monotonic() + 10
    left = forked
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = [pid for pid in left if _alive(pid)]
    for pid in left:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    if left:
        raise RuntimeError(f"worker processes {left} outlived their supervisor: killed")


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"  # a zombie has exited; its parent reaps it
