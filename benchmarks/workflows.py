"""Durable workflows on SQLite and PostgreSQL: sqljobs beside DBOS and Absurd, in one run.

    python benchmarks/workflows.py [--engine sqlite|postgres|both] [--workflows 1000]
        [--steps 10] [--runs 3] [--events 200] [--parked 10000] [--idle 10]
        [--only throughput,events,idle] [--json]

Three measurements, each engine on fresh databases (a SQLite file, a PostgreSQL scratch
database), every worker a process of its own at concurrency 8:

- ``throughput``: WORKFLOWS workflows of STEPS no-op steps, enqueued before the worker
  starts, from the worker's readiness (the ``time.time()`` its process takes just before
  ``app.run_worker(concurrency=8)``, ``DBOS.launch()`` or Absurd's ``start_worker``) to
  the moment this process, reading the count of finished workflows every 20 ms on one
  connection, sees the last. Step overhead: each workflow function takes
  ``time.perf_counter()`` before its first step and after every step call; a step is a
  no-op function, so the difference is the call's own cost (its checkpoint, commit
  included), p50 and p99 over every step of every workflow. Beside it, on the same
  engine: DBOS's queue (``worker_concurrency=8``, polled every 10 ms, and at its default
  1 s with fewer workflows: it starts at most 8 a poll) and, on PostgreSQL, Absurd's
  worker (``start_worker(concurrency=8)``). Rounds interleave the systems; medians.
- ``events``: EVENTS workflows parked in ``wf.wait_for("e:N")``; this process calls
  ``app.emit("e:N")`` for each in turn, 25 ms apart, and the step after the wait records
  its start: from ``emit()``'s return to that start, p50 and p99 (one run).
- ``idle``: what one idle worker process costs with no workflow and then with PARKED
  workflows parked in ``wait_for``, over six windows of IDLE seconds in a row each: the
  statements it sends (counted in the process itself: a SQLite trace callback, psycopg's
  ``Cursor.execute``), in the first window and in all six (its slowest periodic pass, the
  pruning, comes every 60 s), on PostgreSQL also the database's transactions
  (``pg_stat_database``, read from another database after a settle, since PostgreSQL
  flushes a backend's counts late), and its CPU (one run).

``run.py`` runs this as its ``workflows`` benchmark (``--only sqlite,workflows``).
Progress goes to stderr, the table (or JSON) to stdout.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from importlib.util import find_spec
from itertools import pairwise
from pathlib import Path

import workflow_app
from common import (
    Case,
    Row,
    Sample,
    Target,
    collect,
    cpu_seconds,
    log,
    percentile,
    scratch_dir,
    wait_until,
)

import sqljobs

HERE = Path(__file__).resolve().parent
WORKFLOWS = 1_000
STEPS = 10
DBOS_POLL = 0.01
DBOS_DEFAULT_POLL = 1.0  # DBOS's own default polling interval
DBOS_DEFAULT_WORKFLOWS = 200  # at its default poll it starts at most 8 a second
EVENTS = 200
EVENT_GAP = 0.025
PARKED = 10_000
IDLE_SECONDS = 10.0
IDLE_WINDOWS = 6  # in a row: the slowest periodic pass (pruning) comes every 60 s
SETTLE = {"sqlite": 2.0, "postgres": 12.0}  # PostgreSQL flushes a backend's counts <= 10 s late
DB = {"sqlite": "SQLite", "postgres": "PostgreSQL"}
PARTS = ("throughput", "events", "idle")


# -- places and processes ------------------------------------------------------------------


def on_engine(engine: str, tag: str, body: Callable[[str, Path], Sample]) -> Case:
    """A case that runs ``body(url, folder)`` on a fresh database of ``engine`` (``url``
    names a SQLite file in ``folder`` or a PostgreSQL scratch database) and a fresh folder
    for the worker's files."""

    def case() -> Sample:
        with scratch_dir() as folder:
            if engine == "sqlite":
                return body(f"sqlite:///{folder / 'db.sqlite'}", folder)
            import pg_server

            with pg_server.scratch_db(f"wf{tag}") as url:
                return body(url, folder)

    return case


