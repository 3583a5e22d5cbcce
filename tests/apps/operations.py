"""Tasks for the recycling and hard-time-limit tests: one that leaks memory on purpose,
one stuck in a blocking call, and a quick one. Runs are logged as in ``workload``."""

from __future__ import annotations

import os
import time

import sqljobs

from .workload import log_run

LEASE = float(os.environ.get("SQLJOBS_TEST_LEASE", "1.0"))
app = sqljobs.App(default_lease=LEASE)

LEAKED: list[bytes] = []


@app.task(lease=LEASE)
def leak(label: str, megabytes: int) -> None:
    """Keeps ``megabytes`` of memory for as long as its process lives."""
    log_run(label, "start")
    LEAKED.append(b"\x01" * (megabytes * 1_000_000))  # written: resident, not just reserved
    log_run(label, "end")


@app.task(lease=LEASE)
def quick(label: str, seconds: float = 0.0) -> None:
    log_run(label, "start")
    time.sleep(seconds)
    log_run(label, "end")


@app.task(lease=LEASE, timeout=0.5, hard_timeout=1, retry=sqljobs.Retry(max_attempts=1))
def stuck(label: str) -> None:
    """Blocks far past both limits, ignoring the soft timeout."""
    log_run(label, "start")
    time.sleep(3600)
    log_run(label, "end")


@app.task(lease=LEASE, timeout=0.3, hard_timeout=30, retry=sqljobs.Retry(max_attempts=1))
def late(label: str, seconds: float = 1.0) -> str:
    """Runs past its timeout, well within its hard limit, then returns."""
    log_run(label, "start")
    time.sleep(seconds)
    log_run(label, "end")
    return label
