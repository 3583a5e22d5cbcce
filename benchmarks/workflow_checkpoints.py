"""What a workflow step's checkpoint costs, and what it would cost written otherwise.

    python benchmarks/workflow_checkpoints.py [sqlite|postgres] [--rounds 3]

A worker in this process (``sqljobs.Worker``, in a thread) runs one workflow of 1,000
no-op steps at concurrency 1, then 400 workflows of 10 at concurrency 8, on a fresh
database each, for three ways of writing a checkpoint, in alternating rounds:

- ``durable``: as sqljobs writes it, a durable commit on the worker's connections
  (PostgreSQL: one autocommit statement that sets ``synchronous_commit`` for its own
  commit, which waits for the WAL flush; SQLite: ``synchronous=FULL`` for it, an fsync
  of the WAL);
- ``full``: the same durable commit in one round trip, on a worker opened with
  ``synchronous="FULL"`` (a public worker option that makes every write of the worker
  durable, claims and outcomes too);
- ``async``: a what-if, not a setting: the worker backend's ``durable`` swapped for its
  ``write`` in this process (and on PostgreSQL the statement's own setting taken out), so
  a checkpoint commits as the worker's claims and outcomes
  do (PostgreSQL ``synchronous_commit = off``, SQLite ``NORMAL``): one round trip, no
  flush waited for.

Prints workflows/s and the step call's p50/p90/p99 (``time.perf_counter()`` around each
``wf.step``), the median of the rounds.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from itertools import pairwise
from typing import Any

from common import log, percentile, scratch_dir

import sqljobs

VARIANTS = ("durable", "full", "async")


class _App(sqljobs.App):
    """An App whose worker backend writes checkpoints as ``variant`` says."""

    variant = "durable"

    def _open_backend(self, **options: Any) -> Any:
        backend = super()._open_backend(**options)
        if self.variant == "async":
            backend.durable = backend.durable_write = backend.write  # type: ignore[method-assign]
            durable = "set_config('synchronous_commit', 'on', true)"
            if durable in backend.sql.get("save_step", ""):  # PostgreSQL's, said in the SQL
                sql = dict(backend.sql)
                sql["save_step"] = sql["save_step"].replace(durable, "'no flush awaited'")
                backend.sql = sql
        return backend


def run(url: str, variant: str, workflows: int, steps: int, concurrency: int) -> dict[str, float]:
    times: list[float] = []
    lock = threading.Lock()
    app = _App(url)
    app.variant = variant

    def noop() -> None:
        return None

    @app.workflow(name="steps")
    def flow(wf: sqljobs.Workflow, n: int) -> None:
        marks = [time.perf_counter()]
        for i in range(n):
            wf.step(f"s{i}", noop)
            marks.append(time.perf_counter())
        with lock:
            times.extend(b - a for a, b in pairwise(marks))

    app.migrate()
    flow.enqueue_many([(steps,)] * workflows)
    options = {"synchronous": "FULL"} if variant == "full" else {}
    worker = sqljobs.Worker(app, install_signal_handlers=False, concurrency=concurrency,
                            **options)  # fmt: skip
    thread = threading.Thread(target=worker.run, daemon=True)
    started = time.perf_counter()
    thread.start()
    while len(times) < workflows * steps:
        time.sleep(0.005)
    elapsed = time.perf_counter() - started
    worker.stop()
    thread.join(60)
    app.close()
    return {
        "wf_per_s": workflows / elapsed,
        "p50_ms": percentile(times, 50) * 1000,
        "p90_ms": percentile(times, 90) * 1000,
        "p99_ms": percentile(times, 99) * 1000,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("engine", nargs="?", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    shapes = {"1 x 1,000 steps, c=1": (1, 1000, 1), "400 x 10 steps, c=8": (400, 10, 8)}
    found: dict[tuple[str, str], list[dict[str, float]]] = {}
    for round_ in range(1, args.rounds + 1):
        for shape, (workflows, steps, concurrency) in shapes.items():
            for variant in VARIANTS:
                with scratch_dir() as folder:
                    if args.engine == "sqlite":
                        got = run(f"sqlite:///{folder / 'db.sqlite'}", variant, workflows,
                                  steps, concurrency)  # fmt: skip
                    else:
                        import pg_server

                        with pg_server.scratch_db("wfck") as url:
                            got = run(url, variant, workflows, steps, concurrency)
                log(f"round {round_} {shape} {variant}: "
                    + ", ".join(f"{k}={v:.3f}" for k, v in got.items()))  # fmt: skip
                found.setdefault((shape, variant), []).append(got)
    print(f"{args.engine}, median of {args.rounds} round(s):")
    for (shape, variant), samples in found.items():
        med = {k: statistics.median(s[k] for s in samples) for k in samples[0]}
        print(
            f"  {shape:22} {variant:8} {med['wf_per_s']:8.1f} wf/s   step p50 "
            f"{med['p50_ms']:.3f}  p90 {med['p90_ms']:.3f}  p99 {med['p99_ms']:.3f} ms"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
