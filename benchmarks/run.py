"""sqljobs SQLite benchmarks, side by side with huey and a bare sqlite3 loop.

    python benchmarks/run.py [--quick] [--only drain,enqueue,article,latency,idle] [--json]

Each benchmark repeats 3 times (1 with ``--quick``), the systems interleaved round by
round so noise on this shared machine hits them alike, and reports medians. Every run uses
a fresh temporary SQLite file. Progress goes to stderr; the table (or JSON) to stdout.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import sqlite3
import sys
import time
import traceback
from collections.abc import Callable
from importlib.metadata import version

import bare
import latency
import peers
import sqlite_bench
from common import Row, Sample, Target, log, median, ratio
from rich.console import Console
from rich.table import Table

Figures = dict[str, list[float]]
Case = Callable[[], Sample]

DRAIN_JOBS = 10_000
ENQUEUE_JOBS = 10_000
ARTICLE_JOBS = 200
LATENCY_JOBS = 200
IDLE_SECONDS = 3.0


def collect(runs: int, cases: dict[str, Case]) -> dict[str, Figures]:
    """Run every case once per round, ``runs`` rounds; a failed run is logged and skipped."""
    out: dict[str, Figures] = {label: {} for label in cases}
    for round_ in range(1, runs + 1):
        for label, case in cases.items():
            gc.collect()
            started = time.perf_counter()
            try:
                sample = case()
            except Exception as exc:
                log(f"  {label} run {round_}/{runs}: FAILED: {exc!r}")
                traceback.print_exc(file=sys.stderr)
                continue
            shown = ", ".join(f"{k}={v:,.4g}" for k, v in sample.items())
            log(f"  {label} run {round_}/{runs}: {shown} ({time.perf_counter() - started:.1f} s)")
            for name, value in sample.items():
                out[label].setdefault(name, []).append(value)
    return out


def figure(bench: str, measure: str, figures: Figures, key: str, unit: str,
           target: Target | None = None, note: str = "") -> Row:  # fmt: skip
    """A row holding the median of one figure (None if every run failed)."""
    runs = figures.get(key, [])
    return Row(bench, measure, median(runs) if runs else None, unit, runs, target, note)


def ratio_row(bench: str, measure: str, top: Row, bottom: Row, unit: str = "x",
              target: Target | None = None, note: str = "") -> Row:  # fmt: skip
    """A row holding the ratio of two medians (``unit`` "%" shows it as a percentage)."""
    value = ratio(top.value, bottom.value)
    if value is not None and unit == "%":
        value *= 100
    return Row(bench, measure, value, unit, [], target, note)


# -- the benchmarks ------------------------------------------------------------------------


def bench_drain(runs: int) -> list[Row]:
    """Drain 10,000 pre-enqueued no-op jobs at concurrency 8."""
    n = DRAIN_JOBS
    got = collect(runs, {
        "sqljobs": lambda: sqlite_bench.drain(n),
        "sqljobs prefetch=8": lambda: sqlite_bench.drain(n, prefetch=8),
        "sqljobs prefetch=16": lambda: sqlite_bench.drain(n, prefetch=16),
        "huey": lambda: peers.drain(n),
        "bare": lambda: bare.drain(n),
    })  # fmt: skip
    b = "drain 10k no-op, c=8"
    sq = figure(b, "sqljobs (default config)", got["sqljobs"], "jobs_per_s", "jobs/s",
                Target(">=", 10_000), "until all outcomes committed")  # fmt: skip
    sq8 = figure(b, "sqljobs prefetch=8", got["sqljobs prefetch=8"], "jobs_per_s", "jobs/s")
    sq16 = figure(b, "sqljobs prefetch=16", got["sqljobs prefetch=16"], "jobs_per_s", "jobs/s")
    hu = figure(b, "huey SqliteHuey, 8 threads", got["huey"], "jobs_per_s", "jobs/s")
    ba = figure(b, "bare sqlite3 loop (100/stmt)", got["bare"], "jobs_per_s", "jobs/s",
                note="1 thread, claim 100 + complete 100 per statement")  # fmt: skip
    claims = figure(b, "sqljobs claim queries", got["sqljobs"], "claims", "claims",
                    note=f"for {n:,} jobs (default config)")  # fmt: skip
    best = max((sq, sq8, sq16), key=lambda r: r.value or 0.0)
    return [
        sq, sq8, sq16, hu, ba, claims,
        ratio_row(b, "sqljobs / huey", sq, hu, target=Target(">=", 6)),
        ratio_row(b, f"best sqljobs ({best.measure.removeprefix('sqljobs ')}) / huey", best, hu),
        ratio_row(b, "sqljobs / bare loop", sq, ba, "%"),
        ratio_row(b, "best sqljobs / bare loop", best, ba, "%"),
    ]  # fmt: skip


def bench_enqueue(runs: int) -> list[Row]:
    """Enqueue 10,000 jobs: one bulk call, a loop of single calls, huey's loop."""
    n = ENQUEUE_JOBS
    got = collect(runs, {
        "sqljobs enqueue_many": lambda: sqlite_bench.enqueue_bulk(n),
        "sqljobs enqueue loop": lambda: sqlite_bench.enqueue_loop(n),
        "huey loop": lambda: peers.enqueue_loop(n),
    })  # fmt: skip
    b = "enqueue 10k"
    bulk = figure(b, "sqljobs enqueue_many", got["sqljobs enqueue_many"], "jobs_per_s",
                  "jobs/s", Target(">=", 30_000), "one transaction")  # fmt: skip
    single = figure(b, "sqljobs enqueue() loop", got["sqljobs enqueue loop"], "jobs_per_s",
                    "jobs/s", note="one durable commit each")  # fmt: skip
    hu = figure(b, "huey task() loop", got["huey loop"], "jobs_per_s", "jobs/s")
    return [
        bulk, single, hu,
        ratio_row(b, "enqueue_many / huey", bulk, hu),
        ratio_row(b, "enqueue_many / enqueue() loop", bulk, single),
        ratio_row(b, "enqueue() loop / huey", single, hu),
    ]  # fmt: skip


