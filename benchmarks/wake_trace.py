"""Where an idle worker's enqueue-to-start goes, step by step, measured on one machine.

    python benchmarks/wake_trace.py [--backend postgres|sqlite] [--jobs 200] [--gap 0.02]

A worker (concurrency 8, default settings) runs on a thread of this process; another
process enqueues ``--jobs`` single jobs, ``--gap`` seconds apart, so each finds the worker
idle. Every step is stamped with the system-wide monotonic clock, which both processes
read alike: the enqueue call's start and return (in the producer), the change signal's
arrival (``Subscribers.wake``, on the notifier's thread), the claim round trip's start and
end (``finish_and_claim``), and the handler's start. The printed p50 and p99 of each step
are measured, one run; compare them with each other, not across runs. Wrapping the
methods costs a few microseconds a step.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pg_server
from common import percentile
from sqljobs_cases import running_worker

import sqljobs
from sqljobs.notifiers.base import Subscribers

ROOT = Path(__file__).resolve().parent.parent

PRODUCER = """
import json, sys, time
import sqljobs
app = sqljobs.App(sys.argv[1])
trace = app.task(name="trace")(lambda i: None)
trace.enqueue(-1)  # connect and warm up before the timed enqueues
time.sleep(0.3)
stamps = []
for i in range(int(sys.argv[2])):
    sent = time.monotonic()
    trace.enqueue(i)
    stamps.append((sent, time.monotonic()))
    time.sleep(float(sys.argv[3]))
app.close()
print(json.dumps(stamps))
"""


class Stamps:
    """Monotonic times of one kind of event, appended from any thread."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self._lock = threading.Lock()

    def add(self) -> None:
        with self._lock:
            self.times.append(time.monotonic())

    def last_between(self, low: float, high: float) -> float | None:
        """The latest stamp in [low, high]: the signal that led to a claim."""
        with self._lock:
            return max((x for x in self.times if low <= x <= high), default=None)


class Trips:
    """Each claim round trip's start and end, and the ids of the jobs it claimed."""

    def __init__(self) -> None:
        self.by_job: dict[int, tuple[float, float]] = {}
        self._lock = threading.Lock()

    def wrap(self, owner: type) -> Callable[[], None]:
        """Record ``owner.finish_and_claim``'s trips; returns what undoes it."""
        own = "finish_and_claim" in owner.__dict__  # else inherited: undone by deleting
        original: Callable[..., Any] = owner.finish_and_claim  # type: ignore[attr-defined]

        def stamped(*args: Any, **kwargs: Any) -> Any:
            began = time.monotonic()
            written, jobs = original(*args, **kwargs)
            ended = time.monotonic()
            with self._lock:
                self.by_job.update((job.id, (began, ended)) for job in jobs)
            return written, jobs

        owner.finish_and_claim = stamped  # type: ignore[attr-defined]
        if own:
            return lambda: setattr(owner, "finish_and_claim", original)
        return lambda: delattr(owner, "finish_and_claim")


@contextmanager
def stamping(wakes: Stamps, trips: Trips, backend_type: type) -> Iterator[None]:
    """Stamp every change signal's arrival and every claim round trip, for the block."""
    original_wake = Subscribers.__dict__["wake"]

    def wake(self: Subscribers, *args: Any, **kwargs: Any) -> None:
        wakes.add()
        original_wake(self, *args, **kwargs)

    Subscribers.wake = wake  # type: ignore[method-assign]
    undo = trips.wrap(backend_type)
    try:
        yield
    finally:
        Subscribers.wake = original_wake  # type: ignore[method-assign]
        undo()


def trace(url: str, jobs: int, gap: float) -> tuple[dict[str, list[float]], int]:
    """Each step's durations in seconds, one entry per job whose every step was seen,
    and how many jobs were not (no signal between the enqueue and its claim: found by
    the worker's fallback poll, or claimed by a trip another signal started)."""
    app = sqljobs.App(url)
    started: dict[int, tuple[float, int]] = {}

    @app.task(name="trace")
    def trace_(ctx: sqljobs.JobContext, i: int) -> None:
        started[i] = (time.monotonic(), ctx.job_id)

    app.migrate()
    probe = app._open_backend()
    backend_type = type(probe)
    probe.close()
    wakes, trips = Stamps(), Trips()
    with stamping(wakes, trips, backend_type), running_worker(app, concurrency=8):
        out = subprocess.run(
            [sys.executable, "-c", PRODUCER, url, str(jobs), str(gap)],
            check=True, capture_output=True, text=True, cwd=ROOT,
        ).stdout  # fmt: skip
        deadline = time.monotonic() + 10
        while len(started) < jobs + 1 and time.monotonic() < deadline:
            time.sleep(0.01)  # a sampling period: the handlers' stamps are all we wait for
    app.close()
    steps: dict[str, list[float]] = {k: [] for k in STEPS}
    unmatched = 0
    for i, (sent, returned) in enumerate(json.loads(out)):
        start, job_id = started.get(i, (None, None))
        trip = trips.by_job.get(job_id) if job_id is not None else None
        wake = wakes.last_between(sent, trip[0]) if trip is not None else None
        if start is None or trip is None or wake is None:
            unmatched += 1
            continue
        claim, back = trip
        for name, value in zip(STEPS, (
            returned - sent, wake - returned, claim - wake, back - claim, start - back,
            start - sent, start - returned,
        ), strict=True):  # fmt: skip
            steps[name].append(value)
    return steps, unmatched


STEPS = (
    "enqueue call (insert, signal, durable commit)",
    "its return -> signal at the worker",
    "signal -> claim sent",
    "claim round trip",
    "claimed -> handler starts",
    "enqueue -> start (whole)",
    "enqueue call's return -> start",
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=["postgres", "sqlite"], default="postgres")
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--gap", type=float, default=0.02)
    args = parser.parse_args()
    if args.backend == "postgres":
        with pg_server.scratch_db("trace") as url:
            steps, unmatched = trace(url, args.jobs, args.gap)
    else:
        with tempfile.TemporaryDirectory() as folder:
            steps, unmatched = trace(f"sqlite:///{folder}/jobs.db", args.jobs, args.gap)
    seen = len(steps[STEPS[0]])
    print(f"{args.backend}: {seen} of {args.jobs} jobs traced ({unmatched} without a signal "
          f"before their claim), each enqueued to an idle worker (concurrency 8), "
          f"{args.gap * 1000:g} ms apart; ms")  # fmt: skip
    print(f"{'step':<48}{'p50':>8}{'p99':>8}")
    for name in STEPS:
        values = steps[name]
        p50, p99 = (percentile(values, p) * 1000 for p in (50, 99))
        print(f"{name:<48}{p50:>8.3f}{p99:>8.3f}")
    print(
        "(a step's signal may arrive before the enqueue call returns: the commit is sent "
        "to listeners as the producer waits for its answer)"
    )


if __name__ == "__main__":
    main()
