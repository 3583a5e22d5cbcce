"""The SQLite half: sqljobs beside huey's SqliteHuey and a bare sqlite3 loop.

Every repetition runs on a fresh temporary SQLite file (WAL).
"""

from __future__ import annotations

from collections.abc import Callable

import bare_loops
import sqljobs_cases as sq
from common import Case, Row, Sample, Target, collect, peer, scratch_dir

DB = "SQLite"
DRAIN_JOBS = 10_000
ENQUEUE_JOBS = 10_000
LOOP_JOBS = 2_000  # single commits: the rate does not depend on the count
ARTICLE_JOBS = 200
SCALING_JOBS = 10_000  # stats() counts up to 10,000 a state: drain_processes reads them
LATENCY_JOBS = 200
IDLE_SECONDS = 3.0


def on_file(body: Callable[[str], Sample]) -> Case:
    """A case that runs ``body`` on the URL of a fresh SQLite file."""

    def case() -> Sample:
        with scratch_dir() as folder:
            return body(f"sqlite:///{folder / 'jobs.db'}")

    return case


def drain(runs: int) -> list[Row]:
    """Drain 10,000 pre-enqueued no-op jobs at concurrency 8."""
    n = DRAIN_JOBS
    peer_huey, missing = peer("huey")
    r = collect(DB, f"drain {n // 1000}k no-op, c=8", runs, {
        "sqljobs": on_file(lambda url: sq.drain(url, n)),
        "sqljobs prefetch=32": on_file(lambda url: sq.drain(url, n, prefetch=32)),
        "huey": missing or (lambda: peer_huey.drain(n)),
        "bare": lambda: bare_loops.sqlite_drain(n),
    })  # fmt: skip
    ours = r.row("sqljobs", "sqljobs Worker (defaults)", target=Target(">=", 10_000),
                 note="worker start -> last outcome committed")  # fmt: skip
    tuned = r.row("sqljobs prefetch=32", "sqljobs Worker, prefetch=32",
                  note="8 + 32 jobs a claim (default: up to 8 + 64)")  # fmt: skip
    huey = r.row("huey", "huey SqliteHuey, 8 threads", note="consumer start -> last handler")
    bare = r.row("bare", "bare sqlite3 loop", note="1 thread, claim 100 + complete 100 a statement")
    return [
        ours, tuned, huey, bare,
        r.row("sqljobs", "sqljobs claim statements", "claims", "claims",
              note=f"for {n:,} jobs (defaults)"),
        r.ratio("sqljobs / huey", ours, huey, target=Target(">=", 6)),
        r.ratio("sqljobs prefetch=32 / huey", tuned, huey),
        r.ratio("sqljobs / bare loop", ours, bare, "%"),
    ]  # fmt: skip


def enqueue(runs: int) -> list[Row]:
    """Enqueue: one enqueue_many of 10,000, and loops of single durable enqueues."""
    peer_huey, missing = peer("huey")
    r = collect(DB, "enqueue", runs, {
        "sqljobs many": on_file(lambda url: sq.enqueue_many(url, ENQUEUE_JOBS)),
        "sqljobs loop": on_file(lambda url: sq.enqueue_loop(url, LOOP_JOBS)),
        "huey loop": missing or (lambda: peer_huey.enqueue_loop(LOOP_JOBS)),
    })  # fmt: skip
    bulk = r.row("sqljobs many", f"sqljobs enqueue_many({ENQUEUE_JOBS:,})",
                 target=Target(">=", 30_000), note="one transaction")  # fmt: skip
    single = r.row("sqljobs loop", f"sqljobs enqueue() x {LOOP_JOBS:,}",
                   note="one durable commit each (synchronous=FULL)")  # fmt: skip
    huey = r.row("huey loop", f"huey task() x {LOOP_JOBS:,}", note="huey has no bulk enqueue")
    return [bulk, single, huey,
            r.ratio("enqueue_many / huey loop", bulk, huey),
            r.ratio("enqueue() loop / huey loop", single, huey)]  # fmt: skip


def article(runs: int) -> list[Row]:
    """The reference article: 200 jobs of 2 ms on an idle worker at concurrency 8."""
    peer_huey, missing = peer("huey")
    r = collect(DB, f"{ARTICLE_JOBS} x 2 ms jobs, c=8", runs, {
        "sqljobs": on_file(lambda url: sq.article(url, ARTICLE_JOBS)),
        "huey": missing or (lambda: peer_huey.article(ARTICLE_JOBS)),
    })  # fmt: skip
    return [
        r.row("sqljobs", "sqljobs enqueue done -> all done", "after_enqueue_ms", "ms",
              Target("<", 80), "article: 113 ms (Go); ideal 50 ms"),
        r.row("sqljobs", "sqljobs enqueue start -> all done", "total_ms", "ms",
              note="includes one enqueue_many of 200"),
        r.row("huey", "huey enqueue start -> all done", "total_ms", "ms",
              note="200 single enqueues; jobs run meanwhile"),
    ]  # fmt: skip


