"""JobHandle: what an enqueue returns, and ``app.job(id)`` gives for any job: read its
state, wait for its result, cancel it.

Waiting never polls tightly: the App's :class:`~sqljobs.waiting.JobWatcher` wakes a
waiter when its job may have ended, and a waiter looks on its own once a second
(:data:`~sqljobs.waiting.FALLBACK_LOOK`) in case an announcement was lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, cast

from typing_extensions import TypeVar

from .errors import ConfigurationError, JobCancelled, JobFailed, JobNotFound, ResultTimeout
from .humanize import iso_utc
from .jobs import Job, JobState
from .waiting import FALLBACK_LOOK

if TYPE_CHECKING:
    from .app import App

R = TypeVar("R", covariant=True, default=Any)
"""What a task returns (awaited, for an ``async def`` task); Any where it is not known."""


@dataclass(frozen=True)
class JobHandle(Generic[R]):
    """A job by id. ``created`` is False when an enqueue's key already named a job (and
    for a handle from ``app.job(id)``, which creates nothing). A handle from a typed
    task's enqueue is a ``JobHandle[R]``: ``result()`` is typed as the task's return."""

    id: int
    created: bool
    app: App | None = field(default=None, repr=False, compare=False)

    def _bound(self) -> App:
        if self.app is None:
            raise ConfigurationError(
                f"handle {self.id} is not bound to an app: use the handle an enqueue "
                "returned, or app.job(id)"
            )
        return self.app

    def job(self) -> Job | None:
        """The job as stored now (None if there is no such job, e.g. pruned)."""
        return self._bound().get_job(self.id)

    def refresh(self) -> Job:
        """The job as stored now: its state, attempts, progress and result.

        Raises :class:`~sqljobs.JobNotFound` if there is no such job; for one the pruner
        deleted while its key is still kept (a keyed enqueue may answer with such a job),
        the message says how it ended, when its row went and until when its key is kept.
        """
        job = self.job()
        if job is None:
            raise JobNotFound(self._missing())
        return job

    def _missing(self) -> str:
        """Why there is no job ``id``, as far as the spent keys tell."""
        spent = self._bound().backend.spent_key_of_job(self.id)
        if spent is None:
            return f"job {self.id} does not exist (never created, or pruned)"
        until = "for ever" if math.isinf(spent.expires_at) else f"until {iso_utc(spent.expires_at)}"
        return (
            f"job {self.id} ({spent.task}) ended {spent.state} and was pruned at "
            f"{iso_utc(spent.spent_at)}: its result and history went with its row; its key "
            f"{spent.key!r} still names it, {until}, so enqueues with that key create nothing"
        )

    def cancel(self) -> bool:
        """Cancel the job (see ``App.cancel``); True if this call cancelled it."""
        return self._bound().cancel(self.id)

    def result(self, timeout: float | None = None) -> R:
        """Block until the job ends and return its result (the task's return value).

        Raises :class:`~sqljobs.JobFailed` if it ended ``dead``,
        :class:`~sqljobs.JobCancelled` if it was cancelled, and
        :class:`~sqljobs.ResultTimeout` (a ``TimeoutError``) after ``timeout`` seconds.
        """
        app = self._bound()
        deadline = _deadline(timeout)
        woken = threading.Event()
        watcher = app._job_watcher()
        watcher.add(self.id, woken.set)
        try:
            while True:
                job = self.refresh()
                if job.finished:
                    return cast(R, _outcome(app, job))
                woken.wait(_pause(deadline, self.id, job))
                woken.clear()
        finally:
            watcher.remove(self.id, woken.set)

    async def result_async(self, timeout: float | None = None) -> R:
        """:meth:`result` for asyncio callers: the event loop is never blocked (database
        reads run in a thread; the wake-up arrives through the loop)."""
        app = self._bound()
        deadline = _deadline(timeout)
        loop = asyncio.get_running_loop()
        woken = asyncio.Event()

        def wake() -> None:
            if not loop.is_closed():
                loop.call_soon_threadsafe(woken.set)

        watcher = await asyncio.to_thread(app._job_watcher)  # may open the backend
        watcher.register(self.id, wake)  # no I/O: the finally below always undoes it
        try:
            await asyncio.to_thread(watcher.prepare, self.id)
            while True:
                job = await asyncio.to_thread(self.refresh)
                if job.finished:
                    return cast(R, _outcome(app, job))
                # outside the suppress: the ResultTimeout it raises is a TimeoutError too
                pause = _pause(deadline, self.id, job)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(woken.wait(), pause)
                woken.clear()
        finally:
            watcher.remove(self.id, wake)


def _deadline(timeout: float | None) -> float | None:
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, int | float):
        raise ConfigurationError(f"timeout must be a number of seconds or None, got {timeout!r}")
    if math.isnan(timeout) or timeout < 0:
        raise ConfigurationError(f"timeout must be >= 0 seconds or None, got {timeout!r}")
    return time.monotonic() + timeout


def _pause(deadline: float | None, job_id: int, job: Job) -> float:
    """How long to sleep before looking again; raises once the deadline has passed."""
    if deadline is None:
        return FALLBACK_LOOK
    left = deadline - time.monotonic()
    if left <= 0:
        raise ResultTimeout(f"job {job_id} ({job.task}) is still {job.state} after the timeout")
    return min(FALLBACK_LOOK, left)


def _outcome(app: App, job: Job) -> Any:
    """The result of an ended job, or the error saying why there is none. A task that
    returns a model (registered here) gets its result validated back into it."""
    if job.state is JobState.DONE:
        task = app.tasks.get(job.task)
        if task is not None and task.result_model is not None:
            return task.result_model.load(job.result)
        return job.result
    if job.state is JobState.CANCELLED:
        raise JobCancelled(job.id, job.task)
    raise JobFailed(job.id, job.task, job.state.value, job.last_error)
