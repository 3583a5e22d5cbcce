"""The soak's conductor: a steady enqueue rate into worker processes for a long time, with
the pruner on, sampled every few seconds; then each figure's trend judged and plotted.

Sampled: worker RSS, the workers' open database connections, the size of sqljobs' tables
and indexes, the WAL, the jobs table's rows, enqueue latency (the producer's calls) and
claim latency (due to started, from the jobs' own times). Each figure is judged by the
median of the run's last third against its middle third (the first third is warm-up):
flat when the ratio stays under the figure's tolerance.

PostgreSQL runs on a server of the run's own (:mod:`tests.pg_cluster`), so its WAL and
connections are the soak's alone.
"""

from __future__ import annotations

import contextlib
import csv
import os
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import sqljobs
from soak import COUNTER_ROWS

ROOT = Path(__file__).resolve().parent.parent
_WORKER = (sys.executable, "-m", "soak.worker")

FIGURES: dict[str, tuple[str, float, float]] = {
    # name: (unit, tolerance as last third / middle third, and a slack in the unit under
    # which a change is noise: a shared machine's latency jumps by milliseconds)
    "worker RSS": ("MiB", 1.10, 2.0),
    "connections": ("", 1.25, 1.0),
    "tables+indexes": ("MiB", 1.25, 1.0),
    "WAL": ("MiB", 1.50, 16.0),
    "job rows": ("", 1.25, 100.0),
    "enqueue p99": ("ms", 2.00, 25.0),
    "claim p50": ("ms", 2.00, 25.0),
    "claim p99": ("ms", 2.00, 50.0),
}


@dataclass(frozen=True)
class Plan:
    """One soak run. The defaults are ``make soak``'s: 30 minutes at 70% of the capacity
    the same workers measured at the start."""

    backend: str  # "sqlite" or "postgres"
    seconds: float = 1800.0
    rate: float | None = None  # jobs per second; None: 70% of the capacity measured first
    workers: int = 2
    concurrency: int = 4
    retain: float = 60.0  # done jobs and idempotency keys kept this long
    prune_every: float = 10.0
    sample_every: float = 10.0


@dataclass
class Report:
    plan: Plan
    samples: list[dict[str, float]] = field(default_factory=list)
    trends: dict[str, tuple[float, float, float]] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    enqueued: int = 0
    done: int = 0
    capacity: float | None = None  # jobs/s the workers drained a backlog at, measured
    rate: float = 0.0
    files: list[Path] = field(default_factory=list)


class _Target:
    """The soak's database and what can be measured of it."""

    def __init__(self, backend: str, scratch: Path, seconds: float = 1800.0) -> None:
        self.cluster: Any = None
        if backend == "sqlite":
            self.path = scratch / "soak.db"
            self.url = f"sqlite:///{self.path}"
        else:
            from tests.pg_cluster import PrivateCluster

            # WAL is recycled at checkpoints (every 5 min by default): a shorter run
            # would see it only grow, so its server checkpoints several times a run
            checkpoint = max(30, min(300, int(seconds / 8)))
            self.cluster = PrivateCluster([f"checkpoint_timeout = '{checkpoint}s'"])
            self.url = self.cluster.url()

    def query(self, sql: str) -> list[tuple[Any, ...]]:
        if self.cluster is None:
            with contextlib.closing(sqlite3.connect(self.path, timeout=30)) as conn:
                return conn.execute(sql).fetchall()
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as conn:
            cursor = conn.execute(sql)
            return cursor.fetchall() if cursor.description is not None else []

    def prepare(self) -> None:
        app = sqljobs.App(self.url)
        app.migrate()
        app.close()
        ddl = "CREATE TABLE soak_counter (id INTEGER PRIMARY KEY, n BIGINT NOT NULL)"
        rows = ", ".join(f"({i}, 0)" for i in range(COUNTER_ROWS))
        if self.cluster is None:
            with contextlib.closing(sqlite3.connect(self.path)) as conn, conn:
                conn.execute(ddl)
                conn.execute(f"INSERT INTO soak_counter VALUES {rows}")
        else:
            self.query(ddl)
            self.query(f"INSERT INTO soak_counter VALUES {rows}")

    def done(self) -> int:
        """Jobs whose effect was written: the counter's rows added up."""
        return int(self.query("SELECT coalesce(sum(n), 0) FROM soak_counter")[0][0])

    def sizes(self) -> tuple[float, float]:
        """(tables and indexes, WAL) in MiB."""
        mib = 1024 * 1024
        if self.cluster is None:
            wal = self.path.with_name(self.path.name + "-wal")
            pages = self.query("PRAGMA page_count")[0][0] * self.query("PRAGMA page_size")[0][0]
            return pages / mib, (wal.stat().st_size if wal.exists() else 0) / mib
        tables = self.query(
            "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE c.relkind = 'r' AND n.nspname = 'public'"
        )[0][0]
        wal = self.query("SELECT coalesce(sum(size), 0) FROM pg_ls_waldir()")[0][0]
        return float(tables) / mib, float(wal) / mib

    def connections(self, pids: list[int]) -> int:
        if self.cluster is not None:
            return int(
                self.query(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                    "AND pid <> pg_backend_pid()"
                )[0][0]
            )
        # SQLite: the workers' open descriptors of the database file (one per connection)
        count = 0
        for pid in pids:
            with contextlib.suppress(OSError):
                for fd in os.listdir(f"/proc/{pid}/fd"):
                    with contextlib.suppress(OSError):
                        if os.readlink(f"/proc/{pid}/fd/{fd}") == str(self.path):
                            count += 1
        return count

    def claim_latencies(self, since: float) -> list[float]:
        """Seconds from due to started, of jobs started since ``since`` (wall clock)."""
        if self.cluster is None:
            rows = self.query(
                f"SELECT started_at - run_at FROM sqljobs_jobs WHERE started_at >= {since!r}"
            )
        else:
            rows = self.query(
                "SELECT extract(epoch FROM started_at - run_at)::float8 FROM sqljobs_jobs "
                f"WHERE started_at >= to_timestamp({since!r})"
            )
        return [float(r[0]) for r in rows if r[0] is not None]

    def close(self) -> None:
        if self.cluster is not None:
            self.cluster.destroy()


