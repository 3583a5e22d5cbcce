"""The PostgreSQL half: sqljobs beside pgqueuer and procrastinate, and beside what the server
does with no queue library (pgbench, a bare psycopg loop), so our drain reads as a fraction
of what this box can do at all.

Every repetition runs in its own scratch database. Without a server every row is SKIPPED;
without a peer installed, its rows are.
"""

from __future__ import annotations

from collections.abc import Callable

import bare_loops
import pg_server as server
import sqljobs_cases as sq
from common import Case, Row, Sample, Target, collect, peer

DB = "PostgreSQL"
DRAIN_JOBS = 10_000
PGQUEUER_JOBS = 10_000
PGQUEUER_DEFAULTS_JOBS = 5_000
PROCRASTINATE_JOBS = 2_000  # 10,000 take 20 s; fewer flatter it (it slows as its table grows)
BARE_JOBS = 20_000
PGBENCH_SECONDS = 5
ENQUEUE_JOBS = 10_000
ARTICLE_JOBS = 200
SCALING_JOBS = 10_000  # stats() counts up to 10,000 a state: drain_processes reads them
LATENCY_JOBS = 200
IDLE_SECONDS = 10.0
IDLE_SETTLE = 6.0  # PostgreSQL flushes a backend's start-up statistics up to ~5 s late


def in_db(tag: str, body: Callable[[str], Sample]) -> Case:
    """A case that runs ``body`` on the URL of a fresh scratch database."""

    def case() -> Sample:
        with server.scratch_db(tag) as url:
            return body(url)

    return case


def drain(runs: int) -> list[Row]:
    """Drain no-op jobs at concurrency 8; the physical references in the same rounds."""
    pgq, no_pgq = peer("pgqueuer")
    procr, no_procr = peer("procrastinate")
    no_pgbench = server.pgbench_missing()
    r = collect(DB, "drain no-op, c=8", runs, {
        "sqljobs": in_db("drain", lambda url: sq.drain(url, DRAIN_JOBS)),
        "sqljobs prefetch=32": in_db("drain32",
                                     lambda url: sq.drain(url, DRAIN_JOBS, prefetch=32)),
        "pgqueuer": no_pgq or in_db("pgq", lambda url: pgq.drain(url, PGQUEUER_JOBS)),
        "pgqueuer defaults": no_pgq or in_db(
            "pgqdef", lambda url: pgq.drain(url, PGQUEUER_DEFAULTS_JOBS, None)),
        "procrastinate": no_procr or in_db(
            "proc", lambda url: procr.drain(url, PROCRASTINATE_JOBS)),
        "pgbench": no_pgbench or in_db("pgbench",
                                       lambda url: server.pgbench_update(url, 8, PGBENCH_SECONDS)),
        "bare": in_db("bare", lambda url: bare_loops.postgres_drain(url, BARE_JOBS)),
    })  # fmt: skip
    ours = r.row("sqljobs", "sqljobs Worker (defaults)", target=Target(">=", 8_000),
                 note=f"{DRAIN_JOBS:,}; worker start -> last outcome committed")  # fmt: skip
    tuned = r.row("sqljobs prefetch=32", "sqljobs Worker, prefetch=32",
                  note="8 + 32 held, 20 a lane (default: up to 8 + 128)")  # fmt: skip
    pgqueuer = r.row("pgqueuer", "pgqueuer, 8 in flight", note=f"{PGQUEUER_JOBS:,}; "
                     "max_concurrent_tasks=8, batch_size=4; start -> last handler")  # fmt: skip
    pgq_defaults = r.row("pgqueuer defaults", "pgqueuer, its defaults", note=(
        f"{PGQUEUER_DEFAULTS_JOBS:,}; batch_size=10, no in-flight cap"))  # fmt: skip
    procrastinate = r.row("procrastinate", "procrastinate, concurrency=8", note=(
        f"{PROCRASTINATE_JOBS:,}; async task; start -> last handler"))  # fmt: skip
    pgbench = r.row("pgbench", "pgbench 1-row UPDATE, 8 clients", "tps", "tx/s", note=(
        f"-c 8 -j 2 -T {PGBENCH_SECONDS}; one commit per transaction"))  # fmt: skip
    bare = r.row("bare", "bare psycopg loop, 8 connections", note=(
        f"{BARE_JOBS:,}; SKIP LOCKED claim 100 + complete 100 a statement"))  # fmt: skip
    return [
        ours, tuned, pgqueuer, pgq_defaults, procrastinate, pgbench, bare,
        r.row("sqljobs", "sqljobs claim statements", "claims", "claims",
              note=f"for {DRAIN_JOBS:,} jobs (defaults)"),
        r.ratio("sqljobs / pgqueuer", ours, pgqueuer, target=Target(">=", 5)),
        r.ratio("sqljobs / pgqueuer (its defaults)", ours, pgq_defaults),
        r.ratio("sqljobs / procrastinate", ours, procrastinate, target=Target(">=", 25)),
        r.ratio("sqljobs / pgbench tx/s", ours, pgbench, "%", note="jobs/s per tx/s"),
        r.ratio("sqljobs / bare loop", ours, bare, "%"),
        r.ratio("sqljobs prefetch=32 / bare loop", tuned, bare, "%"),
    ]  # fmt: skip