class Process:
    """A benchmark process (``python SCRIPT ARGS`` in this folder), logging to a file."""

    def __init__(self, folder: Path, script: str, *args: str) -> None:
        self.folder, self.log = folder, folder / f"{Path(script).stem}.log"
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(HERE), env.get("PYTHONPATH")) if p)
        with open(self.log, "ab") as sink:
            self.proc = subprocess.Popen([sys.executable, script, *args], env=env, cwd=HERE,
                                         stdout=sink, stderr=sink)  # fmt: skip

    def alive(self) -> bool:
        """True while it runs; raises with the tail of its log once it has ended."""
        if self.proc.poll() is not None:
            tail = self.log.read_text(errors="replace")[-3000:]
            raise RuntimeError(f"{self.proc.args[1]} exited with {self.proc.returncode}:\n{tail}")
        return True

    def ready(self) -> float:
        """The ``time.time()`` the process wrote to ``ready`` just before it started work."""
        path = self.folder / "ready"
        wait_until(lambda: self.alive() and path.exists() and path.read_text().endswith("\n"),
                   step=0.005)  # fmt: skip
        return float(path.read_text())

    def cpu(self) -> float:
        return cpu_seconds(self.proc.pid) or 0.0

    def stop(self) -> None:
        """SIGTERM (each exits gracefully on it), then kill if it does not exit."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def setup(folder: Path, script: str, *args: str) -> None:
    """Run a peer's ``setup`` to its end, in a process of its own."""
    proc = Process(folder, script, "setup", *args)
    if proc.proc.wait(timeout=600) != 0:
        proc.alive()


@contextmanager
def counter(url: str, sql: str) -> Iterator[Callable[[], int]]:
    """``sql``'s one number, read again on each call over one connection kept open."""
    if url.startswith("sqlite:///"):
        with contextlib.closing(sqlite3.connect(url.removeprefix("sqlite:///"))) as conn:
            yield lambda: int(conn.execute(sql).fetchone()[0])
        return
    import psycopg

    with psycopg.connect(url, autocommit=True) as pg:
        yield lambda: int(pg.execute(sql).fetchone()[0])  # type: ignore[index]


SQLJOBS_DONE = "SELECT count(*) FROM sqljobs_jobs WHERE state = 'done'"
SQLJOBS_WAITING = "SELECT count(*) FROM sqljobs_jobs WHERE state = 'waiting'"


# -- 1. throughput -------------------------------------------------------------------------


def drain(proc: Process, finished: Callable[[], int], n: int, steps: int) -> Sample:
    """From ``proc``'s readiness until ``finished()`` reaches ``n``, then its step times."""
    try:
        ready = proc.ready()
        wait_until(lambda: proc.alive() and finished() >= n, step=0.02)
        done = time.time()
    finally:
        proc.stop()
    lines = (proc.folder / "steps.txt").read_text().split("\n")
    times = [float(x) for line in lines for x in line.split()]
    if len(times) != n * steps:
        raise RuntimeError(f"{len(times)} step times for {n} workflows of {steps} steps")
    return {
        "wf_per_s": n / (done - ready),
        "steps_per_s": n * steps / (done - ready),
        "step_p50_ms": percentile(times, 50) * 1000,
        "step_p99_ms": percentile(times, 99) * 1000,
    }


def sqljobs_throughput(url: str, folder: Path, n: int, steps: int) -> Sample:
    app = sqljobs.App(url)
    flows = workflow_app.register(app)
    app.migrate()
    flows["steps"].enqueue_many([(steps,)] * n)
    app.close()
    with counter(url, SQLJOBS_DONE) as done:
        return drain(Process(folder, "workflow_app.py", url, str(folder)), done, n, steps)


