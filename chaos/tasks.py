"""What the chaos workers run: each job writes its effect inside ``ctx.transaction()``
guarded by ``sqljobs.idempotent()``, so however often a kill makes it run again, the effect
table must hold it exactly once. Every start is also appended to a log file outside any
transaction: those lines count the deliveries, duplicates included.

In the same transaction each job also writes a *fenced* row, the job id and its attempt's
fencing token, with no guard: only the fenced completion keeps it to one per job, so a
stale attempt whose commit went through shows as a second row (the idempotent effect would
hide it).

The worker processes import this module (``--app chaos.tasks:app``) with ``SQLJOBS_URL``
and ``CHAOS_STARTS`` (the log file) in their environment.
"""

from __future__ import annotations

import os
import sqlite3
import time
from typing import Any

import sqljobs

LEASE = 3.0
TICK_EVERY = 1.0
EFFECTS_DDL = (
    "CREATE TABLE IF NOT EXISTS chaos_effects (item TEXT NOT NULL, pid INTEGER NOT NULL)",
    "CREATE TABLE IF NOT EXISTS chaos_ticks (tick TEXT NOT NULL, pid INTEGER NOT NULL)",
    "CREATE TABLE IF NOT EXISTS chaos_fenced "
    "(job_id BIGINT NOT NULL, token BIGINT NOT NULL, pid INTEGER NOT NULL)",
)

app = sqljobs.App(default_lease=LEASE)


def _log_start(what: str) -> None:
    # O_APPEND writes of one short line are atomic, and survive the writer's SIGKILL
    fd = os.open(os.environ["CHAOS_STARTS"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{what} {os.getpid()}\n".encode())
    finally:
        os.close(fd)


def _insert(tx: Any, table: str, *values: str | int) -> None:
    mark = "?" if isinstance(tx, sqlite3.Connection) else "%s"
    marks = ", ".join([mark] * (len(values) + 1))
    tx.execute(f"INSERT INTO {table} VALUES ({marks})", (*values, os.getpid()))


@app.task(name="chaos_apply", retry=sqljobs.Retry(max_attempts=20, base=0.05, cap=1.0))
def apply(ctx: sqljobs.JobContext, item: str, work_ms: float = 2.0) -> None:
    """One unit of business work: the effect row and the marker commit with the job, and
    the unguarded fenced row with them."""
    _log_start(f"job {item}")
    time.sleep(work_ms / 1000)
    with ctx.transaction() as tx:
        if sqljobs.idempotent(tx, f"chaos:{item}"):
            _insert(tx, "chaos_effects", item)
        _insert(tx, "chaos_fenced", ctx.job_id, ctx.token)


@app.periodic(every=TICK_EVERY, name="chaos_tick")
def tick(ctx: sqljobs.JobContext) -> None:
    """A schedule ticking throughout: its job key names the tick time, and the effect is
    written once per tick."""
    key = ctx.key or f"no-key-{ctx.job_id}"
    _log_start(f"tick {key}")
    with ctx.transaction() as tx:
        if sqljobs.idempotent(tx, f"chaos:{key}"):
            _insert(tx, "chaos_ticks", key)


def prepare(url: str) -> None:
    """Migrate the database and create the effect tables."""
    setup = sqljobs.App(url)
    try:
        setup.migrate()
    finally:
        setup.close()
    if url.startswith("sqlite"):
        with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
            for ddl in EFFECTS_DDL:
                conn.execute(ddl)
    else:
        import psycopg

        with psycopg.connect(url, autocommit=True) as conn:
            for ddl in EFFECTS_DDL:
                conn.execute(ddl)
