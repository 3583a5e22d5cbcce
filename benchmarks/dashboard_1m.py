"""How fast every dashboard page and JSON endpoint answers with a million jobs in the table.

    python benchmarks/dashboard_1m.py [--jobs 1000000] [--runs 5] [--only sqlite|postgres]

Issue 14 asks that every page and JSON endpoint answer within 100 ms with 1M jobs in the
table, on both backends. Each database is fresh (a temporary SQLite file; a scratch
PostgreSQL database, vacuumed and analysed as autovacuum would after such a load) and
filled by bulk SQL with a mix like a queue in service: mostly done jobs, some dead (with a
traceback) and cancelled, a backlog of pending ones, a few running, in five queues and
twenty tasks, one job in ten with a key. One live worker is registered so the workers page
has a row.

The dashboard runs in-process (Starlette's TestClient, the same ASGI app ``sqljobs
dashboard`` serves), so a figure is the server's whole answer: routing, the security
checks, the facade's queries and the rendering, without a socket. Each URL is asked once
to warm up, then RUNS times round by round (every URL in turn, so the machine's noise hits
all alike); the table prints the median and the slowest of those, measured here, and
whether the slowest stayed under the target. A URL the dashboard does not serve (404) is
listed as such.
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pg_server
from common import log, scratch_dir

import sqljobs
from sqljobs.backends.base import WorkerInfo

TARGET_MS = 100.0
QUEUES = ("default", "mail", "reports", "billing", "exports")

# The mix, by i % 1000: 10 dead, 10 cancelled, 20 pending, the rest done; and 5 running
# jobs at the newest end. Keys on every tenth job.
SQLITE_FILL = """
INSERT INTO sqljobs_jobs (queue, task, payload, key, state, run_at, created_at, started_at,
                          finished_at, attempts, max_attempts, lease, last_error,
                          last_traceback, history)
SELECT json_extract(:queues, '$[' || (i % 5) || ']'), 'task' || (i % 20),
       '{"args":["user' || i || '@example.org",' || i || '],"kwargs":{}}',
       CASE WHEN i % 10 = 0 THEN 'key-' || i END,
       CASE WHEN i % 1000 < 10 THEN 'dead' WHEN i % 1000 < 20 THEN 'cancelled'
            WHEN i % 1000 < 40 THEN 'pending' ELSE 'done' END,
       :now - (:n - i) / 100.0, :now - (:n - i) / 100.0 - 1, :now - (:n - i) / 100.0,
       CASE WHEN i % 1000 BETWEEN 20 AND 39 THEN NULL ELSE :now - (:n - i) / 100.0 + 0.05 END,
       1, 3, 30,
       CASE WHEN i % 1000 < 10 THEN 'ValueError: no such customer ' || i END,
       CASE WHEN i % 1000 < 10 THEN 'Traceback (most recent call last):' || char(10) ||
            '  File "app.py", line 12, in charge' || char(10) ||
            'ValueError: no such customer ' || i END,
       '[]'
FROM (WITH RECURSIVE n (i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < :n)
      SELECT i FROM n)
"""

PG_FILL = """
INSERT INTO sqljobs_jobs (queue, task, payload, key, state, run_at, created_at, started_at,
                          finished_at, attempts, max_attempts, lease, last_error,
                          last_traceback)
SELECT (%(queues)s::text[])[i %% 5 + 1], 'task' || (i %% 20),
       '{"args":["user' || i || '@example.org",' || i || '],"kwargs":{}}',
       CASE WHEN i %% 10 = 0 THEN 'key-' || i END,
       CASE WHEN i %% 1000 < 10 THEN 'dead' WHEN i %% 1000 < 20 THEN 'cancelled'
            WHEN i %% 1000 < 40 THEN 'pending' ELSE 'done' END,
       t, t - interval '1 second', t,
       CASE WHEN i %% 1000 BETWEEN 20 AND 39 THEN NULL ELSE t + interval '50 ms' END,
       1, 3, 30,
       CASE WHEN i %% 1000 < 10 THEN 'ValueError: no such customer ' || i END,
       CASE WHEN i %% 1000 < 10 THEN 'Traceback (most recent call last):' || chr(10) ||
            '  File "app.py", line 12, in charge' || chr(10) ||
            'ValueError: no such customer ' || i END
