"""sqljobs on PostgreSQL, side by side with pgqueuer, procrastinate and physical references.

    python benchmarks/postgres_bench.py [--quick]

Every benchmark repeats 3 times (1 with ``--quick``), the systems interleaved round by round
so noise on this shared machine hits them alike, and reports medians and ratios of medians.
Every repetition runs in a fresh scratch database (``CREATE DATABASE bench_...``) that is
dropped afterwards. The physical references (pgbench, a bare psycopg loop) run in the same
rounds, so the sqljobs figures can be read as a fraction of what this box can do at all.

This module is also the app a worker subprocess loads (``postgres_bench:worker_app``), so
the latency, idle-cost and multi-process figures go through the real command line and
learn of new jobs only through the database (LISTEN/NOTIFY).
"""

from __future__ import annotations

import argparse
import math
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TextIO

import pg_peers
import psycopg
from rich.console import Console
from rich.table import Table

import sqljobs

HERE = Path(__file__).resolve().parent
ADMIN_URL = os.environ.get("BENCH_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")
WAIT_LIMIT = 120.0
TICKS = os.sysconf("SC_CLK_TCK")

DRAIN_JOBS = 10_000
PGQUEUER_JOBS = 10_000
PGQUEUER_DEFAULTS_JOBS = 5_000
PROCRASTINATE_JOBS = 2_000  # 10,000 would take 30 s a run; fewer jobs flatter it (below)
ENQUEUE_JOBS = 10_000
ARTICLE_JOBS = 200
LATENCY_JOBS = 200
IDLE_SECONDS = 10.0
IDLE_SETTLE = 3.0
BARE_JOBS = 20_000
PGBENCH_SECONDS = 5

Sample = dict[str, float]
Figures = dict[str, list[float]]
Case = Callable[[], Sample]


def log(message: str) -> None:
    """Progress goes to stderr, so the table on stdout stays clean."""
    print(message, file=sys.stderr, flush=True)


# -- the app a worker subprocess loads -----------------------------------------------------

_out_lock = threading.Lock()
_out: TextIO | None = None


def _record(delay: float) -> None:
    """Append one enqueue-to-start delay to the file named by ``BENCH_PG_OUT``."""
    global _out
    with _out_lock:
        if _out is None:
            _out = open(os.environ["BENCH_PG_OUT"], "a", buffering=1)  # noqa: SIM115
        _out.write(f"{delay:.6f}\n")


def register_tasks(app: sqljobs.App, on_noop: Callable[[], None] | None = None) -> None:
    """The benchmark's tasks; the worker subprocess and the enqueuing side both call this."""

    @app.task(name="noop")
    def noop(i: int) -> None:
        if on_noop is not None:
            on_noop()

    @app.task(name="stamp")
    def stamp(sent: float) -> None:
        _record(time.time() - sent)  # first thing: the start time is what is measured


worker_app = sqljobs.App()  # the URL comes from the command line's --url
register_tasks(worker_app)


# -- databases -----------------------------------------------------------------------------


def db_url(name: str) -> str:
    return ADMIN_URL.rsplit("/", 1)[0] + "/" + name


def admin_execute(sql: str, attempts: int = 30) -> None:
    """One statement on the admin database, on a fresh connection, retried for a while:
    the test suite on this shared machine restarts the server now and then."""
    for attempt in range(1, attempts + 1):
        try:
            with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
                conn.execute(sql)
            return
        except psycopg.OperationalError:
            if attempt == attempts:
                raise
            time.sleep(1.0)


@contextmanager
def scratch_db(tag: str) -> Iterator[str]:
    """A fresh empty database for one repetition, dropped (forcibly) afterwards."""
    name = f"bench_{tag}_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    admin_execute(f"CREATE DATABASE {name}")
    try:
        yield db_url(name)
    finally:
        admin_execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def unfinished(conn: psycopg.Connection[Any]) -> bool:
    """Whether any sqljobs job is pending or running (each arm uses a partial index)."""
    row = conn.execute(
        "SELECT EXISTS (SELECT 1 FROM sqljobs_jobs WHERE state = 'pending')"
        " OR EXISTS (SELECT 1 FROM sqljobs_jobs WHERE state = 'running')"
    ).fetchone()
    return bool(row and row[0])


