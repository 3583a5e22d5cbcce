"""What hooks, middleware and tracing cost a drain and an enqueue, on SQLite (issue 14).

    python benchmarks/hooks_cost.py [ROUNDS]

A worker drains 5,000 no-op jobs, and 1,000 jobs are enqueued one at a time, with: nothing
registered; a ``job_done`` hook; one middleware; tracing with an SDK whose spans go
nowhere. Rounds interleave the cases; each figure is the median, and the ratio is to the
case with nothing registered. With nothing registered the worker's per-job cost is one
``is None`` check (see benchmarks/drain_instructions.py for a count that does not move
with the machine's load).
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable, Generator
from typing import Any

from common import log, scratch_dir
from sqljobs_cases import new_app, running_worker

import sqljobs

DRAINED, ENQUEUED = 5_000, 1_000


def nothing(app: sqljobs.App) -> None:
    """No hook, middleware or tracing."""


def done_hook(app: sqljobs.App) -> None:
    app.on("job_done", lambda event: None)


def middleware(app: sqljobs.App) -> None:
    def passes(info: sqljobs.AttemptInfo) -> Generator[None, Any, None]:
        yield

    app.middleware(passes)


def tracing(app: sqljobs.App) -> None:
    from opentelemetry.sdk.trace import TracerProvider

    app.enable_tracing(TracerProvider())  # spans are recorded, and exported nowhere


CASES: dict[str, Callable[[sqljobs.App], None]] = {
    "nothing": nothing,
    "job_done hook": done_hook,
    "middleware": middleware,
    "tracing": tracing,
}


def one_round(folder: str, name: str, setup: Callable[[sqljobs.App], None]) -> tuple[float, float]:
    """(drained jobs/s, enqueues/s) for one case on a fresh database."""
    app = new_app(f"sqlite:///{folder}/{name.replace(' ', '_')}-{time.monotonic_ns()}.db")
    setup(app)
    noop = app.tasks["noop"]
    started = time.perf_counter()
    for i in range(ENQUEUED):
        noop.enqueue(i)
    enqueue_rate = ENQUEUED / (time.perf_counter() - started)
    noop.enqueue_many([(i,) for i in range(DRAINED - ENQUEUED)])
    started = time.perf_counter()
    with running_worker(app) as worker:
        while worker.counters["done"] < DRAINED:
            time.sleep(0.001)
        drain_rate = DRAINED / (time.perf_counter() - started)
    app.close()
    return drain_rate, enqueue_rate


def main(rounds: int) -> None:
    figures: dict[str, list[tuple[float, float]]] = {name: [] for name in CASES}
    with scratch_dir() as folder:
        for r in range(rounds):
            for name, setup in CASES.items():
                figures[name].append(one_round(str(folder), name, setup))
            log(f"round {r + 1} of {rounds} done")
    base_drain = statistics.median(d for d, _ in figures["nothing"])
    base_enqueue = statistics.median(e for _, e in figures["nothing"])
    print(f"{'case':<16}{'drain jobs/s':>14}{'ratio':>8}{'enqueues/s':>12}{'ratio':>8}")
    for name, values in figures.items():
        drain = statistics.median(d for d, _ in values)
        enqueue = statistics.median(e for _, e in values)
        print(f"{name:<16}{drain:>14,.0f}{drain / base_drain:>8.2f}"
              f"{enqueue:>12,.0f}{enqueue / base_enqueue:>8.2f}")  # fmt: skip


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 3)
