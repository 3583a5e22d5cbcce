"""The worker's database round trips (write outcomes, claim the next batch), off the
coordinator thread, several in flight at once.

One round trip at a time leaves the server's other core idle while it runs, and the
worker's threads idle while it waits: on PostgreSQL two are in flight, on two pooled
connections (see docs/performance.md for what that gives). SQLite has one writer,
so it gets one lane, run inline on the coordinator: exactly the synchronous loop. An idle
worker's claim runs inline too (see ``Lanes.send``).
"""

from __future__ import annotations

import collections
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from ..jobs import ClaimedJob, Due, HeldJob, Outcome


@dataclass(eq=False)
class Trip:
    """One round trip: ``outcomes`` to write and up to ``limit`` jobs to claim (0: write
    only). A lane fills in what came back; ``written`` stays None if nothing was written,
    so the coordinator knows to send the outcomes again."""

    outcomes: list[Outcome]
    limit: int
    ask_due: bool = False  # also ask when to look again (after a short batch)
    start_now: int | None = None  # of the jobs claimed, how many start at once
    limited_buffer: int = 0  # how many limited jobs may wait in the buffer
    started: list[HeldJob] = field(default_factory=list)  # buffered jobs that began since
    written: list[int] | None = None
    jobs: list[ClaimedJob] = field(default_factory=list)
    due: Due | None = None
    error: Exception | None = None  # raised again on the coordinator


class Lanes:
    """Runs trips with ``work`` on ``size`` threads (inline when ``size`` is 1) and hands
    them back to the coordinator through ``finished``; ``wake`` tells it one is back."""

    def __init__(
        self, size: int, work: Callable[[Trip], None], wake: Callable[[], None], name: str
    ) -> None:
        self.size = size
        self._work = work
        self._wake = wake
        self._sent: list[Trip] = []  # only the coordinator thread touches this
        self._back: collections.deque[Trip] = collections.deque()
        self._queue: queue.SimpleQueue[Trip | None] = queue.SimpleQueue()
        self._threads = [
            threading.Thread(target=self._loop, name=f"{name}-lane-{i + 1}", daemon=True)
            for i in range(size if size > 1 else 0)
        ]
        for thread in self._threads:
            thread.start()

    @property
    def idle(self) -> int:
        """Lanes free for another trip."""
        return self.size - len(self._sent)

    @property
    def busy(self) -> bool:
        return bool(self._sent)

    @property
    def reserved(self) -> int:
        """Slots promised to claims in flight: their jobs are on their way."""
        return sum(trip.limit for trip in self._sent)

    def send(self, trip: Trip, inline: bool = False) -> None:
        """Start ``trip`` on a lane thread, or run it here (``inline``, or with one lane):
        an idle worker's claim saves two thread hand-offs that way, and nothing else
        would have overlapped it anyway."""
        self._sent.append(trip)
        if self._threads and not inline:
            self._queue.put(trip)
        else:
            self._run(trip)

    def finished(self) -> list[Trip]:
        """The trips that came back since the last call, in the order they came back."""
        trips = []
        while self._back:
            trip = self._back.popleft()
            self._sent.remove(trip)
            trips.append(trip)
        return trips

    def _loop(self) -> None:
        while (trip := self._queue.get()) is not None:
            self._run(trip)
            self._wake()

    def _run(self, trip: Trip) -> None:
        try:
            self._work(trip)
        except Exception as exc:  # a lane never dies: the coordinator decides
            trip.error = exc
        self._back.append(trip)

    def stop(self) -> None:
        for _ in self._threads:
            self._queue.put(None)
        for thread in self._threads:
            thread.join(timeout=5)