def dbos_throughput(url: str, folder: Path, n: int, steps: int, poll: float) -> Sample:
    dbos_url = url if url.startswith("postgresql") else f"sqlite:///{folder / 'dbos.sqlite'}"
    setup(folder, "peer_dbos.py", dbos_url, str(n), str(steps), str(poll))
    table = "workflow_status" if dbos_url.startswith("sqlite") else "dbos.workflow_status"
    sql = f"SELECT count(*) FROM {table} WHERE status = 'SUCCESS'"
    with counter(dbos_url, sql) as done:
        return drain(Process(folder, "peer_dbos.py", "worker", dbos_url, str(folder)), done, n,
                     steps)  # fmt: skip


def absurd_throughput(url: str, folder: Path, n: int, steps: int) -> Sample:
    setup(folder, "peer_absurd.py", url, str(n), str(steps))
    sql = "SELECT count(*) FROM absurd.t_wfbench WHERE state = 'completed'"
    with counter(url, sql) as done:
        return drain(Process(folder, "peer_absurd.py", "worker", url, str(folder)), done, n,
                     steps)  # fmt: skip


def missing(*packages: str) -> str:
    """Why a peer cannot run ("" if it can): its package is not installed."""
    absent = [p for p in packages if find_spec(p) is None]
    return f"{', '.join(absent)} not installed (pip install -e '.[bench]')" if absent else ""


def throughput(engine: str, runs: int, n: int = WORKFLOWS, steps: int = STEPS) -> list[Row]:
    """``n`` workflows of ``steps`` no-op steps, one worker process at concurrency 8."""
    few = min(n, DBOS_DEFAULT_WORKFLOWS)
    no_dbos, no_absurd = missing("dbos"), missing("absurd_sdk")
    cases: dict[str, Case | str] = {
        "sqljobs": on_engine(engine, "sq", lambda u, f: sqljobs_throughput(u, f, n, steps)),
        "dbos": no_dbos or on_engine(
            engine, "dbos", lambda u, f: dbos_throughput(u, f, n, steps, DBOS_POLL)),
        "dbos default": no_dbos or on_engine(
            engine, "dbosd", lambda u, f: dbos_throughput(u, f, few, steps, DBOS_DEFAULT_POLL)),
    }  # fmt: skip
    if engine == "postgres":
        cases["absurd"] = no_absurd or on_engine(
            engine, "abs", lambda u, f: absurd_throughput(u, f, n, steps)
        )
    r = collect(DB[engine], f"workflows: {n:,} x {steps} no-op steps, c=8", runs, cases)
    step_target = Target("<", 0.5 if engine == "postgres" else 0.3)
    ours = r.row("sqljobs", "sqljobs workflows/s", "wf_per_s", "wf/s",
                 note="worker readiness -> last workflow seen done")  # fmt: skip
    dbos = r.row("dbos", "DBOS workflows/s, 10 ms poll", "wf_per_s", "wf/s", note=(
        "register_queue(worker_concurrency=8, polling_interval_sec=0.01)"))  # fmt: skip
    dbos_default = r.row("dbos default", "DBOS workflows/s, default poll", "wf_per_s", "wf/s",
                         note=f"{few:,} workflows; polling_interval_sec=1.0")  # fmt: skip
    rows = [
        ours,
        r.row("sqljobs", "sqljobs step p50", "step_p50_ms", "ms", step_target,
              "wf.step(no-op) call, its durable checkpoint included"),
        r.row("sqljobs", "sqljobs step p99", "step_p99_ms", "ms"),
        dbos,
        r.row("dbos", "DBOS step p50", "step_p50_ms", "ms", note="@DBOS.step no-op call"),
        r.row("dbos", "DBOS step p99", "step_p99_ms", "ms"),
        dbos_default,
        r.row("dbos default", "DBOS step p50, default poll", "step_p50_ms", "ms"),
    ]  # fmt: skip
    ratios = [
        r.ratio("sqljobs / DBOS (10 ms poll)", ours, dbos, target=Target(">=", 10)),
        r.ratio("sqljobs / DBOS (default poll)", ours, dbos_default, target=Target(">=", 10)),
    ]
    if engine == "postgres":
        absurd = r.row("absurd", "Absurd workflows/s", "wf_per_s", "wf/s",
                       note="start_worker(concurrency=8), its defaults otherwise")  # fmt: skip
        rows += [
            absurd,
            r.row("absurd", "Absurd step p50", "step_p50_ms", "ms", note="ctx.step(no-op) call"),
            r.row("absurd", "Absurd step p99", "step_p99_ms", "ms"),
        ]
        ratios.append(r.ratio("sqljobs / Absurd", ours, absurd))
    return rows + ratios


