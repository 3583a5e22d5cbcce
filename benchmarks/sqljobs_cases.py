"""sqljobs itself, measured the same way on any database URL, with its default settings.

Throughput runs the worker in a thread of this process (``install_signal_handlers=False``),
so handler calls are counted exactly and ``Worker.counters['done']``, bumped once an
outcome is committed, tells when the last one is, without a query spent watching. Latency
and idle cost run the real command line in a subprocess (``worker_app.py``), which learns
of new jobs only through the database, as in production.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import startup_probe
import worker_app
from common import (
    WAIT_LIMIT,
    Case,
    Countdown,
    Row,
    Sample,
    Target,
    collect,
    cpu_seconds,
    percentile,
    scratch_dir,
    wait_until,
)

import sqljobs

HERE = Path(__file__).resolve().parent


def new_app(url: str, on_noop: Callable[[], None] | None = None) -> sqljobs.App:
    """An App with the benchmark tasks, migrated (schema creation is never timed)."""
    app = sqljobs.App(url)
    worker_app.register(app, on_noop)
    app.migrate()
    return app


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


def _committed(worker: sqljobs.Worker, n: int, step: float = 0.0005) -> float:
    return wait_until(lambda: worker.counters["done"] >= n, step=step)


@contextmanager
def done_counter(url: str) -> Iterator[Callable[[], int]]:
    """Count the jobs done, exactly, over one connection kept for the block: stats() stops
    counting at its cap (10,000), too few for a drain of 20,000."""
    sql = "SELECT count(*) FROM sqljobs_jobs WHERE state = 'done'"
    if url.startswith("sqlite:///"):
        with contextlib.closing(sqlite3.connect(url.removeprefix("sqlite:///"))) as conn:
            yield lambda: int(conn.execute(sql).fetchone()[0])
        return
    import psycopg

    with psycopg.connect(url, autocommit=True) as pg:
        yield lambda: int(pg.execute(sql).fetchone()[0])  # type: ignore[index]


def done_in_table(url: str) -> int:
    with done_counter(url) as count:
        return count()


def _check_done(url: str, n: int) -> None:
    done = done_in_table(url)
    if done != n:
        raise RuntimeError(f"{done} of {n} jobs done in the table")


def drain(url: str, n: int, concurrency: int = 8, task: str = "noop", **options: Any) -> Sample:
    """From worker start until ``n`` pre-enqueued no-op jobs have their outcomes committed.
    ``task="anoop"`` drains the ``async def`` twin, run on the worker's event loop."""
    countdown = Countdown(n)
    app = new_app(url, countdown.hit)
    try:
        app.tasks[task].enqueue_many([(i,) for i in range(n)])
        started = time.perf_counter()
        with running_worker(app, concurrency=concurrency, **options) as worker:
            countdown.wait()
            committed = _committed(worker, n)
            claims = worker.counters["claims"]
        countdown.check()
        _check_done(url, n)
    finally:
        app.close()
    return {"jobs_per_s": n / (committed - started), "claims": float(claims)}


def drain_processes(url: str, n: int, processes: int) -> Sample:
    """``sqljobs worker --processes P`` (concurrency 8 in each) draining ``n`` pre-enqueued
    no-op jobs, in a subprocess as in production. The rate is taken between 10% and 90%
    of the jobs done, read from the table every 20 ms: the processes' start-up (imports,
    connections, ~0.2 s) is the same whatever P is and would hide how the drain scales."""
    app = new_app(url)
    try:
        app.tasks["noop"].enqueue_many([(i,) for i in range(n)])
        with scratch_dir() as folder:
            return _processes_rate(url, n, processes, folder)
    finally:
        app.close()


def _processes_rate(url: str, n: int, processes: int, folder: Path) -> Sample:
    worker = WorkerProcess(url, folder, "--processes", str(processes), "--concurrency", "8")
    low, high = 0.1 * n, 0.9 * n
    try:
        with done_counter(url) as count:
            return _rate_between(worker, count, low, high)
    finally:
        worker.stop()


def _rate_between(worker: WorkerProcess, count: Callable[[], int], low: float,
                  high: float) -> Sample:  # fmt: skip
    low_at: float | None = None
    while worker.alive():
        done = count()
        now = time.perf_counter()
        if low_at is None and done >= low:
            low_at = now
        if done >= high and low_at is not None:
            return {"jobs_per_s": (high - low) / (now - low_at)}
        time.sleep(0.02)  # a sampling period, not a wait for an event
    raise AssertionError("unreachable: alive() raises once the worker has exited")


