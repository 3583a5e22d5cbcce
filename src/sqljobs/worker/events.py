"""What a worker reports as it goes: claimed, started, finished, released, lease lost,
timed out, discarded. Tests wait on these instead of sleeping; the dashboard and metrics
can count them.

Hooks run on the thread where the event happens (the coordinator, or an executor thread
for ``started``): they must be quick and thread-safe. :class:`EventLog` is one such hook
that also lets a caller block until an event arrives.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from ..jobs import ClaimedJob

log = logging.getLogger("sqljobs.worker")

EventKind = Literal[
    "claimed",
    "started",
    "finished",
    "parked",
    "released",
    "lease_lost",
    "timed_out",
    "discarded",
    "cancelled",
]


@dataclass(frozen=True)
class WorkerEvent:
    """One thing that happened to one job in a worker. ``state`` is where a finished job
    went (done, pending for a retry, dead); ``detail`` says more where there is more."""

    kind: EventKind
    job_id: int
    task: str
    attempt: int
    worker: str
    state: str | None = None
    detail: str | None = None
    queue: str | None = None


OnEvent = Callable[[WorkerEvent], None]


@dataclass(frozen=True)
class Pass:
    """What one pass of the coordinator (:meth:`Worker.run_once`) did: jobs claimed,
    handler results collected, jobs released; ``stopped`` once a stop has finished (all
    held jobs finished or released); ``wait``, the seconds it may sleep unless woken."""

    claimed: int
    finished: int
    released: int
    stopped: bool
    wait: float


class EventLog:
    """A hook that keeps every event and wakes whoever waits for one.

    ``worker = Worker(app, on_event=(log := EventLog()))``, then
    ``log.wait("finished", job_id=7)`` blocks until job 7 finished (or fails the wait
    after ``timeout`` seconds with the events seen so far)."""

    def __init__(self) -> None:
        self.events: list[WorkerEvent] = []
        self._changed = threading.Condition()

    def __call__(self, event: WorkerEvent) -> None:
        with self._changed:
            self.events.append(event)
            self._changed.notify_all()

    def of(
        self, kind: EventKind, job_id: int | None = None, state: str | None = None
    ) -> list[WorkerEvent]:
        """The events of ``kind`` so far (for one job, and with one state, if given)."""
        with self._changed:
            return self._of(kind, job_id, state)

    def wait(
        self,
        kind: EventKind,
        job_id: int | None = None,
        *,
        state: str | None = None,
        count: int = 1,
        timeout: float = 30.0,
    ) -> list[WorkerEvent]:
        """Block until ``count`` events of ``kind`` (for ``job_id``, with ``state``, if
        given) have happened; return them. Raises ``TimeoutError`` naming what was seen."""
        with self._changed:
            if self._changed.wait_for(lambda: len(self._of(kind, job_id, state)) >= count, timeout):
                return self._of(kind, job_id, state)
            seen = ", ".join(f"{e.kind}:{e.job_id}" for e in self.events[-20:])
        raise TimeoutError(
            f"waited {timeout:g} s for {count} {kind!r} event(s)"
            f"{'' if job_id is None else f' of job {job_id}'}; last seen: {seen or 'none'}"
        )

    def _of(self, kind: EventKind, job_id: int | None, state: str | None) -> list[WorkerEvent]:
        return [
            e
            for e in self.events
            if e.kind == kind and job_id in (None, e.job_id) and state in (None, e.state)
        ]


def job_event(
    kind: EventKind,
    job: ClaimedJob,
    worker: str,
    state: str | None = None,
    detail: str | None = None,
) -> WorkerEvent:
    """The event ``kind`` about one claimed job."""
    return WorkerEvent(kind, job.id, job.task, job.attempt, worker, state, detail, job.queue)


class Emitter:
    """Tells a worker's ``on_event`` hook what happened to one job; a hook that raises is
    logged, never fatal. ``on_event`` is None when nobody listens: the per-job paths
    check that before they build anything for an event."""

    def __init__(self, on_event: OnEvent | None, worker: str) -> None:
        self.on_event = on_event
        self.worker = worker

    def __call__(
        self, kind: EventKind, job: ClaimedJob, state: str | None = None, detail: str | None = None
    ) -> None:
        if self.on_event is None:
            return
        event = job_event(kind, job, self.worker, state, detail)
        try:
            self.on_event(event)
        except Exception:
            log.exception("worker %s: the on_event hook raised on %s", self.worker, event)
