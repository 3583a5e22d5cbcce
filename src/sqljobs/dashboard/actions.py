"""Retry, cancel, delete, pause, resume and run now, as the dashboard offers them, on one
job, on many (a selection or every match of a filter), on a queue or on a schedule. Every
answer says what happened or why not, once for a script (a status and a JSON body) and
once for a person (a sentence the page shows): a bare "no" leaves an operator guessing
whether the job is gone, finished, or the token was wrong."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..app import App
from ..errors import ConfigurationError, JobNotFound, ScheduleNotFound
from ..humanize import RUNNING_CANCELLED
from ..jobs import RETRYABLE, Job, JobFilter, JobState

_RETRIABLE = tuple(JobState(s) for s in RETRYABLE)


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
        409,
        f"job {job_id} is {job.state.value}; only pending, waiting or running jobs can be "
        "cancelled",
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


def delete(app: App, job_id: int) -> Outcome:
    """Delete one ended job (done, dead or cancelled); one that has not ended is refused
    (cancel it first), and so is one that is gone already."""
    try:
        deleted = app.delete_job(job_id)
    except ConfigurationError as exc:
        return refused(409, str(exc))
    if deleted:
        return done(f"job {job_id} deleted", deleted=1)
    if app.get_job(job_id) is None:
        return refused(404, f"no job with id {job_id}")
    return refused(409, f"job {job_id} was not deleted: it changed state meanwhile (look again)")


BULK = {
    "retry": (App.retry_jobs, "retried", "{n} job(s) pending again ({what})"),
    "cancel": (App.cancel_jobs, "cancelled", "{n} job(s) cancelled ({what})"),
    "delete": (App.delete_jobs, "deleted", "{n} job(s) deleted ({what})"),
}
"""Each bulk verb: the App method, the JSON body's count field, the sentence."""


def bulk(app: App, verb: str, filter: JobFilter) -> Outcome:
    """Retry, cancel or delete every job ``filter`` matches (a selection, or every match)
    in the states the verb acts on; the others are left alone, and the sentence says
    which filter was applied."""
    change, counted, sentence = BULK[verb]
    try:
        n = change(app, filter)
    except ConfigurationError as exc:
        return refused(409, str(exc))
    return done(sentence.format(n=n, what=filter.describe()), **{counted: n})


def pause_schedule(app: App, name: str) -> Outcome:
    """Stop a schedule firing until resumed; pausing a paused one succeeds with a note."""
    found = app.get_schedule(name)
    if found is None:
        return refused(404, f"no schedule named {name!r}")
    if found.paused:
        return done(f"schedule {name} was already paused", note="already paused")
    app.pause_schedule(name)
    return done(f"schedule {name} paused: it enqueues no run until resumed")


def resume_schedule(app: App, name: str) -> Outcome:
    """Let a schedule fire again from its next tick; resuming one that is not paused
    succeeds with a note."""
    found = app.get_schedule(name)
    if found is None:
        return refused(404, f"no schedule named {name!r}")
    if not found.paused:
        return done(f"schedule {name} was not paused", note="not paused")
    app.resume_schedule(name)
    return done(f"schedule {name} resumed: it fires from its next tick (missed ticks are not run)")


def run_schedule_now(app: App, name: str) -> Outcome:
    """Enqueue one run of a schedule now. Under ``overlap="skip"`` with a run pending or
    running, that run is named instead (``created`` false)."""
    try:
        handle = app.run_schedule_now(name)
    except ScheduleNotFound:
        return refused(404, f"no schedule named {name!r}")
    except ConfigurationError as exc:
        return refused(409, str(exc))
    if handle.created:
        return done(f"schedule {name}: job {handle.id} enqueued to run now",
                    job_id=handle.id, created=True)  # fmt: skip
    return done(
        f"schedule {name}: job {handle.id} is still pending or running and the schedule "
        "skips overlapping runs, so no new one was enqueued",
        job_id=handle.id,
        created=False,
    )
