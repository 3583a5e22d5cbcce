"""Helpers the experiments share: bulk enqueue, an effect counter, threads that start together."""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from ..app import App
from ..tasks import EnqueueOptions


def enqueue(app: App, task: str, queue: str, args: Iterable[Sequence[Any]]) -> list[int]:
    """Insert one job per argument list into ``queue``, in one round trip, via the library."""
    now = app.clock()
    opts = EnqueueOptions(queue=queue)
    jobs = [app.build_job(task, list(a), {}, opts, now) for a in args]
    return [h.id for h in app.insert(jobs)]


class Effects:
    """The business effect: a thread-safe count of how often each job's effect ran."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.counts: collections.Counter[int] = collections.Counter()

    def apply(self, job: int) -> None:
        with self._lock:
            self.counts[job] += 1

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    @property
    def duplicates(self) -> int:
        return self.total - len(self.counts)

    @property
    def max_runs(self) -> int:
        return max(self.counts.values(), default=0)


def run_threads(n: int, target: Callable[[int], None], timeout: float = 120.0) -> float:
    """Run ``target(i)`` on ``n`` threads released together; return the wall time taken."""
    barrier = threading.Barrier(n + 1)
    errors: list[BaseException] = []

    def body(i: int) -> None:
        barrier.wait()
        try:
            target(i)
        except BaseException as exc:  # re-raised in the caller
            errors.append(exc)

    threads = [threading.Thread(target=body, args=(i,), daemon=True) for i in range(n)]
    for t in threads:
        t.start()
    barrier.wait()
    started = time.perf_counter()
    for t in threads:
        t.join(timeout)
    if errors:
        raise errors[0]
    return time.perf_counter() - started


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0..100) by nearest rank; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, round(q / 100 * len(ordered) + 0.5) - 1))
    return ordered[rank]
