"""What ``app.stats()`` costs with a million finished jobs kept, against the count it replaced.

    python benchmarks/stats_cost.py [--done 1000000] [--pending 10000] [--runs 7]
                                    [--only sqlite|postgres]

Every ``/metrics`` scrape, dashboard refresh and ``sqljobs stats`` calls ``app.stats()``,
and the jobs table keeps every finished job until the pruner takes it. Until migrations
0005 (SQLite) and 0006 (PostgreSQL) the counts were one ``count(*) ... GROUP BY queue,
state`` over the whole table, and the oldest due job and the pending jobs by task two more
statements that read every row to find the pending ones. They are kept below, as they
were, to compare with.

Each database is fresh (a temporary SQLite file; a scratch PostgreSQL database on
``BENCH_PG_URL``, else ``SQLJOBS_TEST_PG``, dropped afterwards) and filled by bulk SQL, not
the enqueue API: DONE done jobs and PENDING due pending ones, spread over three queues.
PostgreSQL is measured twice: straight after the load, before any vacuum (no page is
marked all-visible yet, so an index-only scan still visits the table), and after the
VACUUM ANALYZE that autovacuum soon runs on a table in service. Each figure is the median
of RUNS timings taken round by round (old, then new), so the machine's noise hits both
alike; on a shared machine single figures move, the ratios less so.
Target: ``stats()`` under 20 ms at 1,000,000 done and 10,000 pending.
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pg_server
from common import log, scratch_dir

import sqljobs

QUEUES = ("default", "mail", "reports")
TARGET_MS = 20.0

OLD_COUNT = "SELECT queue, state, count(*) AS jobs FROM sqljobs_jobs GROUP BY queue, state"
"""The statement ``stats()`` counted with before (the same on both engines): every row of
the table, on every scrape."""

OLD_REST = {
    "sqlite": [
        "SELECT queue, :now - min(run_at) AS age FROM sqljobs_jobs "
        "WHERE state = 'pending' AND run_at <= :now GROUP BY queue",
        "SELECT task, count(*) AS pending FROM sqljobs_jobs WHERE state = 'pending' GROUP BY task",
    ],
    "postgres": [
        "SELECT queue, extract(epoch FROM now() - min(run_at))::float8 AS age "
        "FROM sqljobs_jobs WHERE state = 'pending' AND run_at <= now() GROUP BY queue",
        "SELECT task, count(*) AS pending FROM sqljobs_jobs WHERE state = 'pending' GROUP BY task",
    ],
}
"""The old ``stats()``'s two other statements on the jobs table (the oldest due job, the
pending jobs by task): no index served ``state = 'pending'`` alone, so both read it whole."""

SQLITE_FILL = """
INSERT INTO sqljobs_jobs (queue, task, payload, state, run_at, created_at, finished_at,
                          max_attempts, lease)
SELECT json_extract(:queues, '$[' || (i % 3) || ']'), 'task' || (i % 7), '[]', :state,
       :now - 3600 - i / 1000.0, :now - 3600,
       CASE WHEN :state = 'pending' THEN NULL ELSE :now - i / 1000.0 END, 5, 30
FROM (WITH RECURSIVE n (i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < :n)
      SELECT i FROM n)
"""

PG_FILL = """
INSERT INTO sqljobs_jobs (queue, task, payload, state, run_at, finished_at, max_attempts,
                          lease)
SELECT (%(queues)s::text[])[i %% 3 + 1], 'task' || (i %% 7), '[]', %(state)s,
       now() - interval '1 hour' - make_interval(secs => i / 1000.0),
       CASE WHEN %(state)s = 'pending' THEN NULL ELSE now() - make_interval(secs => i / 1000.0)
       END, 5, 30
FROM generate_series(1, %(n)s) AS i
"""


@dataclass
class Figures:
    """One database's medians, in milliseconds, and what stats() said."""

    db: str
    old_count: float
    old_all: float
    new: float
    said: str

    def row(self) -> str:
        met = "PASS" if self.new < TARGET_MS else "MISS"
        return (
            f"{self.db:<22} {self.old_count:>10.1f} {self.old_all:>10.1f} {self.new:>10.2f} "
            f"{self.old_count / self.new:>8.0f}x {self.old_all / self.new:>8.0f}x   {met}"
        )


def timed(work: Callable[[], Any], runs: list[float]) -> None:
    """Run ``work`` once and add how long it took, in ms, to ``runs``."""
    started = time.perf_counter()
    work()
    runs.append((time.perf_counter() - started) * 1000)


