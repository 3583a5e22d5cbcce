"""A worker the test steps itself: one pass of the coordinator at a time, in the test's
own thread, until something it names has happened.

    with stepped_worker(app, concurrency=2) as worker:
        job_id = send.enqueue("ada").id
        worker.until_ended(job_id)
        worker.until_event("finished", state="dead")

Nothing here sleeps for a fixed time. Between passes the stepper waits only until the
worker is woken (a handler returned, a round trip came back, a job was enqueued in this
process) or its own soonest timer is due, exactly as :meth:`Worker.run` waits; the budget
is a number of passes, and running out of it fails the test (``AssertionError``) naming
what never happened and the last events seen.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar, overload

from ..dependencies import Group
from ..jobs import FINISHED_STATES, Job
from ..worker import EventLog, Pass, Worker, WorkerEvent
from ..worker.events import EventKind, OnEvent

if TYPE_CHECKING:
    from ..app import App
    from ..handles import JobHandle

T = TypeVar("T")
R = TypeVar("R")

MAX_STEPS = 2000
"""Passes a wait may take by default. A pass that finds nothing to do waits for a wake-up
or a timer, so the budget bounds a stuck test, not a slow one."""

WAIT_CAP = 0.05
"""Seconds one wait between passes lasts at most, whatever timer the worker named: what
wakes no worker (a handler reaching a line the test waits for, a row another process
wrote) is looked at again within this."""

TIMEOUT = 60.0
"""Seconds a wait may take in all, whatever its budget: a test that waits on a handler
which never returns fails instead of hanging."""


class Stepper:
    """A started :class:`Worker` and the :class:`EventLog` it reports to, stepped by the
    test (see :func:`stepped_worker`)."""

    def __init__(self, worker: Worker, events: EventLog) -> None:
        self.worker = worker
        self.events = events
        self.passes = 0
        self.last: Pass | None = None

    @property
    def app(self) -> App:
        return self.worker.app

    @property
    def id(self) -> str:
        """The worker's id (as ``app.workers()`` and a job's history name it)."""
        return self.worker.id

    @property
    def counters(self) -> collections.Counter[str]:
        """The worker's counters (claims, claimed, finished, loops, ...)."""
        return self.worker.counters

    def step(self) -> Pass:
        """One pass of the coordinator (:meth:`Worker.run_once`), without waiting first."""
        self.last = self.worker.run_once()
        self.passes += 1
        return self.last

    def until(
        self,
        done: Callable[[], T | None],
        *,
        max_steps: int = MAX_STEPS,
        what: str = "",
        timeout: float = TIMEOUT,
    ) -> T:
        """Step until ``done()`` returns something true, and return it. Checks before the
        first pass, so a condition already met takes none. Raises ``AssertionError``
        after ``max_steps`` passes or ``timeout`` seconds, or if the worker stopped first
        (a stop that finished ends its passes)."""
        value = done()
        if value:
            return value
        began, steps = time.monotonic(), 0
        while True:
            if steps >= max_steps or time.monotonic() - began > timeout:
                self._exhausted(what or _name(done), steps, began)
            step = self.step()
            steps += 1
            value = done()
            if value:
                return value
            if step.stopped:
                self._exhausted(what or _name(done), steps, began, "the worker stopped")
            self.worker.wait_for_wakeup(min(step.wait, WAIT_CAP))

    def until_event(
        self,
        kind: EventKind,
        job_id: int | None = None,
        *,
        state: str | None = None,
        count: int = 1,
        max_steps: int = MAX_STEPS,
    ) -> list[WorkerEvent]:
        """Step until ``count`` events of ``kind`` (about ``job_id``, ending in ``state``,
        if given) are in the worker's event log; return them all."""

        def seen() -> list[WorkerEvent]:
            found = self.events.of(kind, job_id, state)
            return found if len(found) >= count else []

        about = "" if job_id is None else f" of job {job_id}"
        ending = "" if state is None else f" ending {state}"
        return self.until(
            seen, max_steps=max_steps, what=f"{count} {kind!r} event(s){about}{ending}"
        )

    def until_ended(self, job_id: int, *, max_steps: int = MAX_STEPS) -> Job:
        """Step until job ``job_id`` is done, dead or cancelled in the database; return it.
        The worker's ``finished`` event may follow a pass later (an outcome written with a
        claim is accounted for when the claim's round trip returns)."""

        def ended() -> Job | None:
            job = self.app.get_job(job_id)
            return job if job is not None and job.state in FINISHED_STATES else None

        return self.until(ended, max_steps=max_steps, what=f"job {job_id} ending")

    @overload
    def result(self, handle: JobHandle[R], *, max_steps: int = ...) -> R: ...
    @overload
    def result(self, handle: Group, *, max_steps: int = ...) -> Any: ...

    def result(self, handle: JobHandle[Any] | Group, *, max_steps: int = MAX_STEPS) -> Any:
        """Step until the job of ``handle`` (a group's callback, or else every member)
        ended, then its result as ``handle.result()`` gives it: ``JobFailed`` for a job
        that ended dead, ``JobCancelled`` for one cancelled."""
        if isinstance(handle, Group):
            waited = [handle.then] if handle.then is not None else handle.members
        else:
            waited = [handle]
        for one in waited:
            self.until_ended(one.id, max_steps=max_steps)
        return handle.result(timeout=0)

    def stop(self, immediate: bool = False, *, max_steps: int = MAX_STEPS) -> Pass:
        """Stop the worker (drain, or release at once) and step until the stop finished."""
        self.worker.stop(immediate)
        return self.until(self._stopped, max_steps=max_steps, what="the worker's stop")

    def _stopped(self) -> Pass | None:
        return self.last if self.last is not None and self.last.stopped else None

    def _exhausted(self, what: str, steps: int, began: float, why: str = "") -> None:
        seen = ", ".join(f"{e.kind}:{e.job_id}" for e in self.events.events[-20:])
        raise AssertionError(
            f"{what} never happened: {why or f'{steps} passes'} in "
            f"{time.monotonic() - began:.2f} s of worker {self.worker.id} "
            f"(last events: {seen or 'none'})"
        )


@contextmanager
def stepped_worker(
    app: App, *, on_event: OnEvent | None = None, **options: Any
) -> Iterator[Stepper]:
    """A :class:`Worker` of ``app`` (``options`` as :class:`WorkerConfig` takes them),
    started but not running: the test steps it with the returned :class:`Stepper`. At
    the end it stops as SIGTERM would (a drain, then the jobs still running released)
    and closes. Signal handlers are not installed unless asked for. ``on_event`` is told
    of every event too, beside the stepper's own log."""
    options.setdefault("install_signal_handlers", False)
    events = EventLog()
    hook: OnEvent = events
    if on_event is not None:
        also = on_event

        def hook(event: WorkerEvent) -> None:
            events(event)
            also(event)

    worker = Worker(app, on_event=hook, **options)
    with worker:
        yield Stepper(worker, events)


def _name(done: Callable[[], Any]) -> str:
    return getattr(done, "__qualname__", None) or repr(done)
