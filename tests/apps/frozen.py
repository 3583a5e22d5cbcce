"""A task for tests/test_stale_worker.py's worker subprocesses: on its first attempt it
holds (``where``: just before its ``ctx.transaction()``, or inside it after its write)
until the file ``go`` exists, so that the test can freeze its process (SIGSTOP) there, let
another worker take the job over, and thaw it (SIGCONT). Runs are logged as in
tests/apps/workload.py (``SQLJOBS_TEST_RUNS``): ``holding``, then ``committed`` or
``refused``."""

from __future__ import annotations

import os
import sqlite3
import time

import sqljobs
from tests.apps.workload import log_run

LEASE = float(os.environ.get("SQLJOBS_TEST_LEASE", "1.0"))
app = sqljobs.App(default_lease=LEASE)


def hold(label: str, go: str) -> None:
    log_run(label, "holding")
    while not os.path.exists(go):  # the test freezes the process meanwhile, then thaws it
        time.sleep(0.005)


@app.task(lease=LEASE, retry=sqljobs.Retry(max_attempts=5, base=0))
def charge(ctx: sqljobs.JobContext, label: str, where: str, go: str) -> None:
    """Writes one effect row in its transaction, with no idempotency marker: only the
    transaction's fenced completion keeps a stale attempt's row out."""
    first = ctx.attempt == 1
    if first and where == "before":
        hold(label, go)
    try:
        with ctx.transaction() as tx:
            mark = "?" if isinstance(tx, sqlite3.Connection) else "%s"
            tx.execute(
                f"INSERT INTO effects (label, attempt) VALUES ({mark}, {mark})",
                (label, ctx.attempt),
            )
            if first and where == "inside":
                hold(label, go)
    except sqljobs.LeaseLost:
        log_run(label, "refused")
        raise
    log_run(label, "committed")