def bench_article(runs: int) -> list[Row]:
    """The reference article: 200 jobs of 2 ms on 8 idle workers (ideal 50 ms)."""
    got = collect(runs, {
        "sqljobs": lambda: sqlite_bench.article(ARTICLE_JOBS),
        "sqljobs prefetch=8": lambda: sqlite_bench.article(ARTICLE_JOBS, prefetch=8),
        "huey": lambda: peers.article(ARTICLE_JOBS),
    })  # fmt: skip
    b = "200 x 2 ms jobs, c=8"
    sq = figure(b, "sqljobs enqueue done -> all done", got["sqljobs"], "after_enqueue_ms", "ms",
                Target("<", 80), "article: 113 ms (Go); ideal 50 ms")  # fmt: skip
    sq_total = figure(b, "sqljobs enqueue start -> all done", got["sqljobs"], "total_ms", "ms",
                      note="enqueue_many of 200")  # fmt: skip
    sq8 = figure(b, "sqljobs prefetch=8, enqueue done -> all done", got["sqljobs prefetch=8"],
                 "after_enqueue_ms", "ms")  # fmt: skip
    hu = figure(b, "huey enqueue done -> all done", got["huey"], "after_enqueue_ms", "ms",
                note="jobs run while huey's 200 enqueues go on")  # fmt: skip
    hu_total = figure(b, "huey enqueue start -> all done", got["huey"], "total_ms", "ms",
                      note="200 single enqueues")  # fmt: skip
    ideal = Row(b, "ideal (200 x 2 ms / 8)", 50.0, "ms")
    return [sq, sq_total, sq8, hu, hu_total,
            ratio_row(b, "sqljobs / ideal (start -> done)", sq_total, ideal, "%"),
            ratio_row(b, "huey / sqljobs (start -> done)", hu_total, sq_total)]  # fmt: skip


