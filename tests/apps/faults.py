"""Tasks that misbehave, for tests/test_faults.py's worker subprocesses: handlers that
raise what is not an ``Exception``, or end their process with ``os._exit``. Runs are
logged as in tests/apps/workload.py (``SQLJOBS_TEST_RUNS``)."""

from __future__ import annotations

import asyncio
import os

import sqljobs
from tests.apps.workload import log_run

LEASE = float(os.environ.get("SQLJOBS_TEST_LEASE", "1.0"))
app = sqljobs.App(default_lease=LEASE)


class Abort(BaseException):
    """A user's own BaseException subclass, as some libraries define for "stop now"."""


RAISED: dict[str, type[BaseException]] = {
    "SystemExit": SystemExit,
    "KeyboardInterrupt": KeyboardInterrupt,
    "GeneratorExit": GeneratorExit,
    "Abort": Abort,
}


@app.task(lease=LEASE, retry=sqljobs.Retry(max_attempts=2, base=0))
def raise_base(label: str, kind: str) -> None:
    log_run(label, "start")
    raise RAISED[kind](f"{label} raises {kind}")


@app.task(lease=LEASE, retry=sqljobs.Retry(max_attempts=2, base=0))
async def raise_base_async(label: str, kind: str) -> None:
    log_run(label, "start")
    await asyncio.sleep(0)
    raise RAISED[kind](f"{label} raises {kind}")


@app.task(lease=LEASE, retry=sqljobs.Retry(max_attempts=3, base=0))
def exit_once(label: str) -> None:
    """Ends its process on its first run (``os._exit``: no cleanup, no exception), then
    succeeds: the next worker to take it finds it ran once before."""
    runs = os.environ["SQLJOBS_TEST_RUNS"]
    with open(runs) as log:
        before = sum(1 for line in log if line.split()[0] == label)
    log_run(label, "start")
    if before == 0:
        os._exit(7)
    log_run(label, "end")


@app.task(lease=LEASE)
def record(label: str) -> None:
    log_run(label, "start")
    log_run(label, "end")
