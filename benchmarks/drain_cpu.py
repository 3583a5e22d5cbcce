"""How much of the machine one draining worker process keeps busy: the ceiling on what a
second process (``sqljobs worker --processes 2``) can add.

    python benchmarks/drain_cpu.py [--backend sqlite|postgres] [--jobs 40000] [--rounds 3]

Drains ``--jobs`` pre-enqueued no-op jobs with one in-process Worker (concurrency 8,
default settings) and reads, from ``/proc``, the CPU time used during the drain by this
process and, on PostgreSQL, by every server process, against the wall time and the
machine's cores. A drain that keeps ``C`` cores busy out of ``N`` can scale by at most
``N / C`` with more processes if each job costs them the same CPU. Prints each round's
measured figures and that bound, derived from them.

Every process named ``postgres`` on the host counts as the server's (so run it on a
quiet server), and this process's own polling for the end (every 0.5 ms) counts as the
worker's: both err towards more cores busy, so a smaller bound.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import tempfile
import time
from pathlib import Path

import pg_server
import sqljobs_cases
from common import cpu_seconds, wait_until


def _own_cpu() -> float:
    """User and system time of this process, every thread's, ended ones too."""
    times = os.times()
    return times.user + times.system


def _server_pids() -> list[int]:
    """Every PostgreSQL server process on this host (the postmaster and its backends)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "comm").read_text().strip() in ("postgres", "postmaster"):
                    pids.append(int(entry.name))
            except OSError:
                continue
    return pids


def _servers_cpu() -> dict[int, float]:
    """CPU seconds so far of each server process alive now."""
    return {pid: t for pid in _server_pids() if (t := cpu_seconds(pid)) is not None}


def one_round(backend: str, jobs: int) -> tuple[float, float, float]:
    """(jobs/s, cores busy in this process, cores busy in the server's processes)."""
    with contextlib.ExitStack() as stack:
        if backend == "postgres":
            url = stack.enter_context(pg_server.scratch_db("cpu"))
        else:
            url = f"sqlite:///{stack.enter_context(tempfile.TemporaryDirectory())}/jobs.db"
        app = sqljobs_cases.new_app(url)
        stack.callback(app.close)
        app.tasks["noop"].enqueue_many([(i,) for i in range(jobs)])
        servers = _servers_cpu() if backend == "postgres" else {}
        own = _own_cpu()
        began = time.perf_counter()
        with sqljobs_cases.running_worker(app, concurrency=8) as worker:
            wait_until(lambda: worker.counters["done"] >= jobs, step=0.0005)
            wall = time.perf_counter() - began
            own = _own_cpu() - own
            # read before the worker closes its connections: their server processes end
            after = _servers_cpu() if backend == "postgres" else {}
    server = sum(t - servers.get(pid, 0.0) for pid, t in after.items())
    return jobs / wall, own / wall, server / wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--jobs", type=int, default=40_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    cores = len(os.sched_getaffinity(0))  # the cores this process may use
    for n in range(args.rounds):
        rate, own, server = one_round(args.backend, args.jobs)
        busy = own + server
        print(
            f"round {n + 1}: {rate:,.0f} jobs/s; cores busy: worker process "
            f"{own:.2f}, server {server:.2f}, together {busy:.2f} of {cores}; so more processes "
            f"can add at most {cores / busy:.2f}x (derived)"
        )


if __name__ == "__main__":
    main()