def latency(runs: int) -> list[Row]:
    """Enqueue-to-start across processes, and what an idle worker process costs: woken by
    a datagram after each commit (the default) beside the change counter read every 2 ms
    (``?listen=false``, the fallback where no socket can be bound)."""

    def body(listen: bool) -> Case:
        suffix = "" if listen else "?listen=false"
        return on_file(lambda url: sq.idle_then_latency(url + suffix, LATENCY_JOBS,
                                                          idle=IDLE_SECONDS))  # fmt: skip

    r = collect(DB, "latency, idle; CLI worker", runs, {
        "sqljobs": body(listen=True),
        "sqljobs poll": body(listen=False),
    })  # fmt: skip
    note = f"{LATENCY_JOBS} single enqueues 20 ms apart; includes the enqueue"
    poll = "?listen=false: data_version read every 2 ms"
    p50 = r.row("sqljobs", "enqueue -> start p50", "p50_ms", "ms", note=note)
    p50_poll = r.row("sqljobs poll", "enqueue -> start p50, polling", "p50_ms", "ms", note=poll)
    idle = r.row("sqljobs", "idle worker: CPU", "idle_cpu_pct", "%", Target("<", 0.2),
                 note=f"over {IDLE_SECONDS:g} s; datagram wake-ups")  # fmt: skip
    idle_poll = r.row("sqljobs poll", "idle worker: CPU, polling", "idle_cpu_pct", "%", note=poll)
    return [
        p50, p50_poll,
        r.row("sqljobs", "enqueue -> start p99", "p99_ms", "ms"),
        r.row("sqljobs poll", "enqueue -> start p99, polling", "p99_ms", "ms"),
        r.row("sqljobs", "enqueue() call p50", "enqueue_p50_ms", "ms",
              note="durable commit: synchronous=FULL, an fdatasync"),
        r.row("sqljobs", "commit -> start p50", "commit_p50_ms", "ms", Target("<", 1),
              "from enqueue() returning: the wake-up, the claim, the hand-off"),
        r.row("sqljobs", "commit -> start p99", "commit_p99_ms", "ms", Target("<", 3)),
        r.row("sqljobs", "done -> result() p50", "result_p50_ms", "ms", Target("<", 5),
              f"{LATENCY_JOBS // 4} jobs, a caller here waiting on each"),
        r.row("sqljobs", "done -> result() p99", "result_p99_ms", "ms"),
        idle, idle_poll,
        r.ratio("start p50: datagram / polling", p50, p50_poll, "%"),
        r.ratio("idle CPU: datagram / polling", idle, idle_poll, "%"),
    ]  # fmt: skip


def startup(runs: int) -> list[Row]:
    """A worker process that has only imported sqljobs, to its first job and to the end
    of the article's workload enqueued before it started: from its run_worker() call (the
    driver's import, connection, registration and first claim) and from its launch."""
    r = collect(DB, "worker start-up", runs, {"sqljobs": on_file(sq.startup)})
    return [
        r.row("sqljobs", "run_worker() -> first job", "first_job_ms", "ms", Target("<", 15),
              "a process that only imported sqljobs: driver import, connect, register, claim"),
        r.row("sqljobs", "process launch -> first job", "first_job_from_launch_ms", "ms",
              note="from the parent's clock before spawning: interpreter, import sqljobs"),
        r.row("sqljobs", "run_worker() -> article done", "article_from_start_ms", "ms",
              note="200 jobs of 2 ms enqueued before the worker started"),
        r.row("sqljobs", "process launch -> article done", "article_from_start_from_launch_ms",
              "ms"),
    ]  # fmt: skip


def scaling(runs: int) -> list[Row]:
    """``async def`` beside ``def`` no-op jobs, and ``--processes 2`` beside 1."""
    return sq.scaling(DB, runs, lambda _tag, body: on_file(body), SCALING_JOBS)


def workflows(runs: int) -> list[Row]:
    """Durable workflows (workflows.py): 1,000 of 10 no-op steps beside DBOS,
    emit -> resume, and an idle worker with 10,000 parked."""
    import workflows as wf

    return wf.rows("sqlite", runs)


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
    """Why this half cannot run here: never (sqlite3 comes with Python)."""
    return ""
