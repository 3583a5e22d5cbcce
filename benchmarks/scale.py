"""The scale suite (``python benchmarks/run.py --scale [--quick]``): does a job cost the
same with a big table, with many worker processes, and beside a busy drain?

1. Flat cost at size (:mod:`scale_flat`): claims and enqueues beside 1M pending or 10M
   finished jobs (100k and 1M with ``--quick``), against a table of 1k rows, on both
   backends.
2. Worker processes on one PostgreSQL (:mod:`scale_fleet`): 1 to 16 of them draining one
   backlog; the rate, and what the server's backends wait on.
3. Enqueue under load (:mod:`scale_enqueue`): ``enqueue()`` p50 and p99 while two worker
   processes drain, against the same with none running, on both backends.

Every figure is measured in the run that prints it, and every ratio is between two
figures of that run. The long steady run (30 minutes at 70% of capacity with the pruner
on) is ``make soak``. Without PostgreSQL its rows say SKIPPED.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field

import pg_server
import scale_enqueue
import scale_flat
import scale_fleet
from common import Case, Results, Row, Sample, collect, log, scratch_dir

FLEET_JOBS = (50_000, 20_000)  # full, --quick
FLEET_RUNS = 5  # the noisiest section (up to 16 processes on 2 cores): more repetitions
ENQUEUE_BACKLOG = (150_000, 60_000)
ENQUEUE_CALLS = (400, 200)


@dataclass
class Section:
    """One table's rows, and lines printed under it."""

    rows: list[Row]
    notes: list[str] = field(default_factory=list)


def pg_unavailable() -> str:
    """Why the PostgreSQL rows cannot be measured ("" if they can)."""
    return pg_server.unreachable()


def skipped(db: str, bench: str, reason: str) -> list[Row]:
    log(f"{db} {bench}: SKIPPED: {reason}")
    return [Row(db, bench, "every figure", None, "", skipped=reason)]


def flat(quick: bool, runs: int) -> Section:
    """Claim and enqueue cost at size, SQLite then PostgreSQL."""
    sizes = scale_flat.QUICK if quick else scale_flat.FULL
    out = scale_flat.measure("SQLite", sizes, runs, scale_flat.sqlite_file)
    reason = pg_unavailable()
    if reason:
        return Section(out + skipped("PostgreSQL", "every figure", reason))
    return Section(out + scale_flat.measure("PostgreSQL", sizes, runs, scale_flat.pg_database))


def fleet(quick: bool, runs: int) -> Section:
    """1, 2, 4, 8 and 16 worker processes (concurrency 8 each) on one PostgreSQL."""
    reason = pg_unavailable()
    if reason:
        return Section(skipped("PostgreSQL", "every figure", reason))
    n, runs = FLEET_JOBS[quick], 1 if quick else FLEET_RUNS
    waits: dict[int, list[str]] = {}

    def case(p: int) -> Case:
        def run() -> Sample:
            with pg_server.scratch_db(f"fleet{p}") as url:
                return scale_fleet.drain(url, n, p, waits)

        return run

    labels = {p: f"{p} process{'es' if p > 1 else ''}" for p in scale_fleet.PROCESSES}
    r = collect("PostgreSQL", "fleet", runs, {labels[p]: case(p) for p in labels})
    one = labels[1]
    figures: list[tuple[str, str, str, str]] = [
        ("jobs_per_s", f"drain {n:,} no-op, jobs/s", "jobs/s",
         "rate between 10% and 90% of jobs finished (their finished_at)"),
        ("claims_per_s", "claim statements/s", "/s",
         "distinct (worker, started_at) among the jobs started in that window"),
        ("jobs_per_claim", "jobs per claim", "", ""),
        ("claim_ms", "claim statement, mean ms", "ms",
         "backends inside claim or complete_and_claim x window / claims (Little's law)"),
        ("lock_wait_ms_per_claim", "lock waits per claim, ms", "ms",
         "backends waiting on a Lock or LWLock x window / claims"),
        ("active", "backends running a statement", "", "mean over ~10 ms samples"),
        ("lock", "... waiting on a Lock", "", "heavyweight: a row's transaction, extension"),
        ("lwlock", "... waiting on an LWLock", "", "buffer content, WAL insertion, lock manager"),
        ("any_lock_pct", "samples with any lock wait", "%", ""),
        ("runnable", "runnable threads, whole machine", "",
         "procs_running; above the cores, work waits for a CPU"),
        ("cpu_pct", "CPU busy, whole machine", "%", ""),
    ]  # fmt: skip
    out: list[Row] = []
    for key, bench, unit, note in figures:
        line = [r.row(labels[p], labels[p], key, unit, note=note) for p in labels]
        for row in line:
            row.bench = bench
        out += line
        if key == "jobs_per_s":
            for row in line:
                ratio = r.ratio(row.measure, row, line[0])
                ratio.bench = f"  x {one}"
                out.append(ratio)
    notes = [f"{label}: {'; '.join(waits.get(p, [])) or 'none'}" for p, label in labels.items()]
    return Section(out, ["Commonest waits (statement: wait type/event, mean backends "
                         "waiting), last repetition:", *notes])  # fmt: skip


