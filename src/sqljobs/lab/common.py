"""Helpers the experiments share: bulk enqueue, an effect counter, threads that start together."""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from ..app import App
from ..enqueue import build_job, insert
from ..jobs import EnqueueOptions
from ..worker import Worker, WorkerConfig


def enqueue(app: App, task: str, queue: str, args: Iterable[Sequence[Any]]) -> list[int]:
    """Insert one job per argument list into ``queue``, in one round trip, via the library
    (with the registered task's lease and retry policy, if ``app`` has the task)."""
    now = app.clock()
    opts = EnqueueOptions(queue=queue)
    registered = app.tasks.get(task)
    jobs = [build_job(app, task, list(a), {}, opts, now, registered) for a in args]
    return [h.id for h in insert(app, jobs)]


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


@contextmanager
def worker_thread(app: App, **options: Any) -> Iterator[Worker]:
    """Run a library Worker on a thread of this process; stop it at the end of the block
    (gracefully, unless ``worker.stop(immediate=True)`` was called first)."""
    options.setdefault("install_signal_handlers", False)
    worker = Worker(app, WorkerConfig(**options))
    errors: list[BaseException] = []

    def target() -> None:
        try:
            worker.run()
        except BaseException as exc:  # re-raised below
            errors.append(exc)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    try:
        yield worker
    finally:
        worker.stop()
        thread.join(60)
    if errors:
        raise errors[0]


class Starts:
    """Handler-side log of (job id, attempt, wall time) for in-process experiments."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.entries: list[tuple[int, int, float]] = []

    def add(self, job: int, attempt: int) -> None:
        with self._lock:
            self.entries.append((job, attempt, time.time()))
