"""Claim and enqueue cost beside a million pending or ten million finished jobs, against
the same with a near-empty table: a queue's per-job cost must not grow with its table.

Each condition is its own database (a SQLite file in a temporary folder; a PostgreSQL
scratch database), filled by :mod:`scale_load` and dropped once measured. The measured
jobs are ``default`` queue no-ops enqueued through the API, and a worker serves that queue
only. In each repetition, on the same App:

- ``enqueue()``: SINGLES single calls, each its own durable commit, with no worker running;
- the drain: those and N - SINGLES more (``enqueue_many``) drained by an in-process Worker
  at concurrency 8, per job from the first handler call to the N-th outcome committed
  (the worker's start-up and connections are not the claim's cost); where the table holds
  a due backlog in the same queue, the drain takes N of that backlog instead;
- one job at a time: PROBES single enqueues, 5 ms apart, on that worker once idle; from
  the ``enqueue()`` call to the handler's start: the enqueue's commit, the wake-up in this
  process (it comes before ``enqueue()`` returns, so the call's return is no mark), a claim
  that finds one due job, and the hand-off to a thread.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass

import pg_server
import sqljobs_cases as sq
from common import (
    Countdown,
    Figures,
    Results,
    Row,
    Sample,
    Target,
    collect,
    log,
    percentile,
    scratch_dir,
    wait_until,
)
from scale_load import Fill, pg_fill, sqlite_fill

import sqljobs

FLAT = Target("<=", 1.5)
"""What "flat" is held to: within 1.5x of the near-empty table's figure, in the same run."""


@dataclass(frozen=True)
class Sizes:
    """How big the table gets: ``pending`` (1M, or 100k with ``--quick``) and ``done``."""

    pending: int
    done: int
    drain: int  # N
    singles: int
    probes: int


FULL = Sizes(pending=1_000_000, done=10_000_000, drain=5_000, singles=200, probes=100)
QUICK = Sizes(pending=100_000, done=1_000_000, drain=2_000, singles=100, probes=50)
BASE = "1k done rows"


def _short(n: int) -> str:
    return f"{n // 1_000_000}M" if n >= 1_000_000 else f"{n // 1_000}k"


def conditions(sizes: Sizes) -> dict[str, Fill]:
    """What the table holds besides the measured jobs, by column label. Overdue rows are
    due before anything enqueued now; finished ones ended before the measurement began."""
    p, d = sizes.pending, sizes.done
    return {
        BASE: Fill(1_000, done=True, due_in=-7200.0),
        f"+{_short(p)} pending, other queue": Fill(p, queue="other", due_in=-3600 - p / 1000),
        f"+{_short(p)} pending, due in a day": Fill(p, due_in=86_400.0),
        f"+{_short(p)} pending, due (backlog)": Fill(p, due_in=-3600 - p / 1000),
        f"+{_short(d)} done": Fill(d, done=True, due_in=-7200 - d / 1000),
    }


class Starts:
    """Handler start times (perf_counter) of the measured no-ops, from any thread."""

    def __init__(self, expected: int) -> None:
        self.countdown = Countdown(expected)
        self.first = 0.0

    def hit(self) -> None:
        if not self.first:
            self.first = time.perf_counter()
        self.countdown.hit()


def one_round(url: str, sizes: Sizes, backlog: bool) -> Sample:
    """One repetition on a loaded database (see the module's docstring)."""
    n = sizes.drain
    starts = Starts(n)
    probed: list[float] = []
    app = sq.new_app(url, starts.hit)

    @app.task(name="probe")
    def probe() -> None:
        probed.append(time.perf_counter())

    noop = app.tasks["noop"]
    try:
        calls = []
        for i in range(sizes.singles):
            began = time.perf_counter()
            noop.enqueue(i)
            calls.append(time.perf_counter() - began)
        noop.enqueue_many([(i,) for i in range(sizes.singles, n)])
        with sq.running_worker(app, concurrency=8, queues=("default",)) as worker:
            starts.countdown.wait()
            committed = wait_until(lambda: worker.counters["done"] >= n, step=0.0005)
            sample: Sample = {"drain_us": (committed - starts.first) / (n - 1) * 1e6}
            if not backlog:
                sample |= _probe(probe, probed, sizes.probes)
    finally:
        app.close()
    return sample | {
        "enqueue_p50_ms": percentile(calls, 50) * 1000,
        "enqueue_p99_ms": percentile(calls, 99) * 1000,
    }


