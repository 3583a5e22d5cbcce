"""Tasks that worker subprocesses in the tests run. Each run is appended to a log file
(``SQLJOBS_TEST_RUNS``) as ``<label> <pid> <start|end>`` so tests count real executions."""

from __future__ import annotations

import asyncio
import os
import signal
import time

import sqljobs

LEASE = float(os.environ.get("SQLJOBS_TEST_LEASE", "1.0"))
app = sqljobs.App(default_lease=LEASE)


def log_run(label: object, phase: str) -> None:
    path = os.environ["SQLJOBS_TEST_RUNS"]
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{label} {os.getpid()} {phase}\n".encode())
    finally:
        os.close(fd)


@app.task(lease=LEASE)
def record(label: str, seconds: float = 0.0) -> None:
    log_run(label, "start")
    time.sleep(seconds)
    log_run(label, "end")


@app.task(lease=LEASE)
async def record_async(label: str, seconds: float = 0.0) -> None:
    log_run(label, "start")
    await asyncio.sleep(seconds)
    log_run(label, "end")


@app.task(lease=LEASE, retry=sqljobs.Retry(max_attempts=10, base=0.01))
def kill_my_worker(label: str) -> None:
    log_run(label, "start")
    os.kill(os.getpid(), signal.SIGKILL)


@app.task(lease=LEASE)
def double(x: int) -> int:
    return 2 * x


@app.task(lease=LEASE)
def cooperative(ctx: sqljobs.JobContext, label: str, seconds: float = 30.0) -> str:
    """Works in small steps and stops when cancelled."""
    log_run(label, "start")
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if ctx.cancelled:
            log_run(label, "cancelled")
            ctx.check_cancelled()
        time.sleep(0.01)
    log_run(label, "end")
    return label


@app.task(lease=LEASE)
def stubborn(label: str, seconds: float = 30.0) -> str:
    """Ignores cancellation: runs to its end (unless its process is replaced)."""
    log_run(label, "start")
    time.sleep(seconds)
    log_run(label, "end")
    return label


@app.task(lease=LEASE)
async def patient(label: str, seconds: float = 30.0) -> str:
    """An async task: a cancel arrives as CancelledError at its await."""
    log_run(label, "start")
    try:
        await asyncio.sleep(seconds)
    except asyncio.CancelledError:
        log_run(label, "cancelled")
        raise
    log_run(label, "end")
    return label


@app.task(lease=LEASE, concurrency=2, concurrency_key=lambda tenant, *_, **__: tenant)
def sync_tenant(tenant: str, label: str, seconds: float = 0.01) -> None:
    """At most two per tenant at once, across every worker."""
    log_run(label, "start")
    time.sleep(seconds)
    log_run(label, "end")


@app.task(lease=LEASE, rate="20/s")
def paced(label: str) -> None:
    """At most 20 start in any second, across every worker."""
    log_run(label, "start")


@app.task(lease=LEASE)
def finish_at(at: float, value: int) -> int:
    """Returns ``value`` at the wall-clock time ``at``: group members that end together."""
    time.sleep(max(0.0, at - time.time()))
    return value


@app.task(lease=LEASE)
def gather(results: list[int], label: str) -> list[int]:
    """A group's callback: logs its run and gives the results back."""
    log_run(label, "start")
    log_run(label, "end")
    return results


@app.task(lease=LEASE, retry=sqljobs.Retry(max_attempts=1))
def fail(label: str) -> None:
    log_run(label, "start")
    raise RuntimeError(f"{label} fails on purpose")