def count_done(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute("SELECT count(*) FROM sqljobs_jobs WHERE state = 'done'").fetchone()
    return int(row[0]) if row else 0


def wait_until(check: Callable[[], bool], timeout: float = WAIT_LIMIT,
               step: float = 0.001) -> float:  # fmt: skip
    """Poll ``check`` until true; return the perf_counter time it became true."""
    deadline = time.perf_counter() + timeout
    while not check():
        if time.perf_counter() > deadline:
            raise TimeoutError(f"condition not met within {timeout:g} s")
        time.sleep(step)
    return time.perf_counter()


def wait_committed(url: str, n: int, step: float) -> float:
    """Until no job is pending or running; check all ``n`` are done; return that time."""
    with psycopg.connect(url, autocommit=True) as conn:
        committed = wait_until(lambda: not unfinished(conn), step=step)
        done = count_done(conn)
    if done != n:
        raise RuntimeError(f"{done} of {n} jobs done")
    return committed


# -- sqljobs in this process ---------------------------------------------------------------


class Countdown:
    """Counts handler calls from any thread; ``done`` is set at the expected total."""

    def __init__(self, expected: int) -> None:
        self.expected = expected
        self.hits = 0
        self.done = threading.Event()
        self._lock = threading.Lock()

    def hit(self) -> None:
        with self._lock:
            self.hits += 1
            if self.hits == self.expected:
                self.done.set()

    def wait(self) -> None:
        if not self.done.wait(WAIT_LIMIT):
            raise TimeoutError(f"only {self.hits} of {self.expected} jobs ran")


@contextmanager
def running_worker(app: sqljobs.App, **options: Any) -> Iterator[sqljobs.Worker]:
    """A worker in a background thread, stopped gracefully and joined on exit."""
    worker = sqljobs.Worker(app, install_signal_handlers=False, **options)
    thread = threading.Thread(target=worker.run, name="bench-worker", daemon=True)
    thread.start()
    try:
        yield worker
    finally:
        worker.stop()
        thread.join(WAIT_LIMIT)
        if thread.is_alive():
            raise RuntimeError("worker did not stop")


def wait_idle(app: sqljobs.App, workers: int = 1) -> None:
    """Until the worker(s) registered and had a moment to go idle."""
    wait_until(lambda: app.stats().workers >= workers, step=0.01)
    time.sleep(0.2)


def drain_in_thread(url: str, n: int, concurrency: int = 8, prefetch: int = 0) -> Sample:
    """From worker start until ``n`` pre-enqueued no-op jobs are committed ``done``."""
    app = sqljobs.App(url)
    countdown = Countdown(n)
    register_tasks(app, countdown.hit)
    try:
        app.migrate()
        app.tasks["noop"].enqueue_many([(i,) for i in range(n)])
        started = time.perf_counter()
        with running_worker(app, concurrency=concurrency, prefetch=prefetch) as worker:
            countdown.wait()
            committed = wait_committed(url, n, step=0.001)
            claims = worker.counters["claims"]
    finally:
        app.close()
    return {"jobs_per_s": n / (committed - started), "claims": float(claims)}


def enqueue_bulk(url: str, n: int) -> Sample:
    """One ``enqueue_many`` of ``n`` jobs (one statement, one transaction)."""
    app = sqljobs.App(url)
    register_tasks(app)
    try:
        app.migrate()  # schema creation is not part of the figure
        started = time.perf_counter()
        handles = app.tasks["noop"].enqueue_many([(i,) for i in range(n)])
        elapsed = time.perf_counter() - started
    finally:
        app.close()
    if len(handles) != n:
        raise RuntimeError(f"enqueue_many returned {len(handles)} handles for {n} jobs")
    return {"jobs_per_s": n / elapsed}


def article(url: str, n: int = ARTICLE_JOBS, work: float = 0.002, prefetch: int = 0) -> Sample:
    """The article's workload: ``n`` jobs of ``work`` s on an idle worker at concurrency 8."""
    app = sqljobs.App(url)
    countdown = Countdown(n)

    @app.task(name="work_2ms")
    def work_2ms(i: int) -> None:
        time.sleep(work)
        countdown.hit()

    try:
        app.migrate()
        with running_worker(app, concurrency=8, prefetch=prefetch):
            wait_idle(app)
            started = time.perf_counter()
            work_2ms.enqueue_many([(i,) for i in range(n)])
            enqueued = time.perf_counter()
            countdown.wait()
            committed = wait_committed(url, n, step=0.0005)
    finally:
        app.close()
    return {"after_enqueue_ms": (committed - enqueued) * 1000,
            "total_ms": (committed - started) * 1000}  # fmt: skip


# -- sqljobs worker subprocesses -----------------------------------------------------------


def start_worker(url: str, folder: Path, *args: str) -> subprocess.Popen[bytes]:
    """``python -m sqljobs --app postgres_bench:worker_app worker ...``, logging to a file."""
    env = dict(os.environ, BENCH_PG_OUT=str(folder / "latency.txt"))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(HERE), env.get("PYTHONPATH")) if p)
    command = [sys.executable, "-m", "sqljobs", "--app", "postgres_bench:worker_app",
               "--url", url, "worker", *args]  # fmt: skip
    with open(folder / "worker.log", "wb") as sink:
        return subprocess.Popen(command, env=env, cwd=HERE, stdout=sink, stderr=subprocess.STDOUT)