def enqueue(runs: int) -> list[Row]:
    """Bulk enqueue 10,000 jobs in one call."""
    pgq, no_pgq = peer("pgqueuer")
    procr, no_procr = peer("procrastinate")
    n = ENQUEUE_JOBS
    r = collect(DB, f"bulk enqueue {n // 1000}k", runs, {
        "sqljobs": in_db("enq", lambda url: sq.enqueue_many(url, n)),
        "pgqueuer": no_pgq or in_db("pgqenq", lambda url: pgq.enqueue(url, n)),
        "procrastinate": no_procr or in_db("procenq", lambda url: procr.enqueue(url, n)),
    })  # fmt: skip
    ours = r.row("sqljobs", "sqljobs enqueue_many", target=Target(">=", 50_000),
                 note="one statement, one transaction")  # fmt: skip
    pgqueuer = r.row("pgqueuer", "pgqueuer Queries.enqueue(lists)")
    procrastinate = r.row("procrastinate", "procrastinate batch_defer_async")
    return [ours, pgqueuer, procrastinate, r.ratio("sqljobs / pgqueuer", ours, pgqueuer),
            r.ratio("sqljobs / procrastinate", ours, procrastinate)]  # fmt: skip


def article(runs: int) -> list[Row]:
    """The reference article: 200 jobs of 2 ms on an idle worker at concurrency 8."""
    r = collect(
        DB,
        f"{ARTICLE_JOBS} x 2 ms jobs, c=8",
        runs,
        {"sqljobs": in_db("article", lambda url: sq.article(url, ARTICLE_JOBS))},
    )
    return [
        r.row("sqljobs", "sqljobs enqueue done -> all done", "after_enqueue_ms", "ms",
              Target("<", 80), "article: 113 ms (Go, SQLite); ideal 50 ms"),
        r.row("sqljobs", "sqljobs enqueue start -> all done", "total_ms", "ms",
              note="includes one enqueue_many of 200"),
    ]  # fmt: skip


def latency(runs: int) -> list[Row]:
    """Enqueue-to-start across processes (LISTEN/NOTIFY), and what an idle worker costs."""

    def body(url: str) -> Sample:
        return sq.idle_then_latency(url, LATENCY_JOBS, idle=IDLE_SECONDS, settle=IDLE_SETTLE,
                                    queries=lambda: server.transactions(url))  # fmt: skip

    r = collect(DB, "latency, idle; CLI worker", runs, {"sqljobs": in_db("latency", body)})
    note = f"{LATENCY_JOBS} single enqueues 20 ms apart; includes the enqueue"
    idle_note = (f"pg_stat_database transactions over {IDLE_SECONDS:g} s, {IDLE_SETTLE:g} s "
                 "after start-up, the worker alone on its database")  # fmt: skip
    return [
        r.row("sqljobs", "enqueue -> start p50", "p50_ms", "ms", Target("<", 3), note),
        r.row("sqljobs", "enqueue -> start p99", "p99_ms", "ms", Target("<", 10)),
        r.row("sqljobs", "enqueue -> start max", "max_ms", "ms"),
        r.row("sqljobs", "enqueue() call p50", "enqueue_p50_ms", "ms",
              note="INSERT + NOTIFY, one durable commit"),
        r.row("sqljobs", "commit -> start p50", "commit_p50_ms", "ms", Target("<", 1),
              "from enqueue() returning: the NOTIFY, the claim, the hand-off"),
        r.row("sqljobs", "commit -> start p99", "commit_p99_ms", "ms"),
        r.row("sqljobs", "done -> result() p50", "result_p50_ms", "ms", Target("<", 5),
              f"{LATENCY_JOBS // 4} jobs, a caller here waiting on each"),
        r.row("sqljobs", "done -> result() p99", "result_p99_ms", "ms"),
        r.row("sqljobs", "idle worker: transactions/s", "idle_queries_per_s", "xact/s",
              Target("<=", 1), idle_note),
        r.row("sqljobs", "idle worker: CPU", "idle_cpu_pct", "%", note="from /proc"),
    ]  # fmt: skip


def startup(runs: int) -> list[Row]:
    """A worker process that has only imported sqljobs, to its first job and to the end
    of the article's workload enqueued before it started: from its run_worker() call (the
    driver's import, connection, registration and first claim) and from its launch."""
    r = collect(DB, "worker start-up", runs, {"sqljobs": in_db("startup", sq.startup)})
    return [
        r.row("sqljobs", "run_worker() -> first job", "first_job_ms", "ms", Target("<", 15),
              "a process that only imported sqljobs: driver import, connect, register, claim"),
        r.row("sqljobs", "process launch -> first job", "first_job_from_launch_ms", "ms",
              note="from the parent's clock before spawning: interpreter, import sqljobs"),
        r.row("sqljobs", "run_worker() -> article done", "article_from_start_ms", "ms",
              Target("<", 80), "200 jobs of 2 ms enqueued before the worker started"),
        r.row("sqljobs", "process launch -> article done", "article_from_start_from_launch_ms",
              "ms"),
    ]  # fmt: skip


def scaling(runs: int) -> list[Row]:
    """``async def`` beside ``def`` no-op jobs, and ``--processes 2`` beside 1."""
    return sq.scaling(DB, runs, in_db, SCALING_JOBS)


def workflows(runs: int) -> list[Row]:
    """Durable workflows (workflows.py): 1,000 of 10 no-op steps beside DBOS and Absurd,
    emit -> resume, and an idle worker with 10,000 parked."""
    import workflows as wf

    return wf.rows("postgres", runs)


BENCHMARKS: dict[str, Callable[[int], list[Row]]] = {
    "drain": drain,
    "enqueue": enqueue,
    "article": article,
    "latency": latency,
    "startup": startup,
    "scaling": scaling,
    "workflows": workflows,
}


def unavailable() -> str:
    """Why this half cannot run here ("" if it can): no server to talk to."""
    return server.unreachable()