def measure(label: str, dialect: str, app: sqljobs.App, rounds: int) -> Figures:
    """Time the old statements and the new ``app.stats()``, round by round, each on one
    of the app's own connections (its session settings), reading every row."""
    params = {"now": time.time()} if dialect == "sqlite" else {}

    def run(sql: str) -> None:
        app.backend.read(lambda conn: conn.execute(sql, params).fetchall())

    def old_stats() -> None:
        for sql in (OLD_COUNT, *OLD_REST[dialect]):
            run(sql)

    old_count: list[float] = []
    old_all: list[float] = []
    new: list[float] = []
    app.stats()  # warm: connections, statement caches, pages
    run(OLD_COUNT)
    for _ in range(rounds):
        timed(lambda: run(OLD_COUNT), old_count)
        timed(old_stats, old_all)
        timed(app.stats, new)
    st = app.stats()
    said = ", ".join(f"{s} {st.count_text(s)}" for s in ("pending", "running", "done", "dead"))
    med = statistics.median
    return Figures(label, med(old_count), med(old_all), med(new), said)


@contextmanager
def sqlite_app(done: int, pending: int) -> Iterator[sqljobs.App]:
    """A fresh SQLite file holding ``done`` done and ``pending`` pending jobs."""
    with scratch_dir() as folder:
        path = folder / "jobs.db"
        app = sqljobs.App(f"sqlite:///{path}")
        app.migrate()
        started = time.perf_counter()
        conn = sqlite3.connect(path, isolation_level=None)
        params: dict[str, Any] = {"queues": _json_list(QUEUES), "now": time.time()}
        conn.execute("BEGIN")
        conn.execute(SQLITE_FILL, {**params, "state": "done", "n": done})
        conn.execute(SQLITE_FILL, {**params, "state": "pending", "n": pending})
        conn.execute("COMMIT")
        conn.close()
        log(f"SQLite: {done:,} done + {pending:,} pending in {time.perf_counter() - started:.1f} s")
        try:
            yield app
        finally:
            app.close()


@contextmanager
def postgres_app(done: int, pending: int) -> Iterator[tuple[sqljobs.App, Callable[[], None]]]:
    """A scratch PostgreSQL database holding the jobs, with autovacuum held off, and a
    function that vacuums and analyses it as autovacuum would."""
    import psycopg

    with pg_server.scratch_db("stats") as url:
        app = sqljobs.App(url)
        app.migrate()
        started = time.perf_counter()
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("ALTER TABLE sqljobs_jobs SET (autovacuum_enabled = false)")
            conn.execute(PG_FILL, {"queues": list(QUEUES), "state": "done", "n": done})
            conn.execute(PG_FILL, {"queues": list(QUEUES), "state": "pending", "n": pending})
        log(f"PostgreSQL: {done:,} done + {pending:,} pending in "
            f"{time.perf_counter() - started:.1f} s")  # fmt: skip

        def vacuum() -> None:
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute("VACUUM ANALYZE sqljobs_jobs")

        try:
            yield app, vacuum
        finally:
            app.close()


def _json_list(values: tuple[str, ...]) -> str:
    return "[" + ", ".join(f'"{v}"' for v in values) + "]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--done", type=int, default=1_000_000)
    parser.add_argument("--pending", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--only", choices=["sqlite", "postgres"])
    args = parser.parse_args()
    rows: list[Figures] = []
    if args.only in (None, "sqlite"):
        with sqlite_app(args.done, args.pending) as app:
            rows.append(measure("sqlite", "sqlite", app, args.runs))
    if args.only in (None, "postgres"):
        why_not = pg_server.unreachable()
        if why_not:
            log(f"PostgreSQL skipped: {why_not}")
        else:
            with postgres_app(args.done, args.pending) as (app, vacuum):
                rows.append(measure("postgres, before vacuum", "postgres", app, args.runs))
                vacuum()
                rows.append(measure("postgres", "postgres", app, args.runs))
    print(
        f"stats() with {args.done:,} done + {args.pending:,} pending jobs in {len(QUEUES)} "
        f"queues: median of {args.runs} runs, ms; target new < {TARGET_MS:g} ms"
    )
    print(
        f"{'db':<22} {'old count':>10} {'old all 3':>10} {'new':>10} {'count/new':>9} "
        f"{'all/new':>9}   target"
    )
    for figures in rows:
        print(figures.row())
    for figures in rows:
        print(f"{figures.db}: stats() said {figures.said}")


if __name__ == "__main__":
    main()
