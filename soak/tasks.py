"""The soak's work: each job writes an effect guarded by an idempotency key with a time to
live and returns a small result, so every table the pruner looks after grows during the
run (jobs, results, idempotency keys, metrics rollups) and must be kept bounded by it.

The effect adds one to a counter spread over ``COUNTER_ROWS`` rows (the job's number picks
one). A single row every job updated made the handlers queue on its lock and stalled every
worker whenever autovacuum truncated that row's table (PostgreSQL soaks: claim p50 up to
5.5 s in a 30 minute run, 975 ms in the run that sampled why): a hot spot of the
workload, not of the queue.

``SOAK_RETAIN`` (seconds) is how long done jobs and idempotency keys are kept.
"""

from __future__ import annotations

import os
import sqlite3

import sqljobs
from soak import COUNTER_ROWS

RETAIN = float(os.environ.get("SOAK_RETAIN", "60"))

app = sqljobs.App(retention=sqljobs.Retention(done=RETAIN, cancelled=RETAIN, dead=RETAIN))


@app.task(name="soak_work")
def work(ctx: sqljobs.JobContext, n: int) -> int:
    with ctx.transaction() as tx:
        if sqljobs.idempotent(tx, f"soak:{n}", ttl=RETAIN):
            mark = "?" if isinstance(tx, sqlite3.Connection) else "%s"
            tx.execute(f"UPDATE soak_counter SET n = n + 1 WHERE id = {mark}", (n % COUNTER_ROWS,))
    return n
