"""The SQLite backend's claim-and-complete loop alone (no worker, no Python around it),
for telling a slower statement from a slower worker when a drain figure drops.

    python benchmarks/backend_loop.py [SRC ...]

Each SRC is a ``src`` directory of a checkout (``git worktree add /tmp/old REV``, then
``/tmp/old/src``); with none, this checkout's. The revisions run in turn, twice, each a
median of 5 drains of 10,000 jobs through ``finish_and_claim`` (64 a claim); one line per
run, in jobs per second, so revisions are compared side by side in one sitting.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

LEASES = {"noop": 30.0}

JOBS = 10_000
BATCH = 64


def claim_call(backend: Any, limit: int) -> Callable[[list[Any]], tuple[list[int], list[Any]]]:
    """``finish_and_claim`` of ``limit`` noop jobs as the revision imported here takes it:
    one ``Claim`` record, or before those, five positional arguments."""
    try:
        from sqljobs.backends.base import Claim
    except ImportError:
        return lambda outcomes: backend.finish_and_claim(outcomes, "w", None, limit, LEASES)
    claim = Claim("w", None, limit, LEASES)
    return lambda outcomes: backend.finish_and_claim(outcomes, claim)


def drain_once() -> float:
    """One drain with the ``sqljobs`` importable here; jobs per second."""
    import sqljobs
    from sqljobs.backends.sqlite import SqliteBackend
    from sqljobs.jobs import JobState, Outcome

    folder = tempfile.mkdtemp()
    app = sqljobs.App(f"sqlite:///{folder}/jobs.db")
    noop = app.task(name="noop")(lambda i: None)
    noop.enqueue_many([(i,) for i in range(JOBS)])
    backend = SqliteBackend(f"{folder}/jobs.db", synchronous="NORMAL")
    started, outcomes = time.perf_counter(), []
    finish_and_claim = claim_call(backend, BATCH)
    while True:
        _, jobs = finish_and_claim(outcomes)
        if not jobs:
            break
        outcomes = [Outcome(j.id, j.token, JobState.DONE) for j in jobs]
    backend.finish_jobs(outcomes)
    took = time.perf_counter() - started
    app.close()
    backend.close()
    return JOBS / took


def main(sources: list[str]) -> None:
    if sources == ["--child"]:
        print(round(statistics.median(drain_once() for _ in range(5))))
        return
    here = str(Path(__file__).resolve().parent.parent / "src")
    for _ in range(2):
        for src in sources or [here]:
            done = subprocess.run(
                [sys.executable, __file__, "--child"],
                env={"PYTHONPATH": src, "PATH": "/usr/bin:/bin"},
                capture_output=True,
                text=True,
                check=True,
            )
            print(f"{src}: {done.stdout.strip()} jobs/s")


if __name__ == "__main__":
    main(sys.argv[1:])