# -- 2. event -> resume --------------------------------------------------------------------


def resume_latency(url: str, folder: Path, n: int = EVENTS) -> Sample:
    """``n`` workflows parked in ``wait_for("e:N")``, each woken by ``app.emit`` here."""
    app = sqljobs.App(url)
    flows = workflow_app.register(app)
    app.migrate()
    worker = Process(folder, "workflow_app.py", url, str(folder))
    try:
        worker.ready()
        flows["resume"].enqueue_many([(i,) for i in range(n)])
        with counter(url, SQLJOBS_WAITING) as waiting:
            wait_until(lambda: worker.alive() and waiting() >= n, step=0.05)
        time.sleep(0.5)
        returned, calls = {}, []
        for i in range(n):
            sent = time.time()
            app.emit(f"e:{i}")
            returned[i] = time.time()
            calls.append(returned[i] - sent)
            time.sleep(EVENT_GAP)
        out = folder / "resumed.txt"
        wait_until(lambda: worker.alive() and out.exists()
                   and len(out.read_text().split("\n")) > n, step=0.01)  # fmt: skip
    finally:
        worker.stop()
        app.close()
    started = {int(a): float(b) for a, b in (line.split() for line in out.read_text().splitlines())}
    delays = [started[i] - returned[i] for i in range(n)]
    return {
        "p50_ms": percentile(delays, 50) * 1000,
        "p99_ms": percentile(delays, 99) * 1000,
        "max_ms": max(delays) * 1000,
        "emit_p50_ms": percentile(calls, 50) * 1000,
    }


def events(engine: str, n: int = EVENTS) -> list[Row]:
    """Event -> resume on sqljobs: ``n`` parked workflows, one ``app.emit`` each."""
    r = collect(DB[engine], "workflows: emit -> resume", 1, {
        "sqljobs": on_engine(engine, "ev", lambda u, f: resume_latency(u, f, n)),
    })  # fmt: skip
    note = f"{n} workflows parked in wait_for; emit() from this process, 25 ms apart"
    return [
        r.row("sqljobs", "emit() return -> next step start p50", "p50_ms", "ms",
              Target("<", 5), note),
        r.row("sqljobs", "emit() return -> next step start p99", "p99_ms", "ms"),
        r.row("sqljobs", "emit() call p50", "emit_p50_ms", "ms", note="a durable commit"),
    ]  # fmt: skip


# -- 3. idle cost of parked workflows --------------------------------------------------------


def _statements(folder: Path) -> tuple[float, dict[str, int]]:
    """When the worker last wrote its statement counts, and the counts (by statement)."""
    found = json.loads((folder / "statements.json").read_text())
    return float(found["time"]), found["counts"]