def scaling(db: str, runs: int, place: Callable[[str, Callable[[str], Sample]], Case],
            n: int) -> list[Row]:  # fmt: skip
    """Beyond one thread pool: ``async def`` no-op jobs beside thread ones (in this
    process), and ``sqljobs worker --processes 2`` beside ``--processes 1`` (subprocesses).
    ``place(tag, body)`` runs ``body`` on a fresh database of the suite's backend."""
    r = collect(db, "scaling, c=8", runs, {
        "thread": place("thr", lambda url: drain(url, n)),
        "async": place("asy", lambda url: drain(url, n, task="anoop")),
        "1 process": place("p1", lambda url: drain_processes(url, n, 1)),
        "2 processes": place("p2", lambda url: drain_processes(url, n, 2)),
    })  # fmt: skip
    thread = r.row("thread", "drain, def no-op", note=f"{n:,} jobs; in-process Worker")
    asyncs = r.row("async", "drain, async def no-op", note="on the worker's event loop")
    one = r.row("1 process", "CLI --processes 1", note="rate between 10% and 90% done")
    two = r.row("2 processes", "CLI --processes 2", note="2 cores on this machine")
    return [
        thread, asyncs, one, two,
        r.ratio("async / thread", asyncs, thread, target=Target(">=", 1.0)),
        r.ratio("2 processes / 1", two, one, target=Target(">=", 1.6)),
    ]  # fmt: skip


def enqueue_many(url: str, n: int) -> Sample:
    """One ``enqueue_many`` call of ``n`` jobs: one transaction."""
    app = new_app(url)
    try:
        started = time.perf_counter()
        handles = app.tasks["noop"].enqueue_many([(i,) for i in range(n)])
        elapsed = time.perf_counter() - started
    finally:
        app.close()
    if len(handles) != n:
        raise RuntimeError(f"enqueue_many returned {len(handles)} handles for {n} jobs")
    return {"jobs_per_s": n / elapsed}


def enqueue_loop(url: str, n: int) -> Sample:
    """``n`` single ``enqueue`` calls, each its own durable commit."""
    app = new_app(url)
    noop = app.tasks["noop"]
    try:
        started = time.perf_counter()
        for i in range(n):
            noop.enqueue(i)
        elapsed = time.perf_counter() - started
    finally:
        app.close()
    return {"jobs_per_s": n / elapsed}


def article(url: str, n: int = 200, work: float = 0.002, concurrency: int = 8) -> Sample:
    """The reference article's workload: ``n`` jobs of ``work`` seconds on an idle worker.

    ``after_enqueue_ms`` runs from the return of ``enqueue_many`` to the last outcome
    committed, ``total_ms`` from the start of the enqueue.
    """
    countdown = Countdown(n)
    app = new_app(url)

    @app.task(name="work")
    def work_(i: int) -> None:
        time.sleep(work)
        countdown.hit()

    try:
        with running_worker(app, concurrency=concurrency) as worker:
            wait_until(lambda: app.stats().workers >= 1, step=0.01)
            time.sleep(0.2)  # let it go idle
            started = time.perf_counter()
            work_.enqueue_many([(i,) for i in range(n)])
            enqueued = time.perf_counter()
            countdown.wait()
            committed = _committed(worker, n, step=0.0002)
        countdown.check()
    finally:
        app.close()
    return {"after_enqueue_ms": (committed - enqueued) * 1000,
            "total_ms": (committed - started) * 1000}  # fmt: skip


def startup(url: str) -> Sample:
    """Two worker processes that have only imported sqljobs (``startup_probe.py``; this
    process migrates and enqueues first): to the first job's handler, and to the end of the
    article's 200 jobs of 2 ms, each from the child's ``run_worker()`` call and from the
    moment this process spawned it."""
    sample: Sample = {}
    for mode, figure in (("first", "first_job"), ("article", "article_from_start")):
        got = startup_probe.measure(url, mode, timeout=WAIT_LIMIT)
        sample[f"{figure}_ms"] = got["from_run_worker_ms"]
        sample[f"{figure}_from_launch_ms"] = got["from_launch_ms"]
    return sample


# -- a worker subprocess -------------------------------------------------------------------


