"""Browsing and admin: finding and counting jobs, and acting on them (retry, cancel,
delete), pausing queues, and saying why a job waits. The App's methods of those names
hand over to these functions.

A :class:`~sqljobs.JobFilter` names jobs by state, queue, task, key, argument text,
creation time or a selection of ids. :func:`find_jobs` pages through them newest first by
keyset (``before`` an id, never an offset, so page 500 costs what page 1 does); the bulk
actions (:func:`retry_jobs`, :func:`cancel`, :func:`delete_jobs`) change every match in
bounded batches. Everything that scans is bounded, so that a dashboard answers fast over a
million jobs: a count stops at a cap (:class:`~sqljobs.JobCount` says whether it did); a
search of argument text looks at no more than :data:`~sqljobs.jobs.TEXT_SCAN` jobs per
page, and the page says where it stopped (``next_before``) so the next page searches on
below.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace
from typing import TYPE_CHECKING, overload

from . import workflow_ops
from .backends.records import JobListing, JobSearch
from .errors import ConfigurationError, JobNotFound
from .jobs import (
    ENDED,
    RETRYABLE,
    UNENDED,
    Job,
    JobCount,
    JobFilter,
    JobPage,
    JobState,
    QueueInfo,
    WorkerStatus,
)
from .limits import Rate
from .rollup import MetricAmount, MinuteCounts, check_window, minute_counts, minute_of
from .validate import check_queue_name, is_job_id, is_whole

if TYPE_CHECKING:
    from .app import App
    from .stats import Stats

log = logging.getLogger("sqljobs")

CANCELLABLE = ("pending", "waiting", "running")


@overload
def cancel(app: App, which: int, /) -> bool: ...
@overload
def cancel(app: App, which: JobFilter, /) -> int: ...
@overload
def cancel(
    app: App, /, *, queue: str | None = None, task: str | None = None, state: str | None = None
) -> int: ...


def cancel(
    app: App,
    which: int | JobFilter | None = None,
    /,
    *,
    queue: str | None = None,
    task: str | None = None,
    state: str | None = None,
) -> bool | int:
    """Cancel one job, or every job that matches.

    ``app.cancel(job_id)``: a pending or waiting job ends at once; a running one too,
    and its worker is told to stop (``ctx.cancelled``; an async task is cancelled)
    within a heartbeat, at once where the notifier pushes. The handler's outcome is
    discarded whatever it does; no attempt is charged. True if this call cancelled it;
    False if it had already ended (cancelling twice is harmless). Raises ``JobNotFound``
    for an id that names no job.

    Either form cancels, with each workflow it cancels, the child jobs that workflow
    waits for and that have not ended (fenced, as any cancel; theirs in turn), after the
    workflow's cancel committed: the count is of the jobs named or matched only.

    ``app.cancel(JobFilter(...))``, or ``app.cancel(queue=..., task=..., state=...)`` (at
    least one; ``state`` one of pending, waiting, running): every pending, waiting or
    running job that matches, as one is cancelled, in bounded batches; returns how many.
    The aliases ``cancel_job``, ``cancel_jobs`` and ``cancel_many`` are these forms under
    their earlier names."""
    if isinstance(which, JobFilter):
        if (queue, task, state) != (None, None, None):
            raise ConfigurationError(
                "cancel(): give a JobFilter or queue=/task=/state=, not both "
                "(a JobFilter has those fields)"
            )
        return cancel_jobs(app, which)
    if which is not None:
        if (queue, task, state) != (None, None, None):
            raise ConfigurationError(
                f"cancel({which!r}, ...): a job id names one job: leave out queue, task and state"
            )
        return _cancel_one(app, which)
    return _cancel_by(app, queue, task, state, "cancel")


def cancel_job(app: App, job_id: int) -> bool:
    """``cancel(job_id)``, but False (not an error) for a job that does not exist."""
    try:
        return _cancel_one(app, job_id)
    except JobNotFound:
        return False


def cancel_jobs(app: App, filter: JobFilter) -> int:
    """``cancel(filter)``: cancel every pending, waiting or running job matching
    ``filter``, in batches, as :meth:`cancel` does one; return how many."""
    n = app.backend.cancel_jobs_matching(_searchable(app, filter), filter.only(UNENDED))
    log.info("cancelled %d jobs (%s)", n, filter.describe())
    if n:
        app._wakeups.emit("cancel", None)
    return n


def cancel_many(
    app: App, queue: str | None = None, task: str | None = None, state: str | None = None
) -> int:
    """``cancel(queue=..., task=..., state=...)``: cancel every pending, waiting or running
    job matching all the filters given (``state``: one of those three; at least one
    filter), in bounded batches; return how many."""
    return _cancel_by(app, queue, task, state, "cancel_many")


def _cancel_by(app: App, queue: str | None, task: str | None, state: str | None, where: str) -> int:
    if state is not None and state not in CANCELLABLE:
        raise ConfigurationError(
            f"{where}(state=...) must be 'pending', 'waiting', 'running' or None, "
            f"got {state!r}: only jobs that have not ended can be cancelled"
        )
    if queue is None and task is None and state is None:
        raise ConfigurationError(
            f"{where}() needs a queue, task or state (or, with cancel(), a job id or a "
            "JobFilter): cancelling every job at once is never what a typo should do "
            "(state='pending' cancels all pending jobs)"
        )
    if queue is not None:
        check_queue_name(queue, f"{where}(queue=...)")
    return cancel_jobs(app, JobFilter(queue=queue, task=task, state=state))


def _cancel_one(app: App, job_id: int) -> bool:
    job_id = app.job(job_id).id
    if app.backend.cancel_job(job_id):
        log.info("job %s cancelled", job_id)
        app._wakeups.emit("cancel", job_id)  # this process's workers, at once
        return True
    if app.backend.get_job(job_id) is None:
        raise JobNotFound(f"no job {job_id}: it never existed, or it was pruned")
    return False


def get_job(app: App, job_id: int) -> Job | None:
    """The job with this id, or None (also for what cannot be an id)."""
    if not is_job_id(job_id):  # no job has it: and the database would not take it
        return None
    return app.backend.get_job(job_id)


def list_jobs(
    app: App, state: str | None = None, queue: str | None = None, limit: int = 50
) -> list[Job]:
    """The newest ``limit`` jobs, of one state and queue or all. A state or queue that
    cannot be is refused, as :class:`JobFilter` refuses it."""
    JobFilter(state=state, queue=queue)  # a typo would otherwise list nothing, quietly
    return app.backend.list_jobs(JobListing(state, queue, limit))


def retry_job(app: App, job_id: int) -> bool:
    """Send a dead or cancelled job back to pending with fresh attempts. A job enqueued
    ``after`` others is refused while one of them is not done: it would run before
    them (retry those first)."""
    job_id = app.job(job_id).id
    job = app.backend.get_job(job_id)
    if job is not None and job.parents and job.state is JobState.CANCELLED:
        parents = [(p, app.backend.get_job(p)) for p in job.parents]
        undone = [p for p, parent in parents if parent and parent.state is not JobState.DONE]
        if undone:
            ids = ", ".join(map(str, undone))
            raise ConfigurationError(
                f"job {job_id} runs after jobs {ids}, which are not done: retry them "
                "first, then enqueue it again (retrying it now would run it before them)"
            )
    retried = app.backend.retry_jobs(JobFilter(ids=(job_id,)), RETRYABLE) == 1
    if retried:
        _announce_retried(app)
    return retried


def _announce_retried(app: App) -> None:
    """Wake the workers for jobs a retry made due now: those of this process at
    once, the others through the notifier (else they learn at their next poll)."""
    app.backend.notifier.announce()
    app._wakeups.announce()


def waiting_reason(app: App, job: Job) -> str | None:
    """Why a pending job is not running yet, if it is not simply next in line: no
    live worker has its task, or none that has it serves its queue, or its time has
    not come, or its queue is paused, or its limit is reached; or which parents a
    waiting job waits for."""
    if job.state is JobState.WAITING:
        parked = workflow_ops.parked_reason(app, job)
        if parked is not None or not job.parents:
            return parked
        open_parents = app.backend.open_parents(job.id, job.parents)
        ids = ", ".join(map(str, open_parents))
        n = len(open_parents)
        return f"waiting for {n} parent{'s' if n != 1 else ''} to end (jobs {ids})"
    if job.state is not JobState.PENDING:
        return None
    scopes = app.backend.worker_scopes()
    if not any(job.task in scope.tasks for scope in scopes):
        return (
            f"no live worker has registered task {job.task!r}: start a worker whose "
            "app registers it (a worker claims only the tasks it has)"
        )
    if not any(scope.serves(job.task, job.queue) for scope in scopes):
        served = sorted({q for s in scopes if job.task in s.tasks for q in s.queues or ()})
        return (
            f"no live worker that runs task {job.task!r} serves its queue {job.queue!r} "
            f"(they serve {', '.join(served)}): start a worker with --queues "
            f"{job.queue} (or none: every queue)"
        )
    if job.run_at > app.clock():
        return "its run_at lies in the future"
    paused = app.backend.queue_states().get(job.queue, (False, None))[0]
    if paused:
        return f"its queue {job.queue} is paused: sqljobs queues resume {job.queue}"
    if job.limit_key is not None:
        return _limit_reason(app, job)
    return None


def _limit_reason(app: App, job: Job) -> str | None:
    """Why a due job under a limit waits: its key's slots are taken, or its rate's
    window is full."""
    key = job.limit_key
    assert key is not None
    running, starts = app.backend.limit_usage(key, job.rate_window or 0.0)
    if job.limit_max is not None and running >= job.limit_max:
        return (
            f"{key} is at its limit of {job.limit_max} running at once: it starts when "
            "one of them ends"
        )
    if job.rate_max is not None and job.rate_window and starts >= job.rate_max:
        rate = Rate(job.rate_max, job.rate_window)
        return f"{key} reached its rate of {rate}: it starts when the window allows"
    return None


def find_jobs(
    app: App, filter: JobFilter | None = None, *, before: int | None = None, limit: int = 50
) -> JobPage:
    """A page of the jobs matching ``filter``, newest first: pass the page's
    ``next_before`` as ``before`` for the next one (keyset paging, as cheap on page
    500 as on page 1). ``limit`` is 1 to 1000."""
    if not is_whole(limit, 1, 1000):
        raise ConfigurationError(f"find_jobs(limit={limit!r}): give 1 to 1000 jobs a page")
    if before is not None and not is_job_id(before):
        raise ConfigurationError(f"find_jobs(before={before!r}): give a job id")
    return app.backend.find_jobs(JobSearch(_searchable(app, filter), before, limit))


def _searchable(app: App, filter: JobFilter | None) -> JobFilter:
    """``filter``, leaving out of a text search the jobs of tasks that redact
    arguments: whether such a job matched would tell what its page hides."""
    wanted = filter or JobFilter()
    hiding = sorted(name for name, task in app.tasks.items() if task.redact)
    if wanted.text is None or not hiding:
        return wanted
    return replace(wanted, skip_tasks=tuple(sorted({*hiding, *(wanted.skip_tasks or ())})))


def count_jobs(app: App, filter: JobFilter | None = None, *, cap: int = 10_000) -> JobCount:
    """How many jobs match ``filter``, counted up to ``cap``; ``capped`` says the true
    number may be larger. By state and queue alone it is the stats' count; with other
    fields, the newest :data:`~sqljobs.jobs.COUNT_SCAN` jobs are counted (a count
    over every job of a large table would read them all), and a count that did not
    reach the oldest job is capped too."""
    if not is_whole(cap, 1):
        raise ConfigurationError(f"count_jobs(cap={cap!r}): give a positive whole number")
    wanted = _searchable(app, filter)
    if wanted.by_state_and_queue_only():
        return _count_from_stats(app, wanted, cap)
    return app.backend.count_jobs(wanted, cap)


def _count_from_stats(app: App, wanted: JobFilter, cap: int) -> JobCount:
    """A count by state and queue alone, from the per-queue counts ``stats()`` reads
    through indexes (exact but for done and cancelled jobs past its own cap)."""
    stats = app.backend.stats()
    queues = [wanted.queue] if wanted.queue is not None else list(stats.counts)
    states = [wanted.state] if wanted.state is not None else [s.value for s in JobState]
    n = sum(stats.counts.get(q, {}).get(s, 0) for q in queues for s in states)
    lower_bound = any(s in stats.capped.get(q, ()) for q in queues for s in states)
    return JobCount(min(n, cap), n > cap or lower_bound)


def retry_dead(app: App, queue: str | None = None) -> int:
    """Send every dead job (of ``queue``, or all) back to pending; return how many."""
    return retry_jobs(app, JobFilter(state=JobState.DEAD.value, queue=queue))


def retry_jobs(app: App, filter: JobFilter) -> int:
    """Send every dead or cancelled job matching ``filter`` back to pending with fresh
    attempts, in batches; return how many. A cancelled job that runs after others is
    left alone while one of them is not done (:meth:`retry_job` says why)."""
    n = app.backend.retry_jobs(_searchable(app, filter), filter.only(RETRYABLE))
    log.info("retried %d jobs (%s)", n, filter.describe())
    if n:
        _announce_retried(app)
    return n


def delete_jobs(app: App, filter: JobFilter) -> int:
    """Delete every ended (done, dead or cancelled) job matching ``filter``, in
    batches; return how many. Jobs that have not ended are left alone: cancel them
    first."""
    n = app.backend.delete_jobs(_searchable(app, filter), filter.only(ENDED))
    log.info("deleted %d jobs (%s)", n, filter.describe())
    return n


def delete_job(app: App, job_id: int) -> bool:
    """Delete one ended job; False if there is no such job. A job that has not ended
    is refused with ConfigurationError (cancel it first)."""
    job_id = app.job(job_id).id
    found = app.backend.get_job(job_id)
    if found is None:
        return False
    if found.state.value not in ENDED:
        raise ConfigurationError(
            f"job {job_id} is {found.state.value}: only a done, dead or cancelled job "
            "can be deleted (cancel it first)"
        )
    deleted = app.backend.delete_jobs(JobFilter(ids=(job_id,)), ENDED) == 1
    log.info("job %s %s", job_id, "deleted" if deleted else "was not deleted: it changed")
    return deleted


def workers(app: App) -> list[WorkerStatus]:
    """Every live worker (seen within its heartbeat) and the jobs it is running."""
    return app.backend.worker_statuses()


def metric_totals(app: App) -> list[MetricAmount]:
    """Every counted amount since the database began (by queue, task, outcome, series
    and bucket): what the Prometheus counters and histograms show."""
    return app.backend.metric_totals()


def job_children(app: App, job_id: int, limit: int = 100) -> list[int]:
    """The ids of the jobs enqueued ``after`` this one (up to ``limit``, 1 to 1000),
    oldest first."""
    if not is_whole(limit, 1, 1000):
        raise ConfigurationError(f"job_children(limit={limit!r}): give 1 to 1000")
    return app.backend.job_children(app.job(job_id).id, limit)


def pause_queue(app: App, name: str) -> bool:
    """Stop every worker, on every host, from claiming jobs of queue ``name``; jobs
    already running finish, enqueues and schedules still add to it. True if this
    call paused it (False: it was paused already)."""
    check_queue_name(name, "pause_queue")
    paused = app.backend.pause_queue(name)
    log.info("queue %s %s", name, "paused" if paused else "was already paused")
    return paused


def resume_queue(app: App, name: str) -> bool:
    """Let workers claim from queue ``name`` again (woken at once); True if it was
    paused."""
    check_queue_name(name, "resume_queue")
    resumed = app.backend.resume_queue(name)
    if resumed:
        log.info("queue %s resumed", name)
        app.backend.notifier.announce([name])
        app._wakeups.announce()
    return resumed


def paused_queues(app: App) -> dict[str, float | None]:
    """Each paused queue and when it was paused (Unix seconds; None if not known)."""
    return {name: at for name, (paused, at) in app.backend.queue_states().items() if paused}


def queues(app: App) -> list[QueueInfo]:
    """Every queue that has jobs, tasks of this app, or a pause: (name, paused, counts by state,
    age of the oldest due pending job in seconds or None), by name."""
    stats = app.stats()  # it reads the paused queues too: no second query
    paused = set(stats.paused)
    names = set(stats.counts) | paused
    empty = {s.value: 0 for s in JobState}
    return [
        QueueInfo(
            name,
            name in paused,
            dict(stats.counts.get(name, empty)),
            stats.oldest_pending_age_by_queue.get(name),
        )
        for name in sorted(names)
    ]


def throughput(app: App, minutes: int = 60, queue: str | None = None) -> list[MinuteCounts]:
    """Attempts that ended done, failed and cancelled in each of the last ``minutes``
    minutes (the current one last), of one queue or all: one entry per minute, empty
    minutes included, oldest first. Workers add their counts at each heartbeat, so the
    newest minute may lag by one heartbeat (see :mod:`sqljobs.rollup`)."""
    minutes = check_window(minutes)
    if queue is not None:
        check_queue_name(queue, "throughput(queue=...)")
    first = minute_of(app.clock()) - 60 * (minutes - 1)
    return minute_counts(app.backend.attempts_by_minute(first, queue), first, minutes)


def metric_label_sets(app: App) -> tuple[set[tuple[str, str]], set[tuple[str, str]]]:
    """The ``(queue, task)`` pairs the metrics show before anything is counted: every
    task this app registers or workers have written to the catalogue, and those that
    schedules enqueue (this app's periodic tasks, and the schedules table's)."""
    tasks = {(task.queue, name) for name, task in app.tasks.items()}
    scheduled = {(s.queue, s.task) for s in app.periodic_schedules.values()}
    for queue, task, is_scheduled in app.backend.metric_label_sets():
        (scheduled if is_scheduled else tasks).add((queue, task))
    return tasks, scheduled


# -- for asyncio callers: each in a thread, so the event loop is never blocked ----------


async def stats_async(app: App) -> Stats:
    """``app.stats()``, awaitable."""
    return await asyncio.to_thread(app.stats)


async def queues_async(app: App) -> list[QueueInfo]:
    """``app.queues()``, awaitable."""
    return await asyncio.to_thread(queues, app)


async def get_job_async(app: App, job_id: int) -> Job | None:
    """``app.get_job()``, awaitable."""
    return await asyncio.to_thread(get_job, app, job_id)


async def cancel_async(app: App, job_id: int) -> bool:
    """``app.cancel(job_id)``, awaitable."""
    return await asyncio.to_thread(cancel, app, job_id)


async def find_jobs_async(
    app: App, filter: JobFilter | None = None, *, before: int | None = None, limit: int = 50
) -> JobPage:
    """``app.find_jobs()``, awaitable."""
    return await asyncio.to_thread(find_jobs, app, filter, before=before, limit=limit)


async def count_jobs_async(
    app: App, filter: JobFilter | None = None, *, cap: int = 10_000
) -> JobCount:
    """``app.count_jobs()``, awaitable."""
    return await asyncio.to_thread(count_jobs, app, filter, cap=cap)