def _windows(engine: str, url: str, worker: Process, seconds: float, count: int) -> Sample:
    """What the idle worker did over ``count`` windows of ``seconds`` in a row: the
    statements it sent in the first window and in all of them (its periodic passes come
    every 5 s to 60 s: one 10-s window counts the slower ones 0 or 1 times by the phase
    alone), the database's transactions and its CPU over all of them."""
    xacts: Callable[[], float] | None = None
    if engine == "postgres":
        import pg_server

        xacts = lambda: pg_server.transactions(url)  # noqa: E731
    x0 = xacts() if xacts else 0.0
    marks = [_statements(worker.folder)]
    cpu, wall = worker.cpu(), time.perf_counter()
    for _ in range(count):
        time.sleep(seconds)
        worker.alive()
        marks.append(_statements(worker.folder))
    cpu, wall = worker.cpu() - cpu, time.perf_counter() - wall
    sent = []
    for (t0, s0), (t1, s1) in pairwise(marks):
        window = {k: n - s0.get(k, 0) for k, n in s1.items() if n > s0.get(k, 0)}
        log(f"    {sum(window.values())} statements in {t1 - t0:.1f} s: {window}")
        sent.append(sum(window.values()))
    (t0, _), (t1, _), (tn, _) = marks[0], marks[1], marks[-1]
    sample = {"first_per_s": sent[0] / (t1 - t0), "all_per_s": sum(sent) / (tn - t0),
              "cpu_pct": 100 * cpu / wall}  # fmt: skip
    if xacts:
        sample["xacts_per_s"] = (xacts() - x0) / wall
    return sample


def idle_cost(engine: str, url: str, folder: Path, parked: int, seconds: float,
              windows: int = IDLE_WINDOWS) -> Sample:  # fmt: skip
    """One idle worker process: windows with no workflow, then with ``parked`` parked."""
    app = sqljobs.App(url)
    flows = workflow_app.register(app)
    app.migrate()
    worker = Process(folder, "workflow_app.py", url, str(folder), "--count")
    try:
        worker.ready()
        wait_until(lambda: worker.alive() and app.stats().workers >= 1, step=0.05)
        app.close()
        time.sleep(SETTLE[engine])
        empty = _windows(engine, url, worker, seconds, windows)
        for start in range(0, parked, 1000):
            flows["parked"].enqueue_many([(i,) for i in range(start, min(parked, start + 1000))])
        app.close()
        with counter(url, SQLJOBS_WAITING) as waiting:
            wait_until(lambda: worker.alive() and waiting() >= parked, step=0.2)
        time.sleep(SETTLE[engine])
        full = _windows(engine, url, worker, seconds, windows)
    finally:
        worker.stop()
        app.close()
    sample = {f"empty_{k}": v for k, v in empty.items()}
    return sample | {f"parked_{k}": v for k, v in full.items()}


def idle(engine: str, parked: int = PARKED, seconds: float = IDLE_SECONDS) -> list[Row]:
    """An idle worker's cost with 0 and with ``parked`` workflows parked in wait_for."""
    r = collect(DB[engine], f"workflows: idle worker, {parked:,} parked", 1, {
        "sqljobs": on_engine(engine, "idle",
                             lambda u, f: idle_cost(engine, u, f, parked, seconds)),
    })  # fmt: skip
    how = "SQLite trace callback" if engine == "sqlite" else "psycopg Cursor.execute"
    span = f"{IDLE_WINDOWS} x {seconds:g} s"
    empty = r.row("sqljobs", f"statements/s, none parked, {span}", "empty_all_per_s", "/s",
                  note=f"counted in the worker process ({how})")  # fmt: skip
    full = r.row("sqljobs", f"statements/s, {parked:,} parked, {span}", "parked_all_per_s",
                 "/s", note="the same worker, after the parks, settled")  # fmt: skip
    rows = [
        r.row("sqljobs", f"statements/s, none parked, first {seconds:g} s", "empty_first_per_s",
              "/s"),
        r.row("sqljobs", f"statements/s, {parked:,} parked, first {seconds:g} s",
              "parked_first_per_s", "/s"),
        empty, full,
    ]  # fmt: skip
    if engine == "postgres":
        rows += [
            r.row("sqljobs", f"transactions/s, none parked, {span}", "empty_xacts_per_s", "/s",
                  note="pg_stat_database xact_commit + xact_rollback deltas"),
            r.row("sqljobs", f"transactions/s, {parked:,} parked, {span}", "parked_xacts_per_s",
                  "/s"),
        ]  # fmt: skip
    rows += [
        r.row("sqljobs", "worker CPU, none parked", "empty_cpu_pct", "%"),
        r.row("sqljobs", f"worker CPU, {parked:,} parked", "parked_cpu_pct", "%"),
    ]
    more = None if empty.value is None or full.value is None else full.value - empty.value
    rows.append(Row(DB[engine], empty.bench, "statements/s: parked - none", more, "/s",
                    target=Target("<=", 0.1), skipped=empty.skipped,
                    note=f"unchanged: within 6 statements over {span}"))  # fmt: skip
    return rows


