"""Gaps in a PostgreSQL drain: the longest pause between consecutive job starts.

    python benchmarks/drain_gaps.py [--rounds 16] [--jobs 5000] [--concurrency 8]
                                    [--gap-ms 200]

Each round: a fresh database (CREATE DATABASE, then migrate), ``--jobs`` no-op jobs
enqueued in one ``enqueue_many``, then one worker process (``app.run_worker``) started in
a subprocess that imports only sqljobs. Each job's handler writes its start time
(``time.monotonic()``, one ``os.write`` of one line, to a file opened for appending) as its
first act. Once every job has started, the worker is stopped (SIGTERM) and the database
dropped. Per round it prints the drain (first start to last start, and worker spawn to
last start) and the largest gap between consecutive starts, with how many jobs were still
unstarted when it began; at the end, the number of rounds with a gap over ``--gap-ms``.
A figure measured here, on this machine, in one run.

``BENCH_PG_URL`` (else ``SQLJOBS_TEST_PG``) names the admin database (see pg_server.py).
"""

from __future__ import annotations

import argparse
import itertools
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pg_server

import sqljobs

WORKER = """
import os, sys, time
import sqljobs
url, out, concurrency = sys.argv[1], sys.argv[2], int(sys.argv[3])
fd = os.open(out, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
app = sqljobs.App(url)
@app.task(name="gap")
def gap(i: int) -> None:
    os.write(fd, b"%.6f\\n" % time.monotonic())
app.run_worker(concurrency=concurrency)
"""

START_LIMIT = 120.0
"""Seconds a round may take before it is given up as stuck."""


def one_round(jobs: int, concurrency: int, folder: Path, n: int) -> tuple[float, float, float, int]:
    """(first-to-last start, spawn-to-last start, largest gap, jobs unstarted at the gap)."""
    out = folder / f"starts-{n}.txt"
    with pg_server.scratch_db("gaps") as url:
        app = sqljobs.App(url)

        @app.task(name="gap")
        def gap(i: int) -> None:  # the worker's twin: only its name and signature count
            pass

        app.migrate()
        gap.enqueue_many([(i,) for i in range(jobs)])
        app.close()
        spawned = time.monotonic()
        worker = subprocess.Popen(
            [sys.executable, "-c", WORKER, url, str(out), str(concurrency)],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )  # fmt: skip
        try:
            deadline = spawned + START_LIMIT
            while True:
                if worker.poll() is not None:
                    raise RuntimeError(f"worker exited: {worker.stderr.read().decode()[-2000:]}")  # type: ignore[union-attr]
                if out.exists() and out.read_bytes().count(b"\n") >= jobs:
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"round {n}: not every job started in {START_LIMIT} s")
                time.sleep(0.05)
        finally:
            worker.send_signal(signal.SIGTERM)
            worker.wait(timeout=30)
    starts = sorted(float(line) for line in out.read_text().split())
    gaps = [(b - a, i) for i, (a, b) in enumerate(itertools.pairwise(starts))]
    largest, at = max(gaps)
    return starts[-1] - starts[0], starts[-1] - spawned, largest, len(starts) - at - 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=16)
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--gap-ms", type=float, default=200.0)
    args = parser.parse_args()
    why = pg_server.unreachable()
    if why:
        raise SystemExit(why)
    over = 0
    with tempfile.TemporaryDirectory() as folder:
        for n in range(1, args.rounds + 1):
            drain, total, gap, left = one_round(args.jobs, args.concurrency, Path(folder), n)
            stalled = gap * 1000 > args.gap_ms
            over += stalled
            print(
                f"round {n:2d}: drain {drain * 1000:7.1f} ms (spawn to last start "
                f"{total * 1000:7.1f} ms), largest gap {gap * 1000:7.1f} ms with {left} "
                f"jobs unstarted{'  <-- stall' if stalled else ''}",
                flush=True,
            )
    print(f"rounds with a gap over {args.gap_ms:g} ms: {over} of {args.rounds}")


if __name__ == "__main__":
    main()
