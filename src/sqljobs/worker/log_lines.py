"""The lines a worker logs about itself and its jobs: the start-up banner, the stop
summary, an attempt that failed, an error raised after a committed transaction."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from .._version import __version__
from ..humanize import duration, redact_url
from ..jobs import JobState, Outcome
from ..redaction import scrubber

if TYPE_CHECKING:
    from ..backends.base import Backend
    from .execute import Running
    from .worker import Worker

log = logging.getLogger("sqljobs.worker")


def banner(worker: Worker, backend: Backend, heartbeat_interval: float) -> str:
    """One line an operator reads to know what this worker will and will not run."""
    app, cfg = worker.app, worker.config
    tasks = sorted(app.tasks)
    shown = ", ".join(tasks[:8]) + (f", ... ({len(tasks)} in all)" if len(tasks) > 8 else "")
    queues = ",".join(cfg.queues) if cfg.queues else "all"
    paused = sorted(name for name, (on, _) in backend.queue_states().items() if on)
    if paused:  # said at start: "why does this worker take nothing?" has an answer here
        queues += f" (paused: {','.join(paused)})"
    return (
        f"sqljobs {__version__} worker {worker.id} started on {redact_url(backend.url)}: "
        f"queues {queues}, concurrency {cfg.concurrency}, {len(tasks)} tasks ({shown}); "
        f"shortest lease {worker.shortest_lease:g} s, heartbeat every "
        f"{heartbeat_interval:.3g} s, drain timeout {worker.drain_timeout:g} s; "
        f"wake-ups {'pushed' if backend.pushes_changes else 'by polling'}; "
        f"retention {app.retention.describe()}"
    )


def summary(worker: Worker, ran_for: float) -> str:
    """The stop line: what this worker did in its life."""
    c = worker.counters
    parts = [
        f"{c[JobState.DONE.value]} done",
        f"{c['retried']} retried",
        f"{c[JobState.DEAD.value]} dead",
        f"{c['released']} released",
        f"{c['leases_lost']} leases lost",
        f"{c['timed_out']} timed out",
    ]
    if c["cancelled_running"]:
        parts.append(f"{c['cancelled_running']} cancelled while held")
    return f"worker {worker.id} stopped after {duration(ran_for)}: " + ", ".join(parts)


def job_fields(run: Running) -> dict[str, Any]:
    """The ``extra`` of every log line about one job (JSON log lines carry them)."""
    job = run.job
    return {"job_id": job.id, "task": job.task, "queue": job.queue, "attempt": job.attempt}


def failed_attempt(run: Running, outcome: Outcome) -> None:
    """Log an attempt that did not succeed: WARNING with the next retry, the traceback at
    DEBUG; ERROR with the traceback when the job is now dead."""
    job = run.job
    what = f"job {job.id} ({job.task}) attempt {job.attempt}/{job.max_attempts}"
    extra = job_fields(run)
    scrub = scrubber(run.task, run.args, run.kwargs)  # an error may quote a hidden argument
    error, trace = scrub(outcome.error), scrub(outcome.traceback)
    if outcome.state is JobState.DEAD:
        log.error("%s failed; the job is dead: %s\n%s", what, error, trace or "", extra=extra)
        return
    log.warning("%s failed: %s; retry in %s", what, error,
                duration(outcome.delay), extra=extra)  # fmt: skip
    if trace:
        log.debug("%s traceback:\n%s", what, trace, extra=extra)


def raised_after_commit(run: Running, error: str, trace: str | None) -> None:
    """Log, as an ERROR with its traceback, what a handler raised once its
    ``ctx.transaction()`` had committed the job's completion (the job stays done)."""
    job = run.job
    scrub = scrubber(run.task, run.args, run.kwargs)
    log.error(
        "job %s (%s) attempt %s: %s\n%s",
        job.id, job.task, job.attempt, scrub(error), scrub(trace) or "", extra=job_fields(run),
    )  # fmt: skip