def _rss_mib(pid: int) -> float:
    with contextlib.suppress(OSError), open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))]


class _Producer:
    """Enqueues ``rate`` jobs a second in batches every 50 ms, timing each call."""

    def __init__(self, url: str, rate: float) -> None:
        self.app = sqljobs.App(url)

        @self.app.task(name="soak_work")  # the producer's view of the workers' task
        def soak_work(n: int) -> int:
            raise AssertionError("the producer only enqueues")

        self.task = soak_work
        self.rate = rate
        self.sent = 0
        self.latencies: list[float] = []
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        began = time.monotonic()
        try:
            while not self.stop.is_set():
                due = int((time.monotonic() - began) * self.rate) - self.sent
                if due > 0:
                    args = [{"n": self.sent + i} for i in range(due)]
                    t0 = time.perf_counter()
                    self.task.enqueue_many(args)
                    with self.lock:
                        self.latencies.append(time.perf_counter() - t0)
                    self.sent += due
                self.stop.wait(0.05)
        except BaseException as exc:  # reported by the conductor
            self.error = exc

    def take_latencies(self) -> list[float]:
        with self.lock:
            taken, self.latencies = self.latencies, []
        return taken


def run(plan: Plan, out_dir: Path, progress: Callable[[str], None] = lambda _m: None) -> Report:
    """Run ``plan``, write ``soak-<backend>.csv`` and ``.png`` into ``out_dir``."""
    report = Report(plan)
    scratch = Path(tempfile.mkdtemp(prefix=f"sqljobs-soak-{plan.backend}-"))
    target = _Target(plan.backend, scratch, plan.seconds)
    workers: list[subprocess.Popen[bytes]] = []
    producer: _Producer | None = None
    try:
        target.prepare()
        env = dict(
            os.environ,
            SQLJOBS_URL=target.url,
            SOAK_RETAIN=str(plan.retain),
            PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p),
        )
        for n in range(plan.workers):
            with (scratch / f"worker-{n}.log").open("wb") as log:
                workers.append(
                    subprocess.Popen(
                        [*_WORKER, str(plan.concurrency), str(plan.prune_every)],
                        env=env,
                        cwd=ROOT,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                    )
                )
        if plan.rate is None:
            report.capacity = _capacity(target, workers)
            progress(f"capacity {report.capacity:,.0f} jobs/s: soaking at 70% of it")
        report.rate = plan.rate or 0.7 * (report.capacity or 0.0)
        producer = _Producer(target.url, report.rate)
        producer.thread.start()
        began = time.monotonic()
        last = time.time()
        while time.monotonic() - began < plan.seconds:
            time.sleep(plan.sample_every)  # the sampling period itself
            elapsed = time.monotonic() - began
            if producer.error is not None:
                raise producer.error
            dead = [w.pid for w in workers if w.poll() is not None]
            if dead:
                raise RuntimeError(f"soak workers {dead} exited: see {scratch}/worker-*.log")
            now = time.time()
            sample = _sample(target, workers, producer, last, elapsed)
            last = now
            report.samples.append(sample)
            progress(
                f"{elapsed:6.0f} s  rss {sample['worker RSS']:.1f} MiB  rows "
                f"{sample['job rows']:.0f}  db {sample['tables+indexes']:.1f} MiB  wal "
                f"{sample['WAL']:.1f} MiB  claim p99 {sample['claim p99']:.1f} ms"
            )
        producer.stop.set()
        producer.thread.join(10)
        report.enqueued = producer.sent + _probe_jobs(report)
        report.done = target.done()
        _judge(report)
        report.files = _write(report, out_dir)
    except Exception as exc:
        report.problems.append(f"the run failed: {type(exc).__name__}: {exc}")
    finally:
        if producer is not None:
            producer.stop.set()
            producer.app.close()
        for w in workers:
            w.send_signal(signal.SIGTERM)
        for w in workers:
            try:
                w.wait(timeout=30)
            except subprocess.TimeoutExpired:
                w.kill()
        target.close()
    return report


