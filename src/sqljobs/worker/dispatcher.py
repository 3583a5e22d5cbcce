"""The dispatcher: turns a claimed job into a run and hands it to a thread, or to the
event loop for an ``async def`` task; a job that cannot run here fails at once."""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..backends.base import Backend
from ..context import JobContext
from ..errors import PayloadError
from ..jobs import ClaimedJob, JobState, Outcome
from ..payload import decode
from ..tasks import Task
from .completer import Completer
from .events import Emitter
from .execute import (
    AsyncRunner,
    Report,
    Running,
    Started,
    ThreadPool,
    failure,
    no_hook,
    result_encoder,
)
from .holding import Holding
from .shutdown import StopState

if TYPE_CHECKING:
    from ..app import App
    from .hook_runner import WorkerHooks
    from .link import SupervisorLink

log = logging.getLogger("sqljobs.worker")


class Dispatcher:
    """Owns the handler threads and the event loop. ``request_heartbeat`` and
    ``progress_reported`` are what each job's context calls (``ctx.progress()`` and a
    lost fence ask the upkeep for a pass)."""

    def __init__(
        self,
        *,
        app: App,
        worker_id: str,
        concurrency: int,
        holding: Holding,
        completer: Completer,
        stop: StopState,
        rng: random.Random,
        emit: Emitter,
        hooks: WorkerHooks | None,
        request_heartbeat: Callable[[], None],
        progress_reported: Callable[[JobContext], None],
        link: SupervisorLink | None = None,
    ) -> None:
        self.app = app
        self.id = worker_id
        self._concurrency = concurrency
        self.inflight = holding.inflight
        self._completer = completer
        self._stop = stop
        self.rng = rng
        self._emit = emit
        self._on_event = emit.on_event
        self._hooks = hooks
        self._request_heartbeat = request_heartbeat
        self._progress_reported = progress_reported
        self._link = link if any(t.hard_timeout for t in app.tasks.values()) else None
        self._threads: ThreadPool | None = None
        self._async: AsyncRunner | None = None

    def start(self) -> None:
        """Start the first handler thread, and the event loop if a task is ``async def``."""
        started: Started = self._started if self._on_event is not None else no_hook
        report: Report = self._completer.report
        clock = self.app.clock
        if self._link is not None:
            started, report = self._hard_limited(started, report)
        self._threads = ThreadPool(
            self._concurrency, report, clock, f"sqljobs-{self.id}", started, self._hooks
        )
        if any(t.is_async for t in self.app.tasks.values()):
            self._async = AsyncRunner(report, clock, started, self._hooks)

    def stop(self) -> None:
        if self._threads is not None:
            self._threads.stop()
        if self._async is not None:
            self._async.stop()

    def dispatch(self, backend: Backend, job: ClaimedJob, prefetched: bool = False) -> None:
        """Hand one claimed job (counted as ``claimed`` by the caller) to a thread or the
        event loop, or queue its failure if it cannot run here."""
        if self._on_event is not None:
            self._emit("claimed", job, detail="buffered" if prefetched else None)
        wall = self.app.clock()
        task = self.app.tasks.get(job.task)
        ctx = JobContext(
            job, backend, self._request_heartbeat, self._progress_reported, result_encoder(task)
        )
        if self._stop.stopping:
            ctx.shutting_down = True
        try:
            args, kwargs = decode(job.payload)
        except PayloadError as exc:
            entry = {
                "attempt": job.attempt,
                "outcome": "undecodable",
                "error": str(exc),
                "started_at": wall,
                "ended_at": wall,
                "worker": self.id,
            }
            outcome = Outcome(job.id, job.token, JobState.DEAD, error=str(exc), history=entry)
            self._completer.queue(outcome, job, (job, None, None))
            log.error("job %s: %s", job.id, exc)
            return
        if task is None:
            stand_in = Task(
                self.app,
                _unregistered,
                name=job.task,
                queue=job.queue,
                lease=job.lease,
                retry=self.app.default_retry,
                priority=0,
                timeout=None,
            )
            run = Running(job, stand_in, ctx, args, kwargs, wall, worker=self.id, rng=self.rng)
            error = LookupError(f"task {job.task!r} is not registered here (worker {self.id})")
            self._completer.queue(failure(run, error, wall), job, (job, None, None))
            log.error("job %s: %s", job.id, error)
            return
        run = Running(
            job, task, ctx, args, kwargs, wall, prefetched=prefetched, worker=self.id, rng=self.rng
        )
        if task.timeout is not None:
            run.deadline = run.started + task.timeout
        self.inflight[job.id] = run
        if task.is_async:
            assert self._async is not None
            self._async.submit(run)
        else:
            assert self._threads is not None
            self._threads.submit(run)

    def start_queued(self) -> None:
        """Start the async jobs dispatched since the last call, with one wake-up."""
        if self._async is not None:
            self._async.start_queued()

    def take_queued(self) -> list[Running]:
        """The jobs no thread has started yet, taken off the queue (to hand back)."""
        return self._threads.take_queued() if self._threads is not None else []

    def _hard_limited(self, started: Started, report: Report) -> tuple[Started, Report]:
        """``started`` and ``report`` that also tell the supervisor when a handler with a
        hard time limit begins and ends, so it can kill this process if one overruns."""
        link = self._link
        assert link is not None

        def begun(run: Running) -> None:
            hard = run.task.hard_timeout
            if hard is not None:
                link.started(run.job.id, run.job.token, hard, run.job.task)
            started(run)

        def ended(run: Running, outcome: Outcome) -> None:
            if run.task.hard_timeout is not None and run.begun is not None:
                link.ended(run.job.id)
                if run.ctx.timed_out and not run.closed and outcome.state is JobState.DONE:
                    # asked to stop at its timeout, it ended in time but late: a timeout
                    error = TimeoutError(f"timed out after {run.task.timeout:g} s")
                    outcome = failure(run, error, self.app.clock(), outcome="timed_out")
            report(run, outcome)

        return begun, ended

    def _started(self, run: Running) -> None:
        """Called by an executor thread (or the event loop) as a handler begins."""
        self._emit("started", run.job)


def _unregistered(*_args: Any, **_kwargs: Any) -> None:
    """Stand-in for a task this worker does not have."""
