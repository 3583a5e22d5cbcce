"""A worker's start-up, timed in a process that has only imported sqljobs and defined its
App, as a deployed worker starts: the database is migrated and the jobs are enqueued by
this (parent) process beforehand, so the child's own clock includes the import of the
engine's driver and backend, the connection, the worker's registration and its first
claim. Two figures per run, to the first job's handler (``first``), or to the end of the
reference article's 200 jobs of 2 ms (``article``):

- ``from_run_worker``: from the child's ``run_worker()`` call;
- ``from_launch``: from the parent's clock just before it spawns the child (the
  interpreter's start, ``import sqljobs`` and the App's definition included).

Both clocks are CLOCK_MONOTONIC, which every process of a host shares. Run by
``sqljobs_cases.startup``; by hand it prints milliseconds, a line a round::

    python startup_probe.py sqlite|postgres [ROUNDS]    # a fresh file or database a round
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import sqljobs

ARTICLE_JOBS = 200
HERE = Path(__file__).resolve().parent


def now() -> float:
    return time.clock_gettime(time.CLOCK_MONOTONIC)


def define(app: sqljobs.App, on_hit: object = None) -> None:
    """The probe's two tasks, in the parent (to enqueue) and in the child (to run)."""

    @app.task(name="first")
    def first() -> None:
        if callable(on_hit):
            on_hit()

    @app.task(name="work")
    def work(i: int) -> None:
        time.sleep(0.002)
        if callable(on_hit):
            on_hit()


def child(url: str, mode: str) -> None:
    """Run a worker until ``mode``'s jobs are done; print the run_worker() -> end time
    and the monotonic time of the end, in milliseconds."""
    app = sqljobs.App(url)
    began = [0.0]
    left = [1 if mode == "first" else ARTICLE_JOBS]
    lock = threading.Lock()

    def hit() -> None:
        with lock:
            left[0] -= 1
            if left[0]:
                return
        at = now()
        print(f"{(at - began[0]) * 1000:.3f} {at * 1000:.3f}", flush=True)
        os.kill(os.getpid(), signal.SIGTERM)  # the worker drains and run_worker returns

    define(app, hit)
    began[0] = now()
    app.run_worker(concurrency=8)


def measure(url: str, mode: str, timeout: float = 120.0) -> dict[str, float]:
    """Migrate ``url`` and enqueue ``mode``'s jobs here, then time a child that runs them:
    ``{"from_run_worker_ms": ..., "from_launch_ms": ...}``."""
    app = sqljobs.App(url)
    define(app)
    app.migrate()
    if mode == "first":
        app.enqueue("first")
    else:
        app.tasks["work"].enqueue_many([(i,) for i in range(ARTICLE_JOBS)])
    app.close()
    launched = now()
    out = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--child", url, mode],
        capture_output=True, text=True, timeout=timeout, cwd=HERE,
    )  # fmt: skip
    fields = out.stdout.split()
    if out.returncode != 0 or len(fields) != 2:
        raise RuntimeError(f"startup_probe {mode} failed ({out.returncode}):\n{out.stderr[-2000:]}")
    return {
        "from_run_worker_ms": float(fields[0]),
        "from_launch_ms": float(fields[1]) - launched * 1000,
    }


def _by_hand(engine: str, rounds: int) -> None:
    """``rounds`` rounds of both modes, each on a fresh SQLite file or PostgreSQL database
    (``pg_server``'s scratch databases: BENCH_PG_URL names the server)."""
    import tempfile

    for round_ in range(1, rounds + 1):
        for mode in ("first", "article"):
            if engine == "sqlite":
                with tempfile.TemporaryDirectory() as folder:
                    got = measure(f"sqlite:///{folder}/jobs.db", mode)
            else:
                import pg_server

                with pg_server.scratch_db("startup") as url:
                    got = measure(url, mode)
            print(f"{engine} round {round_} {mode}: run_worker() {got['from_run_worker_ms']:.1f} "
                  f"ms, launch {got['from_launch_ms']:.1f} ms", flush=True)  # fmt: skip


if __name__ == "__main__":
    if sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3])
    else:
        _by_hand(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 3)