class WorkerProcess:
    """``python -m sqljobs --app worker_app:app --url URL worker ARGS``, logging to a file."""

    def __init__(self, url: str, folder: Path, *args: str) -> None:
        self.out, self.log = folder / "latency.txt", folder / "worker.log"
        env = dict(os.environ, BENCH_OUT=str(self.out))
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(HERE), env.get("PYTHONPATH")) if p)
        command = [sys.executable, "-m", "sqljobs", "--app", "worker_app:app", "--url", url,
                   "worker", *args]  # fmt: skip
        with open(self.log, "wb") as sink:
            self.proc = subprocess.Popen(command, env=env, cwd=HERE, stdout=sink, stderr=sink)

    def alive(self) -> bool:
        """True while it runs; raises with the tail of its log once it has died."""
        if self.proc.poll() is not None:
            tail = self.log.read_text(errors="replace")[-2000:]
            raise RuntimeError(f"worker exited with {self.proc.returncode}:\n{tail}")
        return True

    def delays(self) -> list[float]:
        return [float(x) for x in self.out.read_text().split()] if self.out.exists() else []

    def wait_delays(self, count: int) -> None:
        wait_until(lambda: self.alive() and len(self.delays()) >= count, step=0.01)

    def cpu(self) -> float:
        return cpu_seconds(self.proc.pid) or 0.0

    def stop(self) -> None:
        """SIGTERM (graceful drain), then kill if it does not exit."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def idle_then_latency(url: str, n: int = 200, gap: float = 0.02, idle: float = 3.0,
                      settle: float = 0.5, queries: Callable[[], float] | None = None,
                      ) -> Sample:  # fmt: skip
    """A fresh worker subprocess (concurrency 8): first idle, then ``n`` single enqueues
    ``gap`` s apart, each finding it idle.

    Idle comes first, with this process disconnected, so ``queries`` (a cumulative count
    of the database's transactions, read elsewhere) counts the worker's alone, and no
    statistics flushed late from a busy period land in the window.
    """
    app = new_app(url)
    stamp = app.tasks["stamp"]
    with scratch_dir() as folder:
        worker = WorkerProcess(url, folder, "--concurrency", "8")
        try:
            wait_until(lambda: worker.alive() and app.stats().workers >= 1, step=0.02)
            app.close()  # reopened lazily by the first enqueue below
            time.sleep(settle)
            sample = _idle(worker, idle, queries)
            stamp.enqueue(time.time())  # warm-up
            worker.wait_delays(1)
            time.sleep(0.2)
            calls = []  # how long each enqueue() took: tells a slow commit from a slow worker
            for _ in range(n):
                sent = time.time()
                stamp.enqueue(sent)
                calls.append(time.time() - sent)
                time.sleep(gap)
            worker.wait_delays(n + 1)
            delays = worker.delays()[1:]
            # one start per enqueue, in order (each finds the worker idle): the part of
            # each delay after enqueue() returned, i.e. after its commit
            after_commit = [d - c for d, c in zip(delays, calls, strict=True)]
            lags = _result_lags(app, n // 4)
        finally:
            worker.stop()
            app.close()
    return sample | {
        "p50_ms": percentile(delays, 50) * 1000,
        "p99_ms": percentile(delays, 99) * 1000,
        "max_ms": max(delays) * 1000,
        "enqueue_p50_ms": percentile(calls, 50) * 1000,
        "commit_p50_ms": percentile(after_commit, 50) * 1000,
        "commit_p99_ms": percentile(after_commit, 99) * 1000,
        "result_p50_ms": percentile(lags, 50) * 1000,
        "result_p99_ms": percentile(lags, 99) * 1000,
    }


def _result_lags(app: sqljobs.App, n: int) -> list[float]:
    """How long after its completion committed a caller blocked on ``result()`` in this
    process had the value: woken by the notifier, not by its once-a-second look."""
    echo = app.tasks["echo"]
    lags = []
    for i in range(n):
        handle = echo.enqueue(i)
        value = handle.result(timeout=30)
        returned = time.time()
        finished = handle.refresh().finished_at
        if value != i or finished is None:
            raise RuntimeError(f"job {handle.id}: result {value!r}, finished at {finished}")
        lags.append(returned - finished)
    return lags


def _idle(worker: WorkerProcess, seconds: float, queries: Callable[[], float] | None) -> Sample:
    before = queries() if queries else 0.0
    cpu, wall = worker.cpu(), time.perf_counter()
    time.sleep(seconds)
    worker.alive()
    after = queries() if queries else 0.0
    cpu, wall = worker.cpu() - cpu, time.perf_counter() - wall
    sample = {"idle_cpu_pct": 100 * cpu / wall}
    if queries:
        sample["idle_queries_per_s"] = (after - before) / wall
    return sample