def _probe(probe: sqljobs.Task, probed: list[float], count: int) -> Sample:
    time.sleep(0.2)  # the drain's last outcomes written; the worker idle
    delays = []
    for i in range(count):
        called = time.perf_counter()
        probe.enqueue()
        wait_until(functools.partial(_has, probed, i + 1), step=0.0001)
        delays.append(probed[i] - called)
        time.sleep(0.005)
    return {"claim_p50_ms": percentile(delays, 50) * 1000,
            "claim_p99_ms": percentile(delays, 99) * 1000}  # fmt: skip


def is_backlog(fill: Fill) -> bool:
    """Due jobs in the measured queue: the worker drains those and is never idle."""
    return not fill.done and fill.queue == "default" and fill.due_in < 0


def _has(items: list[float], count: int) -> bool:
    return len(items) >= count


def measure(db: str, sizes: Sizes, runs: int,
            database: Callable[[Fill], AbstractContextManager[tuple[str, float]]],
            ) -> list[Row]:  # fmt: skip
    """Every condition on ``db``, each in the database ``database(fill)`` opens (its URL
    and how long the load took)."""
    figures: dict[str, Figures] = {}
    skipped: dict[str, str] = {}
    for label, fill in conditions(sizes).items():
        log(f"{db} {label}: loading {fill.rows:,} rows")
        with database(fill) as (url, loaded):
            log(f"  loaded in {loaded:.1f} s")
            backlog = is_backlog(fill)
            case = functools.partial(one_round, url, sizes, backlog)
            r = collect(db, label, runs, {label: case})
        figures[label] = r.figures[label] | {"load_s": [loaded]}
        if backlog:
            skipped[label] = "n/a: a worker beside a due backlog is never idle"
    return rows(db, sizes, Results(db, "", figures, skipped))


def rows(db: str, sizes: Sizes, r: Results) -> list[Row]:
    """One line per figure and one per its ratio to the near-empty table, a column per
    condition (``measure`` is the condition's label)."""
    out: list[Row] = []
    lines = [
        ("drain_us", f"claim: drain {sizes.drain:,} (c=8), us a job", "us", "drain"),
        ("claim_p50_ms", "claim: one job, enqueue -> start p50, ms", "ms", "claim p50"),
        ("claim_p99_ms", "claim: one job, enqueue -> start p99, ms", "ms", "claim p99"),
        ("enqueue_p50_ms", "enqueue() p50, ms", "ms", "enqueue p50"),
        ("enqueue_p99_ms", "enqueue() p99, ms", "ms", "enqueue p99"),
    ]
    for key, bench, unit, short in lines:
        idle = key.startswith("claim_")  # measured on an idle worker only
        base = _row(r, label=BASE, key=key, bench=bench, unit=unit, idle=idle)
        figures = [_row(r, label, key, bench, unit, idle) for label in r.figures]
        target = FLAT if key.endswith(("_us", "p50_ms")) else None
        out += figures
        for fig in figures:
            ratio = r.ratio(fig.measure, fig, base, target=target)
            ratio.bench = f"  {short} x 1k rows'"
            out.append(ratio)
    out += [_row(r, label, "load_s", "loading the rows, s (not judged)", "s", False)
            for label in r.figures]  # fmt: skip
    return out


def _row(r: Results, label: str, key: str, bench: str, unit: str, idle: bool) -> Row:
    """Figure ``key`` of condition ``label`` as a line ``bench``'s cell in its column; a
    figure of an idle worker is not applicable where the worker is never idle."""
    row = r.row(label, label, key, unit)
    row.bench = bench
    if not idle:
        row.skipped = ""
    return row


# -- the databases -------------------------------------------------------------------------


@contextmanager
def sqlite_file(fill: Fill) -> Iterator[tuple[str, float]]:
    """A fresh SQLite file, migrated and filled: its URL and the load's seconds. Removed
    with its folder on exit."""
    with scratch_dir() as folder:
        path = folder / "jobs.db"
        url = f"sqlite:///{path}"
        app = sqljobs.App(url)
        app.migrate()
        app.close()
        yield url, sqlite_fill(str(path), fill)


@contextmanager
def pg_database(fill: Fill) -> Iterator[tuple[str, float]]:
    """A fresh PostgreSQL scratch database, migrated and filled: its URL and the load's
    seconds. Dropped on exit."""
    with pg_server.scratch_db("scale") as url:
        app = sqljobs.App(url)
        app.migrate()
        app.close()
        yield url, pg_fill(url, fill)