# -- the suite -------------------------------------------------------------------------------


def rows(engine: str, runs: int, parts: tuple[str, ...] = PARTS, n: int = WORKFLOWS,
         steps: int = STEPS, n_events: int = EVENTS, parked: int = PARKED,
         seconds: float = IDLE_SECONDS) -> list[Row]:  # fmt: skip
    """Every part asked for, on ``engine``; ``runs`` repetitions of the throughput."""
    if engine == "postgres":
        import pg_server

        reason = pg_server.unreachable()
        if reason:
            return [Row(DB[engine], "workflows", ", ".join(parts), None, "", skipped=reason)]
    out: list[Row] = []
    if "throughput" in parts:
        log(f"{DB[engine]} workflows: {n:,} x {steps} steps")
        out += throughput(engine, runs, n, steps)
    if "events" in parts:
        log(f"{DB[engine]} workflows: emit -> resume, {n_events} events")
        out += events(engine, n_events)
    if "idle" in parts:
        log(f"{DB[engine]} workflows: idle worker, {parked:,} parked")
        out += idle(engine, parked, seconds)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--engine", choices=("sqlite", "postgres", "both"), default="both")
    parser.add_argument("--workflows", type=int, default=WORKFLOWS)
    parser.add_argument("--steps", type=int, default=STEPS)
    parser.add_argument("--runs", type=int, default=3, help="rounds of the throughput part")
    parser.add_argument("--events", type=int, default=EVENTS)
    parser.add_argument("--parked", type=int, default=PARKED)
    parser.add_argument("--idle", type=float, default=IDLE_SECONDS, help="seconds a window")
    parser.add_argument("--only", help=f"comma-separated parts: {', '.join(PARTS)}")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args(argv)
    parts = tuple(p.strip() for p in (args.only or ",".join(PARTS)).split(",") if p.strip())
    if unknown := [p for p in parts if p not in PARTS]:
        parser.error(f"unknown parts {unknown}; choose from {list(PARTS)}")
    engines = ["sqlite", "postgres"] if args.engine == "both" else [args.engine]
    load = os.getloadavg()
    started = time.perf_counter()
    out: list[Row] = []
    for engine in engines:
        out += rows(engine, args.runs, parts, args.workflows, args.steps, args.events,
                    args.parked, args.idle)  # fmt: skip
    elapsed = time.perf_counter() - started
    import run  # (its table and environment; imported here: run.py imports this module)

    env = run.environment()
    env["load before"] = " ".join(f"{x:.2f}" for x in load)
    env["load after"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    log(f"took {elapsed:.0f} s")
    if args.json:
        report = {"environment": env, "runs": args.runs, "elapsed_s": round(elapsed, 1),
                  "rows": [r.to_dict() for r in out]}  # fmt: skip
        print(json.dumps(report, indent=2))
        return 0
    from rich.console import Console

    title = (f"sqljobs workflows, throughput median of {args.runs} run(s): "
             + ", ".join(f"{k} {v}" for k, v in env.items()))  # fmt: skip
    Console(width=None if sys.stdout.isatty() else 220).print(run.table(out, title))
    return 0


if __name__ == "__main__":
    sys.exit(main())