_PROBE = 3000  # jobs the capacity probe drains


def _probe_jobs(report: Report) -> int:
    return _PROBE if report.capacity is not None else 0


def _capacity(target: _Target, workers: list[subprocess.Popen[bytes]]) -> float:
    """Drain a backlog of ``_PROBE`` jobs with the soak's workers and return the rate,
    timed from the first job done to the last (worker start-up excluded)."""
    producer = _Producer(target.url, 0.0)
    try:
        producer.task.enqueue_many([{"n": -1 - i} for i in range(_PROBE)])
    finally:
        producer.app.close()
    first: tuple[float, int] | None = None
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        if any(w.poll() is not None for w in workers):
            raise RuntimeError("a soak worker exited during the capacity probe")
        done = target.done()
        now = time.monotonic()
        if first is None and done > 0:
            first = (now, done)
        elif first is not None and done >= _PROBE:
            return (done - first[1]) / max(now - first[0], 1e-3)
        time.sleep(0.05)  # a poll of the counter the workers' jobs raise
    raise TimeoutError("the capacity probe did not drain in 10 minutes")


def _sample(
    target: _Target,
    workers: list[subprocess.Popen[bytes]],
    producer: _Producer,
    since: float,
    elapsed: float,
) -> dict[str, float]:
    pids = [w.pid for w in workers]
    tables, wal = target.sizes()
    claims = target.claim_latencies(since)
    enqueues = producer.take_latencies()
    return {
        "t": round(elapsed, 1),
        "worker RSS": max(_rss_mib(pid) for pid in pids),
        "connections": float(target.connections(pids)),
        "tables+indexes": tables,
        "WAL": wal,
        "job rows": float(target.query("SELECT count(*) FROM sqljobs_jobs")[0][0]),
        "enqueue p99": _percentile(enqueues, 99) * 1000,
        "claim p50": _percentile(claims, 50) * 1000,
        "claim p99": _percentile(claims, 99) * 1000,
    }


def _judge(report: Report) -> None:
    n = len(report.samples)
    if n < 3:
        report.problems.append(f"only {n} samples: run longer than 3 sample periods")
        return
    middle = report.samples[n // 3 : 2 * n // 3] or report.samples[:1]
    last = report.samples[2 * n // 3 :]
    for name, (unit, tolerance, slack) in FIGURES.items():
        mid = statistics.median(s[name] for s in middle)
        end = statistics.median(s[name] for s in last)
        ratio = end / mid if mid > 0 else (1.0 if end == 0 else float("inf"))
        report.trends[name] = (mid, end, ratio)
        if ratio > tolerance and end - mid > slack:
            report.problems.append(
                f"{name} grew: {mid:.2f} -> {end:.2f} {unit} ({ratio:.2f}x, tolerance "
                f"{tolerance}x or {slack:g} {unit})"
            )
    if report.done < report.enqueued * 0.9:
        report.problems.append(
            f"the workers fell behind: {report.done} of {report.enqueued} jobs done"
        )


def _write(report: Report, out_dir: Path) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = out_dir / f"soak-{report.plan.backend}"
    with stem.with_suffix(".csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(report.samples[0]))
        writer.writeheader()
        writer.writerows(report.samples)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(4, 2, figsize=(11, 11), sharex=True)
    times = [s["t"] / 60 for s in report.samples]
    for ax, (name, (unit, _, _)) in zip(axes.flat, FIGURES.items(), strict=True):
        ax.plot(times, [s[name] for s in report.samples])
        ax.set_title(f"{name} ({unit})" if unit else name)
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
    for ax in axes[-1]:
        ax.set_xlabel("minutes")
    plan = report.plan
    fig.suptitle(
        f"sqljobs soak on {plan.backend}: {report.rate:,.0f} jobs/s for {plan.seconds / 60:g} min, "
        f"{plan.workers} workers x {plan.concurrency}, done jobs kept {plan.retain:g} s"
    )
    fig.tight_layout()
    fig.savefig(stem.with_suffix(".png"), dpi=80)
    plt.close(fig)
    return [stem.with_suffix(".csv"), stem.with_suffix(".png")]


def table(reports: list[Report]) -> str:
    """Each figure's middle-third and last-third medians and their ratio, per run."""
    heads = [f"{r.plan.backend + ' middle -> last (ratio)':>42}" for r in reports]
    lines = [f"{'figure':<16}" + "".join(heads)]
    for name, (unit, _, _) in FIGURES.items():
        cells = []
        for r in reports:
            mid, end, ratio = r.trends.get(name, (0.0, 0.0, 0.0))
            cells.append(f"{mid:10.2f} -> {end:10.2f} {unit:>3} ({ratio:4.2f}x)")
        lines.append(f"{name:<16}" + "".join(f"{c:>42}" for c in cells))
    lines.append(
        f"{'jobs done':<16}" + "".join(f"{f'{r.done:,} of {r.enqueued:,}':>42}" for r in reports)
    )
    return "\n".join(lines)