def enqueue(quick: bool, runs: int) -> Section:
    """``enqueue()`` p50/p99 with and without two worker processes draining."""
    backlog, calls = ENQUEUE_BACKLOG[quick], ENQUEUE_CALLS[quick]

    def on(database: Callable[[], AbstractContextManager[str]]) -> Case:
        def run() -> Sample:
            with database() as url, scratch_dir() as folder:
                return scale_enqueue.under_load(url, backlog, calls, folder)

        return run

    out: list[Row] = []
    reason = pg_unavailable()
    halves: dict[str, Case | str] = {
        "SQLite": on(sqlite_url),
        "PostgreSQL": reason or on(lambda: pg_server.scratch_db("enqload")),
    }
    for db, case in halves.items():
        if isinstance(case, str):
            out += skipped(db, "every figure", case)
            continue
        r = collect(db, "enqueue under load", runs, {db: case})
        out += _enqueue_rows(db, r, backlog, calls)
    return Section(out)


def _enqueue_rows(db: str, r: Results, backlog: int, calls: int) -> list[Row]:
    out: list[Row] = []
    note = f"{calls} calls back to back; a backlog of {backlog:,} in the same queue"
    for pct in ("p50", "p99"):
        quiet = r.row(db, "no worker", f"quiet_{pct}_ms", "ms", note=note)
        busy = r.row(db, "2 worker processes draining", f"busy_{pct}_ms", "ms")
        ratio = r.ratio("2 worker processes draining", busy, quiet)
        for row in (quiet, busy):
            row.bench = f"enqueue() {pct}, ms"
        ratio.bench = f"  {pct} x no worker's"
        note = ""
        out += [quiet, busy, ratio]
    rate = r.row(db, "2 worker processes draining", "claimed_per_s", "jobs/s",
                 note="while the calls ran: pending before + calls - pending after")  # fmt: skip
    rate.bench = "workers' claims meanwhile, jobs/s"
    return [*out, rate]


@contextmanager
def sqlite_url() -> Iterator[str]:
    """A fresh SQLite file's URL in a temporary folder, removed on exit."""
    with scratch_dir() as folder:
        yield f"sqlite:///{folder / 'jobs.db'}"


SECTIONS: dict[str, tuple[str, Callable[[bool, int], Section]]] = {
    "flat": ("Flat cost at size (a column per table content)", flat),
    "fleet": ("Worker processes on one PostgreSQL (concurrency 8 each)", fleet),
    "enqueue": ("Enqueue latency under load", enqueue),
}


def run(quick: bool) -> dict[str, Section]:
    """Every section, by its title."""
    runs = 1 if quick else 3
    out = {}
    for name, (title, section) in SECTIONS.items():
        log(f"scale: {name}: {section.__doc__}")
        out[title] = section(quick, runs)
    return out