def stop_worker(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM (graceful drain), then kill if it does not exit."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextmanager
def worker_process(url: str, *args: str) -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    """A worker subprocess and its scratch folder; the log is shown if it dies early."""
    with tempfile.TemporaryDirectory(prefix="sqljobs-pgbench-") as tmp:
        folder = Path(tmp)
        proc = start_worker(url, folder, *args)
        try:
            yield proc, folder
        finally:
            stop_worker(proc)


def alive(proc: subprocess.Popen[bytes], folder: Path) -> bool:
    """True while the worker runs; its log tail in the error once it has died."""
    if proc.poll() is not None:
        tail = (folder / "worker.log").read_text(errors="replace")[-2000:]
        raise RuntimeError(f"worker exited with {proc.returncode}:\n{tail}")
    return True


def drain_in_processes(url: str, n: int, processes: int, concurrency: int = 8) -> Sample:
    """Idle worker process(es), then ``n`` jobs in one ``enqueue_many``: from its commit
    until every outcome is committed (the workers learn of the burst by NOTIFY)."""
    app = sqljobs.App(url)
    register_tasks(app)
    try:
        app.migrate()
        args = ["--concurrency", str(concurrency), "--processes", str(processes)]
        with worker_process(url, *args) as (proc, folder):
            wait_until(lambda: alive(proc, folder) and app.stats().workers >= processes,
                       step=0.02)  # fmt: skip
            time.sleep(0.3)
            app.tasks["noop"].enqueue_many([(i,) for i in range(n)])
            enqueued = time.perf_counter()
            committed = wait_committed(url, n, step=0.005)
    finally:
        app.close()
    return {"jobs_per_s": n / (committed - enqueued)}


def read_delays(folder: Path) -> list[float]:
    path = folder / "latency.txt"
    return [float(x) for x in path.read_text().split()] if path.exists() else []


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a live process, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def xacts(name: str) -> tuple[int, int]:
    """Transactions committed + rolled back in database ``name``, and its backends, read
    from the admin database so the reading itself is not counted."""
    with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
        row = conn.execute(
            "SELECT xact_commit + xact_rollback, numbackends FROM pg_stat_database"
            " WHERE datname = %s", (name,)).fetchone()  # fmt: skip
    if row is None:
        raise RuntimeError(f"no statistics for database {name}")
    return int(row[0]), int(row[1])


def percentile(values: list[float], pct: float) -> float:
    """Nearest-rank percentile: simple, and honest for a few hundred samples."""
    ordered = sorted(values)
    rank = max(1, round(pct / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def measure_latency(app: sqljobs.App, proc: subprocess.Popen[bytes], folder: Path,
                    n: int, gap: float) -> Sample:  # fmt: skip
    """``n`` single enqueues ``gap`` s apart; each handler records now minus the enqueue."""
    stamp = app.tasks["stamp"]
    stamp.enqueue(time.time())  # warm-up: waits for the worker to come up
    wait_until(lambda: alive(proc, folder) and len(read_delays(folder)) >= 1, step=0.01)
    time.sleep(0.2)
    calls = []  # how long each enqueue() took: tells a slow commit from a slow worker
    for _ in range(n):
        sent = time.time()
        stamp.enqueue(sent)
        calls.append(time.time() - sent)
        time.sleep(gap)
    wait_until(lambda: alive(proc, folder) and len(read_delays(folder)) >= n + 1, step=0.01)
    delays = read_delays(folder)[1:]
    return {"p50_ms": percentile(delays, 50) * 1000, "p99_ms": percentile(delays, 99) * 1000,
            "max_ms": max(delays) * 1000, "enqueue_p50_ms": percentile(calls, 50) * 1000,
            "enqueue_max_ms": max(calls) * 1000}  # fmt: skip


def measure_idle(name: str, pid: int, seconds: float) -> Sample:
    """Transactions/s of database ``name`` over ``seconds``, and the worker's CPU share."""
    before, backends = xacts(name)
    cpu, wall = cpu_seconds(pid), time.perf_counter()
    time.sleep(seconds)
    after, _ = xacts(name)
    cpu, wall = cpu_seconds(pid) - cpu, time.perf_counter() - wall
    return {"xacts_per_s": (after - before) / wall, "cpu_pct": 100 * cpu / wall,
            "backends": float(backends)}  # fmt: skip


def latency(url: str, n: int = LATENCY_JOBS, gap: float = 0.02) -> Sample:
    """Enqueue-to-start from this process to an idle worker subprocess."""
    app = sqljobs.App(url)
    register_tasks(app)
    try:
        app.migrate()
        with worker_process(url, "--concurrency", "8") as (proc, folder):
            return measure_latency(app, proc, folder, n, gap)
    finally:
        app.close()


def idle_cost(url: str, seconds: float = IDLE_SECONDS) -> Sample:
    """A fresh worker process alone on its own database, after a settle: transactions/s
    from pg_stat_database, read from another database so the reading is not counted.

    PostgreSQL 15 flushes a busy backend's counters at most once a second (an idle one's
    within 10 s), so a worker that has just run jobs would show a late burst of them; this
    one has only started up, and the figure is good to about one second of its queries."""
    app = sqljobs.App(url)
    register_tasks(app)
    try:
        app.migrate()
        with worker_process(url, "--concurrency", "8") as (proc, folder):
            wait_idle(app)
            app.close()  # from here only the worker is connected to this database
            time.sleep(IDLE_SETTLE)
            sample = measure_idle(url.rsplit("/", 1)[1], proc.pid, seconds)
            alive(proc, folder)
            return sample
    finally:
        app.close()


# -- physical references -------------------------------------------------------------------

UPDATE_SCRIPT = (
    "\\set aid random(1, 100000 * :scale)\n"
    "UPDATE pgbench_accounts SET abalance = abalance + 1 WHERE aid = :aid;\n"
)


def pgbench_update(url: str, clients: int = 8, seconds: int = PGBENCH_SECONDS) -> Sample:
    """Autocommit single-row UPDATE transactions per second (``pgbench -f``, 8 clients)."""
    name = url.rsplit("/", 1)[1]
    base = ["-h", "127.0.0.1", "-p", "5432", "-U", "postgres"]
    subprocess.run(["pgbench", "-i", "-q", *base, name], check=True, capture_output=True)
    with tempfile.NamedTemporaryFile("w", suffix=".sql") as script:
        script.write(UPDATE_SCRIPT)
        script.flush()
        done = subprocess.run(["pgbench", "-n", "-c", str(clients), "-j", "2", "-T",
                               str(seconds), "-f", script.name, *base, name],
                              check=True, capture_output=True, text=True)  # fmt: skip
    match = re.search(r"tps = ([\d.]+) \(without initial", done.stdout)
    if match is None:
        raise RuntimeError(f"no tps in pgbench output:\n{done.stdout}")
    return {"tps": float(match.group(1))}


BARE_SCHEMA = """
CREATE TABLE bare_jobs (
    id bigserial PRIMARY KEY, queue text NOT NULL DEFAULT 'default', payload text NOT NULL,
    state text NOT NULL DEFAULT 'pending', run_at timestamptz NOT NULL DEFAULT now(),
    token bigint NOT NULL DEFAULT 0, started_at timestamptz, finished_at timestamptz);
CREATE INDEX bare_jobs_pending ON bare_jobs (run_at, id) WHERE state = 'pending'
"""
BARE_CLAIM = """
WITH picked AS MATERIALIZED (
    SELECT id FROM bare_jobs WHERE state = 'pending' AND run_at <= now()
    ORDER BY run_at, id LIMIT 100 FOR UPDATE SKIP LOCKED)
UPDATE bare_jobs AS j SET state = 'running', token = j.token + 1, started_at = now()
FROM picked WHERE j.id = picked.id RETURNING j.id, j.token, j.payload
"""
BARE_COMPLETE = """
UPDATE bare_jobs AS j SET state = 'done', finished_at = now()
FROM unnest(%s::bigint[], %s::bigint[]) AS o(id, token)
WHERE j.id = o.id AND j.token = o.token AND j.state = 'running'
"""


def _bare_loop(conn: psycopg.Connection[Any], done: list[int]) -> None:
    """Claim 100, complete 100, until the table has nothing pending for this connection."""
    while rows := conn.execute(BARE_CLAIM).fetchall():
        conn.execute(BARE_COMPLETE, ([r[0] for r in rows], [r[1] for r in rows]))
        done.append(len(rows))


def bare_loop(url: str, n: int = BARE_JOBS, connections: int = 8) -> Sample:
    """A bare psycopg loop on ``connections`` threads: claim 100 and complete 100 per
    statement, each an autocommit transaction. What the hot path costs with no library."""
    with psycopg.connect(url, autocommit=True) as setup:
        setup.execute(BARE_SCHEMA)
        setup.execute("INSERT INTO bare_jobs (payload) SELECT '[' || i || ']' "
                      "FROM generate_series(1, %s) AS i", (n,))  # fmt: skip
    conns = [psycopg.connect(url, autocommit=True) for _ in range(connections)]
    done: list[int] = []
    try:
        threads = [threading.Thread(target=_bare_loop, args=(c, done)) for c in conns]
        started = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join(WAIT_LIMIT)
        elapsed = time.perf_counter() - started
    finally:
        for c in conns:
            c.close()
    if sum(done) != n:
        raise RuntimeError(f"bare loop finished {sum(done)} of {n} jobs")
    return {"jobs_per_s": n / elapsed}


# -- running the cases ---------------------------------------------------------------------


def in_scratch(tag: str, body: Callable[[str], Sample]) -> Case:
    """A case that runs ``body`` on a fresh scratch database."""

    def case() -> Sample:
        with scratch_db(tag) as url:
            return body(url)

    return case


def collect(runs: int, cases: dict[str, Case]) -> dict[str, Figures]:
    """Run every case once per round, ``runs`` rounds; a failed run is logged and skipped."""
    out: dict[str, Figures] = {label: {} for label in cases}
    for round_ in range(1, runs + 1):
        for label, case in cases.items():
            started = time.perf_counter()
            try:
                sample = case()
            except Exception as exc:
                log(f"  {label} run {round_}/{runs}: FAILED: {exc!r}")
                traceback.print_exc(file=sys.stderr)
                continue
            shown = ", ".join(f"{k}={v:,.4g}" for k, v in sample.items())
            log(f"  {label} run {round_}/{runs}: {shown} ({time.perf_counter() - started:.1f} s)")
            for key, value in sample.items():
                out[label].setdefault(key, []).append(value)
    return out


# -- rows ----------------------------------------------------------------------------------

Row = dict[str, Any]


def fmt(value: float, unit: str) -> str:
    if math.isnan(value):
        return "-"
    if unit == "x":
        return f"{value:.2f}x"
    if unit in ("%", "ms") or abs(value) < 10:
        return f"{value:,.1f}"
    return f"{value:,.0f}"


def check(value: float, target: str | None) -> bool | None:
    """``target`` is ">= N", "<= N" or "< N" (N may have thousands separators)."""
    if target is None:
        return None
    if math.isnan(value):
        return False
    op, number = target.split()
    limit = float(number.replace(",", ""))
    return {">=": value >= limit, "<=": value <= limit, "<": value < limit}[op]


def row(benchmark: str, system: str, runs: list[float], unit: str,
        target: str | None = None, note: str = "") -> Row:  # fmt: skip
    """A row holding the median of ``runs`` (NaN if every run failed)."""
    value = statistics.median(runs) if runs else math.nan
    if len(runs) > 1:
        note = f"{note}; runs " if note else "runs "
        note += " / ".join(fmt(v, unit) for v in runs)
    if not runs:
        note = f"ERROR: every run failed; {note}"
    return {"benchmark": benchmark, "system": system, "value": value, "unit": unit,
            "target": target, "passed": check(value, target), "note": note}  # fmt: skip


def ratio(benchmark: str, system: str, top: Row, bottom: Row, unit: str = "x",
          target: str | None = None, note: str = "") -> Row:  # fmt: skip
    """A row holding the ratio of two medians (``unit`` "%" shows it as a percentage)."""
    value = top["value"] / bottom["value"] if bottom["value"] else math.nan
    if unit == "%":
        value *= 100
    return {"benchmark": benchmark, "system": system, "value": value, "unit": unit,
            "target": target, "passed": check(value, target), "note": note}  # fmt: skip


# -- the benchmarks ------------------------------------------------------------------------


def bench_drain(runs: int) -> list[Row]:
    """Drain no-op jobs at concurrency 8, with the physical references in the same rounds."""
    got = collect(runs, {
        "sqljobs": in_scratch("drain", lambda u: drain_in_thread(u, DRAIN_JOBS)),
        "sqljobs pf16": in_scratch("drainpf",
                                   lambda u: drain_in_thread(u, DRAIN_JOBS, prefetch=16)),
        "sqljobs 1 proc": in_scratch("drain1p", lambda u: drain_in_processes(u, DRAIN_JOBS, 1)),
        "sqljobs 2 procs": in_scratch("drain2p",
                                      lambda u: drain_in_processes(u, DRAIN_JOBS, 2)),
        "pgqueuer": in_scratch("pgq", lambda u: pg_peers.pgqueuer_drain(u, PGQUEUER_JOBS)),
        "pgqueuer defaults": in_scratch(
            "pgqdef", lambda u: pg_peers.pgqueuer_drain(u, PGQUEUER_DEFAULTS_JOBS, None)),
        "procrastinate": in_scratch(
            "proc", lambda u: pg_peers.procrastinate_drain(u, PROCRASTINATE_JOBS)),
        "pgbench": in_scratch("pgbench", pgbench_update),
        "bare": in_scratch("bare", bare_loop),
    })  # fmt: skip
    b = "drain no-op jobs, c=8"

    def med(label: str, system: str, unit: str = "jobs/s", key: str = "jobs_per_s",
            target: str | None = None, note: str = "") -> Row:  # fmt: skip
        return row(b, system, got[label].get(key, []), unit, target, note)

    n = f"{DRAIN_JOBS:,}"
    sq = med("sqljobs", "sqljobs Worker (thread)", target=">= 8,000",
             note=f"{n} pre-enqueued; worker start -> last outcome committed")  # fmt: skip
    sq16 = med("sqljobs pf16", "sqljobs Worker (thread), prefetch=16",
               note="as above; claims up to 8 + 16 jobs at a time")  # fmt: skip
    sq1 = med("sqljobs 1 proc", "sqljobs CLI worker, 1 process",
              note=f"{n}; enqueue_many commit -> last outcome committed")  # fmt: skip
    sq2 = med("sqljobs 2 procs", "sqljobs CLI worker, --processes 2", note="as above, 2 x c=8")
    pq = med("pgqueuer", "pgqueuer", note=f"{PGQUEUER_JOBS:,}; max_concurrent_tasks=8, "
             "batch_size=4; worker start -> last handler returned")  # fmt: skip
    pqd = med("pgqueuer defaults", "pgqueuer, its defaults",
              note=f"{PGQUEUER_DEFAULTS_JOBS:,}; batch_size=10, no in-flight cap")  # fmt: skip
    pr = med("procrastinate", "procrastinate", note=f"{PROCRASTINATE_JOBS:,} (its rate falls "
             "as its table grows); concurrency=8, async task; -> last handler")  # fmt: skip
    pgb = med("pgbench", "pgbench single-row UPDATE, 8 clients", "tx/s", "tps",
              note=f"-c 8 -j 2 -T {PGBENCH_SECONDS}; one UPDATE per transaction")  # fmt: skip
    ba = med("bare", "bare psycopg loop, 8 connections",
             note=f"{BARE_JOBS:,}; SKIP LOCKED claim 100 + complete 100 per statement")  # fmt: skip
    claims = med("sqljobs", "sqljobs claim queries", "claims", "claims",
                 note=f"for {n} jobs (thread worker)")  # fmt: skip
    return [
        sq, sq16, sq1, sq2, pq, pqd, pr, pgb, ba, claims,
        ratio(b, "sqljobs / pgqueuer", sq, pq, target=">= 5"),
        ratio(b, "sqljobs / pgqueuer (its defaults)", sq, pqd),
        ratio(b, "sqljobs / procrastinate", sq, pr, target=">= 25"),
        ratio(b, "sqljobs prefetch=16 / pgqueuer", sq16, pq),
        ratio(b, "sqljobs prefetch=16 / procrastinate", sq16, pr),
        ratio(b, "sqljobs / pgbench UPDATE tx/s", sq, pgb, "%", note="jobs/s per tx/s"),
        ratio(b, "sqljobs / bare loop", sq, ba, "%"),
        ratio(b, "sqljobs prefetch=16 / pgbench UPDATE tx/s", sq16, pgb, "%"),
        ratio(b, "sqljobs prefetch=16 / bare loop", sq16, ba, "%"),
        ratio(b, "sqljobs 2 procs / 1 proc", sq2, sq1),
    ]  # fmt: skip


def bench_enqueue(runs: int) -> list[Row]:
    """Bulk enqueue 10,000 jobs in one call."""
    n = ENQUEUE_JOBS
    got = collect(runs, {
        "sqljobs": in_scratch("enq", lambda u: enqueue_bulk(u, n)),
        "pgqueuer": in_scratch("pgqenq", lambda u: pg_peers.pgqueuer_enqueue(u, n)),
        "procrastinate": in_scratch("procenq", lambda u: pg_peers.procrastinate_enqueue(u, n)),
    })  # fmt: skip
    b = f"bulk enqueue {n // 1000}k"
    sq = row(b, "sqljobs enqueue_many", got["sqljobs"].get("jobs_per_s", []), "jobs/s",
             ">= 50,000", "one INSERT ... unnest, one transaction")  # fmt: skip
    pq = row(b, "pgqueuer Queries.enqueue(lists)", got["pgqueuer"].get("jobs_per_s", []),
             "jobs/s")  # fmt: skip
    pr = row(b, "procrastinate batch_defer_async", got["procrastinate"].get("jobs_per_s", []),
             "jobs/s")  # fmt: skip
    return [sq, pq, pr, ratio(b, "sqljobs / pgqueuer", sq, pq),
            ratio(b, "sqljobs / procrastinate", sq, pr)]  # fmt: skip


def bench_article(runs: int) -> list[Row]:
    """The reference article: 200 jobs of time.sleep(0.002) on an idle worker, c=8."""
    got = collect(runs, {
        "sqljobs": in_scratch("article", article),
        "prefetch": in_scratch("articlepf", lambda u: article(u, prefetch=16)),
    })  # fmt: skip
    b = f"{ARTICLE_JOBS} x 2 ms jobs, c=8"
    sq, pf = got["sqljobs"], got["prefetch"]
    return [
        row(b, "sqljobs enqueue done -> all done", sq.get("after_enqueue_ms", []), "ms",
            "< 80", "until the last outcome is committed; ideal 50 ms"),
        row(b, "sqljobs enqueue start -> all done", sq.get("total_ms", []), "ms",
            note="includes the enqueue_many of 200"),
        row(b, "sqljobs prefetch=16: enqueue done -> all done", pf.get("after_enqueue_ms", []),
            "ms"),
    ]  # fmt: skip


def bench_latency(runs: int) -> list[Row]:
    """Enqueue-to-start to an idle worker subprocess; what a fresh idle worker costs."""
    both = collect(runs, {"latency": in_scratch("latency", latency),
                          "idle": in_scratch("idle", idle_cost)})  # fmt: skip
    got = both["latency"] | both["idle"]
    b = "latency / idle, worker subprocess"
    note = f"{LATENCY_JOBS} single enqueues 20 ms apart, LISTEN/NOTIFY; includes the enqueue"
    idle_note = (f"pg_stat_database xact deltas over {IDLE_SECONDS:g} s, fresh worker alone on "
                 "its database (pg_stat_statements is not preloaded)")  # fmt: skip
    return [
        row(b, "enqueue -> start p50", got.get("p50_ms", []), "ms", "< 3", note),
        row(b, "enqueue -> start p99", got.get("p99_ms", []), "ms", "< 10"),
        row(b, "enqueue -> start max", got.get("max_ms", []), "ms"),
        row(b, "enqueue() call p50", got.get("enqueue_p50_ms", []), "ms",
            note="INSERT + NOTIFY, one durable commit"),
        row(b, "enqueue() call max", got.get("enqueue_max_ms", []), "ms",
            note="a spike here is the commit, not the worker"),
        row(b, "idle worker: transactions/s", got.get("xacts_per_s", []), "xact/s", "<= 1",
            idle_note),
        row(b, "idle worker: CPU", got.get("cpu_pct", []), "%", note="from /proc"),
        row(b, "idle worker: backends", got.get("backends", []), "conns",
            note="pool + LISTEN connections"),
    ]  # fmt: skip


BENCHMARKS: dict[str, Callable[[int], list[Row]]] = {
    "drain": bench_drain,
    "enqueue": bench_enqueue,
    "article": bench_article,
    "latency": bench_latency,
}


def run_postgres(quick: bool) -> list[Row]:
    """Every PostgreSQL benchmark: 1 repetition if ``quick``, else 3; rows of medians."""
    runs = 1 if quick else 3
    rows: list[Row] = []
    for name, bench in BENCHMARKS.items():
        log(f"postgres {name}: {bench.__doc__}")
        rows += bench(runs)
    return rows


# -- output --------------------------------------------------------------------------------


def table(rows: list[Row], title: str) -> Table:
    t = Table(title=title)
    for col, justify in (("benchmark", "left"), ("system", "left"), ("median", "right"),
                         ("unit", "left"), ("target", "left"), ("status", "left"),
                         ("note", "left")):  # fmt: skip
        t.add_column(col, justify=justify)  # type: ignore[arg-type]
    previous = ""
    for r in rows:
        if previous and r["benchmark"] != previous:
            t.add_section()
        previous = r["benchmark"]
        status = {True: "[green]PASS[/]", False: "[bold red]MISS[/]", None: ""}[r["passed"]]
        t.add_row(r["benchmark"], r["system"], fmt(r["value"], r["unit"]), r["unit"],
                  r["target"] or "", status, r["note"])  # fmt: skip
    return t


def versions() -> str:
    from importlib.metadata import version

    with psycopg.connect(ADMIN_URL) as conn:
        server = conn.info.server_version
    peers = ", ".join(f"{p} {version(p)}" for p in ("pgqueuer", "procrastinate"))
    return f"sqljobs {sqljobs.__version__}, PostgreSQL {server // 10000}, {peers}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="one run per benchmark")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    rows = run_postgres(args.quick)
    elapsed = time.perf_counter() - started
    runs = 1 if args.quick else 3
    console = Console(width=max(180, Console().width))
    console.print(table(rows, f"sqljobs on PostgreSQL: median of {runs} run(s); {versions()}; "
                              f"{os.cpu_count()} cpus"))  # fmt: skip
    misses = sum(r["passed"] is False for r in rows)
    console.print(f"{misses} target(s) missed; took {elapsed:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
