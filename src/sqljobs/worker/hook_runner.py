"""The App's hooks and middleware as one worker runs them.

Middleware runs on the handler's thread (or the event loop), around the handler. Hooks
run on one thread of their own, in the order things happened, so a slow hook (a message
to a chat channel on ``job_dead``) never holds up claims or handlers; a worker that stops
waits for them up to ``HOOKS_STOP_WAIT`` seconds. Outcome hooks (``job_done``,
``job_failed``, ``job_dead``) are told once the outcome is committed: the worker's
``finished`` event (see :mod:`.events`), which fires after the write, is what tells
them.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

from ..hooks import (
    WORKER_EVENTS,
    AttemptInfo,
    EventName,
    Hooks,
    JobEvent,
    WorkerLifecycle,
    through,
    through_async,
)
from ..jobs import JobState
from ..payload import headers
from .events import OnEvent, WorkerEvent
from .execute import Running, failure

log = logging.getLogger("sqljobs.hooks")

HOOKS_STOP_WAIT = 5.0
"""Seconds a stopping worker waits for its hook thread to finish what is queued."""

OUTCOME_EVENTS = frozenset({"job_done", "job_failed", "job_dead", "job_cancelled"})


class WorkerHooks:
    """Built by a worker whose App has middleware or worker hooks (never otherwise: the
    worker's per-job path then only checks for None)."""

    def __init__(
        self,
        hooks: Hooks,
        worker_id: str,
        clock: Callable[[], float],
        on_event: OnEvent | None = None,
    ) -> None:
        self._hooks = hooks
        self._worker_id = worker_id
        self._clock = clock
        self._middleware = tuple(hooks.middleware)
        self._listening = frozenset(e for e in WORKER_EVENTS if hooks.listens(e))
        self._inner = on_event
        self.observes = bool(self._listening & OUTCOME_EVENTS)
        """Outcome hooks are registered: the worker sends us its events."""
        self._runs: dict[tuple[int, int], Running] = {}  # begun, outcome not yet told
        self._queue: queue.SimpleQueue[tuple[str, object] | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None

    # -- the hook thread -----------------------------------------------------------------

    def start(self, queues: tuple[str, ...] | None, concurrency: int) -> None:
        """Say what runs around this worker's jobs; start the hook thread if any hook
        listens, and tell ``worker_started``."""
        log.info(
            "worker %s: %d middleware around each attempt%s; hooks for %s",
            self._worker_id, len(self._middleware), " (tracing)" if self._hooks.traced else "",
            ", ".join(sorted(self._listening)) or "no event",
        )  # fmt: skip
        if not self._listening:
            return
        self._thread = threading.Thread(
            target=self._loop, name=f"sqljobs-{self._worker_id}-hooks", daemon=True
        )
        self._thread.start()
        self._tell(
            "worker_started",
            WorkerLifecycle("worker_started", self._worker_id, queues, concurrency),
        )

    def stop(
        self, queues: tuple[str, ...] | None, concurrency: int, counts: dict[str, int]
    ) -> None:
        """Tell ``worker_stopped`` after everything queued before it, and wait for it."""
        thread, self._thread = self._thread, None
        if thread is None:
            return
        stopped = WorkerLifecycle("worker_stopped", self._worker_id, queues, concurrency, counts)
        self._queue.put(("worker_stopped", stopped))
        self._queue.put(None)
        thread.join(HOOKS_STOP_WAIT)
        if thread.is_alive():
            log.warning(
                "worker %s: hooks still running %.0f s after it stopped; not waited for",
                self._worker_id, HOOKS_STOP_WAIT,
            )  # fmt: skip

    def _tell(self, event: str, data: object) -> None:
        if event in self._listening and self._thread is not None:
            self._queue.put((event, data))

    def _loop(self) -> None:
        while (item := self._queue.get()) is not None:
            self._hooks.emit(*item)

    # -- on the handler's thread ---------------------------------------------------------

    def call(self, run: Running) -> Any:
        """Run the handler of a plain task through the middleware."""
        self._began(run)
        fn = run.task.fn
        try:
            if self._middleware:
                value = through(
                    self._middleware, self._info(run), lambda: fn(*run.call_args(), **run.kwargs)
                )
            else:
                value = fn(*run.call_args(), **run.kwargs)
        except BaseException as exc:
            run.exception, run.ended = exc, time.monotonic()
            raise
        run.ended = time.monotonic()
        return value

    async def call_async(self, run: Running) -> Any:
        """Run the handler of an ``async def`` task through the middleware, on the loop."""
        self._began(run)
        fn = run.task.fn
        try:
            if self._middleware:
                value = await through_async(
                    self._middleware, self._info(run), lambda: fn(*run.call_args(), **run.kwargs)
                )
            else:
                value = await fn(*run.call_args(), **run.kwargs)
        except BaseException as exc:
            run.exception, run.ended = exc, time.monotonic()
            raise
        run.ended = time.monotonic()
        return value

    def _began(self, run: Running) -> None:
        job = run.job
        if self.observes:
            self._runs[(job.id, job.attempt)] = run
        self._tell("job_started", self._job_event("job_started", job.id, job.task, job.queue,
                                                  job.attempt))  # fmt: skip

    def _info(self, run: Running) -> AttemptInfo:
        job = run.job
        return AttemptInfo(
            job.id,
            job.task,
            job.queue,
            job.attempt,
            job.max_attempts,
            self._worker_id,
            headers(job.payload),
            run.ctx,
            lambda exc: failure(run, exc, self._clock()).state is JobState.PENDING,
        )

    # -- on the coordinator --------------------------------------------------------------

    def observe(self, event: WorkerEvent) -> None:
        """The worker's ``on_event``: passes each event on, and tells the outcome hooks."""
        if self._inner is not None:
            try:
                self._inner(event)
            except Exception:
                log.exception("worker %s: the on_event hook raised on %s", self._worker_id, event)
        kind = event.kind
        if kind == "finished":
            self._finished(event)
        elif kind == "cancelled":
            self._runs.pop((event.job_id, event.attempt), None)
            self._tell("job_cancelled", self._job_event("job_cancelled", event.job_id,
                       event.task, event.queue or "", event.attempt))  # fmt: skip
        elif kind in ("released", "discarded", "lease_lost", "parked"):  # no outcome to tell
            self._runs.pop((event.job_id, event.attempt), None)

    def _finished(self, event: WorkerEvent) -> None:
        run = self._runs.pop((event.job_id, event.attempt), None)
        duration, exception = None, None
        if run is not None and run.begun is not None:
            if run.ctx.timed_out:  # the handler may still run: its end is not the attempt's
                duration = run.task.timeout
            elif run.ended is not None:
                duration, exception = run.ended - run.begun, run.exception
        args = (event.job_id, event.task, event.queue or "", event.attempt)
        if event.state == JobState.DONE.value:
            self._tell("job_done", self._job_event("job_done", *args, duration))
            return
        failed = self._job_event("job_failed", *args, duration, event.detail, exception,
                                 will_retry=event.state == JobState.PENDING.value)  # fmt: skip
        self._tell("job_failed", failed)
        if event.state == JobState.DEAD.value:
            self._tell("job_dead", self._job_event("job_dead", *args, duration, event.detail,
                                                   exception))  # fmt: skip

    def _job_event(
        self,
        name: EventName,
        job_id: int,
        task: str,
        queue: str,
        attempt: int,
        duration: float | None = None,
        error: str | None = None,
        exception: BaseException | None = None,
        will_retry: bool = False,
    ) -> JobEvent:
        return JobEvent(
            name, job_id, task, queue, attempt, self._worker_id, duration, error, exception,
            will_retry,
        )  # fmt: skip
