"""Tasks and schedules for the worker subprocesses of tests/test_schedules.py.

Each run appends ``run <job key> <pid> <start> <end>`` (wall-clock seconds) to the file
named by ``SQLJOBS_TEST_RUNS``, so a test can count runs per tick and check that runs of
one schedule never overlap. Environment switches stage the scenarios:

- ``SQLJOBS_TEST_PERIODIC=e5`` defines ``@app.periodic(every=0.2)`` (experiment E5).
- ``SQLJOBS_TEST_DIE_IN_TICK=1``: this worker SIGKILLs itself inside its first tick's
  transaction, after the schedule row was updated and the job inserted, before commit.
- ``SQLJOBS_TEST_TICK_LAG=S``: this worker's scheduler starts each pass S seconds late, so
  in a race for a tick the other replica gets there first.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Sequence
from typing import Any

import sqljobs
from sqljobs.maintenance.scheduler import Scheduler, SchedulerPass

LEASE = float(os.environ.get("SQLJOBS_TEST_LEASE", "1.0"))
app = sqljobs.App(default_lease=LEASE)


def log_line(text: str) -> None:
    fd = os.open(os.environ["SQLJOBS_TEST_RUNS"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{text}\n".encode())
    finally:
        os.close(fd)


def record(ctx: sqljobs.JobContext, seconds: float) -> None:
    start = time.time()
    time.sleep(seconds)
    log_line(f"run {ctx.key} {os.getpid()} {start:.6f} {time.time():.6f}")


@app.task(lease=LEASE)
def tick(ctx: sqljobs.JobContext, seconds: float = 0.0) -> None:
    record(ctx, seconds)


if os.environ.get("SQLJOBS_TEST_PERIODIC") == "e5":

    @app.periodic(every=0.2)
    def e5(ctx: sqljobs.JobContext) -> None:
        record(ctx, 0.0)


def _die_inside_the_tick() -> None:
    """Wrap enqueue_jobs as the scheduler calls it (inside its tick transaction, with a
    connection): insert, then die before the commit."""
    from sqljobs.backends.sqlite import SqliteBackend

    classes: list[Any] = [SqliteBackend]
    try:
        from sqljobs.backends.postgres import PostgresBackend

        classes.append(PostgresBackend)
    except ImportError:
        pass
    for cls in classes:
        real = cls.enqueue_jobs

        def enqueue_jobs(
            self: Any, jobs: Sequence[Any], connection: Any = None, _real: Any = real
        ) -> Any:
            result = _real(self, jobs, connection)
            if connection is not None:
                log_line(f"dying {jobs[0].key} {os.getpid()}")
                os.kill(os.getpid(), signal.SIGKILL)
            return result

        cls.enqueue_jobs = enqueue_jobs


def _lag_every_pass(seconds: float) -> None:
    real = Scheduler.run_once

    def run_once(self: Scheduler) -> SchedulerPass:
        time.sleep(seconds)
        return real(self)

    Scheduler.run_once = run_once  # type: ignore[method-assign]


if os.environ.get("SQLJOBS_TEST_DIE_IN_TICK"):
    _die_inside_the_tick()
if os.environ.get("SQLJOBS_TEST_TICK_LAG"):
    _lag_every_pass(float(os.environ["SQLJOBS_TEST_TICK_LAG"]))
