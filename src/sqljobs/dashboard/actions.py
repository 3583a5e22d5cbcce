"""Retry, cancel, pause and resume as the dashboard offers them. Every answer says what
happened or why not, once for a script (a status and a JSON body) and once for a person (a
sentence the page shows): a bare "no" leaves an operator guessing whether the job is gone,
finished, or the token was wrong."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..app import App
from ..cli_format import RUNNING_CANCELLED
from ..errors import JobNotFound
from ..jobs import Job, JobState

_RETRIABLE = (JobState.DEAD, JobState.CANCELLED)


@dataclass(frozen=True)
class Outcome:
    """An action's answer: ``status`` 200 when it was done (or there was nothing left to
    do), else the refusal's status; ``message`` is the sentence for a person."""

    status: int
    message: str
    body: dict[str, Any]


def done(message: str, **extra: Any) -> Outcome:
    return Outcome(200, message, {"ok": True, **extra})


def refused(status: int, reason: str) -> Outcome:
    return Outcome(status, reason, {"ok": False, "error": reason})


def _apply(
    app: App, job_id: int, states: tuple[JobState, ...], change: Callable[[int], bool]
) -> tuple[bool, Job | None]:
    """``change`` the job if it is in one of ``states``: (whether it changed, the job as
    last read). The write is conditional on the state too, so a job that moved on between
    the read and the write is read again to say where it went."""
    job = app.get_job(job_id)
    if job is not None and job.state in states:
        if change(job_id):
            return True, job
        job = app.get_job(job_id)
    return False, job


def retry(app: App, job_id: int) -> Outcome:
    """Send a dead or cancelled job back to pending."""
    changed, job = _apply(app, job_id, _RETRIABLE, app.retry_job)
    if changed:
        return done(f"job {job_id} is pending again")
    if job is None:
        return refused(404, f"no job with id {job_id}")
    return refused(
        409, f"job {job_id} is {job.state.value}; only dead or cancelled jobs can be retried"
    )


def cancel(app: App, job_id: int) -> Outcome:
    """Cancel a pending or running job (``app.cancel``). Cancelling a cancelled job
    succeeds with a note, so a script that retries its request after a timeout does not
    see a failure. ``was_running`` tells a script whether a handler was cut short."""
    try:
        changed = app.cancel(job_id)
    except JobNotFound:
        return refused(404, f"no job with id {job_id}")
    job = app.get_job(job_id)
    if changed:
        if job is not None and job.cancelled_while_running:
            return done(f"job {job_id} cancelled while running: {RUNNING_CANCELLED}",
                        was_running=True)  # fmt: skip
        return done(f"job {job_id} cancelled", was_running=False)
    if job is None:  # pruned since it ended
        return refused(404, f"no job with id {job_id}")
    if job.state is JobState.CANCELLED:
        return done(f"job {job_id} was already cancelled", note="already cancelled")
    return refused(
        409, f"job {job_id} is {job.state.value}; only pending or running jobs can be cancelled"
    )


def retry_dead(app: App, queue: str | None) -> Outcome:
    """Send every dead job (of ``queue``, or of every queue) back to pending."""
    retried = app.retry_dead(queue)
    where = "" if queue is None else f" in queue {queue!r}"
    return done(f"{retried} dead job(s){where} pending again", retried=retried)


def pause_queue(app: App, name: str) -> Outcome:
    """Stop every worker from taking new jobs of queue ``name``. Pausing a paused queue
    succeeds with a note, like cancelling a cancelled job."""
    if app.pause_queue(name):
        return done(f"queue {name} paused: workers take no new jobs from it; running jobs finish")
    return done(f"queue {name} was already paused", note="already paused")


def resume_queue(app: App, name: str) -> Outcome:
    """Let workers take jobs of queue ``name`` again; resuming one that was not paused
    succeeds with a note."""
    if app.resume_queue(name):
        return done(f"queue {name} resumed: workers take its jobs again")
    return done(f"queue {name} was not paused", note="not paused")