def bench_latency(runs: int) -> list[Row]:
    """Enqueue-to-start from this process to an idle worker subprocess."""
    got = collect(runs, {"sqljobs": lambda: latency.latency(LATENCY_JOBS)})["sqljobs"]
    b = "latency, worker subprocess"
    note = f"{LATENCY_JOBS} single enqueues 20 ms apart; includes the enqueue"
    return [
        figure(b, "enqueue -> start p50", got, "p50_ms", "ms", Target("<", 5), note),
        figure(b, "enqueue -> start p99", got, "p99_ms", "ms"),
        figure(b, "enqueue() call p50", got, "enqueue_p50_ms", "ms", note="durable commit"),
        figure(b, "worker CPU (mostly idle)", got, "worker_cpu_pct", "%",
               note="from /proc, during the 200 enqueues"),
    ]  # fmt: skip


def bench_idle(runs: int) -> list[Row]:
    """What an idle worker costs: claim queries and CPU."""
    got = collect(runs, {"sqljobs": lambda: sqlite_bench.idle_cost(IDLE_SECONDS)})["sqljobs"]
    b = "idle worker, in-process"
    return [
        figure(b, "claim queries", got, "claims_per_s", "claims/s",
               note=f"Worker.counters['claims'] over {IDLE_SECONDS:g} s"),
        figure(b, "CPU", got, "cpu_pct", "%", note="process CPU while the main thread sleeps"),
    ]  # fmt: skip


BENCHMARKS: dict[str, Callable[[int], list[Row]]] = {
    "drain": bench_drain,
    "enqueue": bench_enqueue,
    "article": bench_article,
    "latency": bench_latency,
    "idle": bench_idle,
}


# -- output --------------------------------------------------------------------------------


def fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "x":
        return f"{value:.2f}x"
    if unit in ("%", "ms"):
        return f"{value:,.1f}"
    return f"{value:,.0f}"


def table(rows: list[Row], title: str) -> Table:
    t = Table(title=title, show_lines=False)
    for col in ("benchmark", "measure", "median", "unit", "runs", "target", "status"):
        t.add_column(col, justify="right" if col in ("median", "runs") else "left", no_wrap=True)
    t.add_column("note", overflow="fold")
    style = {"PASS": "green", "MISS": "bold red", "ERROR": "bold red"}
    previous = ""
    for r in rows:
        if previous and r.bench != previous:
            t.add_section()
        previous = r.bench
        runs = " ".join(fmt(v, r.unit) for v in r.runs) if len(r.runs) > 1 else ""
        status = f"[{style[r.status]}]{r.status}[/]" if r.status else ""
        unit = "" if r.unit == "x" else r.unit
        target = f"{r.target}{unit if r.unit == 'x' else ''}" if r.target else ""
        t.add_row(r.bench, r.measure, fmt(r.value, r.unit), unit, runs, target, status, r.note)
    return t


def environment() -> dict[str, str]:
    return {
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "sqljobs": version("sqljobs"),
        "huey": version("huey"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cpus",
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="one run per benchmark")
    parser.add_argument("--only", default=None,
                        help=f"comma-separated subset of: {', '.join(BENCHMARKS)}")  # fmt: skip
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.only.split(",")] if args.only else list(BENCHMARKS)
    unknown = [n for n in names if n not in BENCHMARKS]
    if unknown:
        parser.error(f"unknown benchmark(s) {unknown}; choose from {list(BENCHMARKS)}")
    runs = 1 if args.quick else 3
    started = time.perf_counter()
    rows: list[Row] = []
    for name in names:
        log(f"{name}: {BENCHMARKS[name].__doc__}")
        rows += BENCHMARKS[name](runs)
    elapsed = time.perf_counter() - started
    env = environment()
    if args.json:
        report = {"environment": env, "runs": runs, "elapsed_s": elapsed,
                  "rows": [r.to_dict() for r in rows]}  # fmt: skip
        print(json.dumps(report, indent=2))
    else:
        title = (f"sqljobs SQLite benchmarks: median of {runs} run(s); "
                 + ", ".join(f"{k} {v}" for k, v in env.items()))  # fmt: skip
        console = Console(width=None if sys.stdout.isatty() else 200)
        console.print(table(rows, title))
        misses = sum(r.status in ("MISS", "ERROR") for r in rows)
        console.print(f"{misses} target(s) missed or errored; took {elapsed:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
