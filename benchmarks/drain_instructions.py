"""Instructions per drained job, counted by valgrind: a drain figure that does not move with
the machine's load, for telling a real drop from noise (issue 11).

    python benchmarks/drain_instructions.py [SRC ...]

Each SRC is a checkout's ``src`` (``git worktree add /tmp/old REV``, then ``/tmp/old/src``);
with none, this checkout's. For each, a worker drains 1,000 and then 5,000 no-op jobs
enqueued beforehand, under ``valgrind --tool=callgrind``; the difference, over 4,000 jobs,
is what one job costs, start-up and enqueue left out. The same for the SQLite backend's
claim/complete loop alone (the five-argument call of backend_loop.py), so a change shows
as the worker's or the statements'. On a shared two-core machine wall-clock drains of the
same revision differ by 10-20% from run to run; these counts by well under 1%.

Needs valgrind (``apt-get install valgrind``); about a minute per revision.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

LEASES = {"noop": 30.0}

SMALL, LARGE = 1_000, 5_000
HERE = Path(__file__).resolve().parent


def claim_call(backend: Any, limit: int) -> Callable[[list[Any]], tuple[list[int], list[Any]]]:
    """``finish_and_claim`` of ``limit`` noop jobs as the revision imported here takes it:
    one ``Claim`` record, or before those, five positional arguments."""
    try:
        from sqljobs.backends.base import Claim
    except ImportError:
        return lambda outcomes: backend.finish_and_claim(outcomes, "w", None, limit, LEASES)
    claim = Claim("w", None, limit, LEASES)
    return lambda outcomes: backend.finish_and_claim(outcomes, claim)


def prepare(path: str, n: int) -> None:
    """A migrated SQLite file holding ``n`` pending no-op jobs."""
    import sqljobs_cases

    app = sqljobs_cases.new_app(f"sqlite:///{path}")
    app.tasks["noop"].enqueue_many([(i,) for i in range(n)])
    app.close()


def drain(path: str, n: int) -> None:
    """A worker (defaults, as run.py's drain) until ``n`` outcomes are committed."""
    import sqljobs_cases
    from common import Countdown

    countdown = Countdown(n)
    app = sqljobs_cases.new_app(f"sqlite:///{path}", countdown.hit)
    with sqljobs_cases.running_worker(app) as worker:
        countdown.wait()
        while worker.counters["done"] < n:
            time.sleep(0.001)
    app.close()


def loop(path: str, _n: int) -> None:
    """The backend's claim/complete loop alone, 64 a claim."""
    from sqljobs.backends.sqlite import SqliteBackend
    from sqljobs.jobs import JobState, Outcome

    backend = SqliteBackend(path, synchronous="NORMAL")
    outcomes: list[Outcome] = []
    finish_and_claim = claim_call(backend, 64)
    while True:
        _, jobs = finish_and_claim(outcomes)
        if not jobs:
            break
        outcomes = [Outcome(j.id, j.token, JobState.DONE) for j in jobs]
    backend.finish_jobs(outcomes)
    backend.close()


STEPS = {"prepare": prepare, "drain": drain, "loop": loop}


def counted(src: str, step: str, n: int) -> int:
    """Instructions valgrind counted for ``step`` over ``n`` jobs (and the start-up)."""
    env = {"PYTHONPATH": f"{src}:{HERE}", "PATH": "/usr/bin:/bin"}
    with tempfile.TemporaryDirectory() as folder:
        path = f"{folder}/jobs.db"
        child = [sys.executable, __file__, "--child"]
        subprocess.run([*child, "prepare", path, str(n)], env=env, check=True)
        valgrind = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={folder}/out"]
        done = subprocess.run(
            [*valgrind, *child, step, path, str(n)],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
    found = re.search(r"Collected : (\d+)", done.stderr)
    if found is None:
        raise RuntimeError(f"no instruction count from valgrind: {done.stderr[-500:]}")
    return int(found.group(1))


def main(args: list[str]) -> None:
    if args[:1] == ["--child"]:
        step, path, n = args[1:]
        STEPS[step](path, int(n))
        return
    for src in args or [str(HERE.parent / "src")]:
        figures = []
        for step in ("drain", "loop"):
            extra = counted(src, step, LARGE) - counted(src, step, SMALL)
            figures.append(f"{step} {extra / (LARGE - SMALL) / 1000:,.1f}k")
        print(f"{src}: instructions per job: {', '.join(figures)}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