FROM generate_series(1, %(n)s) AS i,
     LATERAL (SELECT now() - make_interval(secs => (%(n)s - i) / 100.0)) AS at(t)
"""

RUNNING = (
    "UPDATE sqljobs_jobs SET state = 'running', worker = {w}, lease_until = {until} "
    "WHERE id > {top} - 5"
)


def urls(total: int) -> list[str]:
    """What an operator opens on a bad day, and what scripts and Prometheus poll."""
    dead = 1000 * (total // 2000)  # i % 1000 == 0: a dead job half-way down
    return [
        "/",
        "/jobs",
        "/jobs?state=dead",
        "/jobs?state=pending",
        "/jobs?queue=mail",
        "/jobs?task=task7",
        "/jobs?key=key-500000",
        f"/jobs?text=user{total - 3}@",
        f"/jobs?before={total // 2}",
        "/jobs?state=dead&queue=billing&task=task3",
        "/jobs?state=done&since=2h&until=1h",
        "/jobs/confirm?action=retry&state=dead",
        "/jobs/confirm?action=cancel&queue=mail&task=task2",
        f"/jobs/{dead}",
        "/queues",
        "/schedules",
        "/workers",
        "/api/stats",
        "/api/queues",
        "/api/jobs",
        "/api/jobs?state=dead",
        "/api/jobs?text=user12345@",
        "/api/workers",
        "/api/schedules",
        f"/api/jobs/{dead}",
        "/metrics",
    ]


def facade_calls(total: int) -> dict[str, Any]:
    """The facade's reads the pages make, by themselves: where a slow page spends."""
    from sqljobs import JobFilter as F

    return {
        "find_jobs()": lambda app: app.find_jobs(),
        "find_jobs(state=dead)": lambda app: app.find_jobs(F(state="dead")),
        "find_jobs(state=pending)": lambda app: app.find_jobs(F(state="pending")),
        "find_jobs(queue=mail)": lambda app: app.find_jobs(F(queue="mail")),
        "find_jobs(task=task7)": lambda app: app.find_jobs(F(task="task7")),
        "find_jobs(dead,billing,task3)": lambda app: app.find_jobs(
            F(state="dead", queue="billing", task="task3")
        ),
        "find_jobs(text)": lambda app: app.find_jobs(F(text=f"user{total - 3}@")),
        "find_jobs(before=half)": lambda app: app.find_jobs(before=total // 2),
        "find_jobs(since=1 min ago)": lambda app: app.find_jobs(F(since=time.time() - 60)),
        "count_jobs()": lambda app: app.count_jobs(),
        "count_jobs(state=dead)": lambda app: app.count_jobs(F(state="dead")),
        "count_jobs(task=task7)": lambda app: app.count_jobs(F(task="task7")),
        "count_jobs(state=pending)": lambda app: app.count_jobs(F(state="pending")),
        "count_jobs(task7, mail: none)": lambda app: app.count_jobs(F(task="task7", queue="mail")),
        "count_jobs(text)": lambda app: app.count_jobs(F(text=f"user{total - 3}@")),
        "workers()": lambda app: app.workers(),
        "job_children(1)": lambda app: app.job_children(1),
    }


def measure_facade(label: str, app: sqljobs.App, total: int, runs: int) -> list[str]:
    calls = facade_calls(total)
    times: dict[str, list[float]] = {name: [] for name in calls}
    for call in calls.values():
        call(app)
    for _ in range(runs):
        for name, call in calls.items():
            started = time.perf_counter()
            call(app)
            times[name].append((time.perf_counter() - started) * 1000)
    return [
        f"{label:<10} {name:<52} {statistics.median(t):>9.1f} {max(t):>9.1f}   "
        f"{'PASS' if max(t) < TARGET_MS else 'MISS'}"
        for name, t in times.items()
    ]


def measure(label: str, app: sqljobs.App, total: int, runs: int) -> list[str]:
    from starlette.testclient import TestClient

    from sqljobs.dashboard import create_app

    client = TestClient(create_app(app), base_url="http://127.0.0.1")
    times: dict[str, list[float]] = {}
    status: dict[str, int] = {}
    for url in urls(total):
        status[url] = client.get(url).status_code  # warm: connections, caches, pages
        times[url] = []
    for _ in range(runs):
        for url in times:
            started = time.perf_counter()
            client.get(url)
            times[url].append((time.perf_counter() - started) * 1000)
    rows = []
    for url, taken in times.items():
        if status[url] == 404:
            rows.append(f"{label:<10} {url:<52} {'not served (404)':>24}")
            continue
        worst = max(taken)
        met = "PASS" if worst < TARGET_MS else "MISS"
        rows.append(
            f"{label:<10} {url:<52} {statistics.median(taken):>9.1f} {worst:>9.1f}   "
            f"{met}  ({status[url]})"
        )
    return rows


def _register_worker(app: sqljobs.App) -> None:
    app.backend.register_worker(
        WorkerInfo("bench-worker", "bench-host", 4242, ["default", "mail"], 8, 5.0)
    )


@contextmanager
def sqlite_app(total: int) -> Iterator[sqljobs.App]:
    with scratch_dir() as folder:
        path = folder / "jobs.db"
        app = sqljobs.App(f"sqlite:///{path}")
        app.migrate()
        started = time.perf_counter()
        conn = sqlite3.connect(path, isolation_level=None)
        params: dict[str, Any] = {"queues": _json_list(QUEUES), "now": time.time(), "n": total}
        conn.execute("BEGIN")
        conn.execute(SQLITE_FILL, params)
        until = time.time() + 3600
        conn.execute(RUNNING.format(w="'bench-worker'", until=until, top=total))
        conn.execute("COMMIT")
        conn.execute("ANALYZE")
        conn.close()
        log(f"SQLite: {total:,} jobs in {time.perf_counter() - started:.1f} s")
        _register_worker(app)
        try:
            yield app
        finally:
            app.close()


@contextmanager
def postgres_app(total: int) -> Iterator[sqljobs.App]:
    import psycopg

    with pg_server.scratch_db("dash") as url:
        app = sqljobs.App(url)
        app.migrate()
        started = time.perf_counter()
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(PG_FILL, {"queues": list(QUEUES), "n": total})
            until = "now() + interval '1 hour'"
            conn.execute(RUNNING.format(w="'bench-worker'", until=until, top=total))
            conn.execute("VACUUM ANALYZE sqljobs_jobs")
        log(f"PostgreSQL: {total:,} jobs in {time.perf_counter() - started:.1f} s")
        _register_worker(app)
        try:
            yield app
        finally:
            app.close()


def _json_list(values: tuple[str, ...]) -> str:
    return "[" + ", ".join(f'"{v}"' for v in values) + "]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--only", choices=["sqlite", "postgres"])
    args = parser.parse_args()
    rows: list[str] = []
    if args.only in (None, "sqlite"):
        with sqlite_app(args.jobs) as app:
            rows += measure("sqlite", app, args.jobs, args.runs)
            rows += measure_facade("sqlite", app, args.jobs, args.runs)
    if args.only in (None, "postgres"):
        why_not = pg_server.unreachable()
        if why_not:
            log(f"PostgreSQL skipped: {why_not}")
        else:
            with postgres_app(args.jobs) as app:
                rows += measure("postgres", app, args.jobs, args.runs)
                rows += measure_facade("postgres", app, args.jobs, args.runs)
    print(
        f"dashboard with {args.jobs:,} jobs: ms per request, median and slowest of "
        f"{args.runs}; target slowest < {TARGET_MS:g} ms"
    )
    print(f"{'db':<10} {'url':<52} {'median':>9} {'slowest':>9}   target (status)")
    for row in rows:
        print(row)


if __name__ == "__main__":
    main()
