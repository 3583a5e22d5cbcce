"""What the pages and the JSON read through the App, shaped for showing: jobs with their
redacted arguments hidden, and queues built from one stats read.

Every place a job's arguments leave the dashboard goes through :func:`redacted` (tasks
declare ``redact=[...]``); a schedule's keyword arguments through
:func:`redacted_kwargs`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..app import App
from ..jobs import Job, JobState, QueueInfo
from ..redaction import redact_arguments, redact_job
from ..stats import Stats


def redacted(app: App, job: Job) -> Job:
    """``job`` with the values of its task's redacted parameters shown as ``***``, also
    where its error, traceback, history or progress note quote them."""
    return redact_job(app.tasks.get(job.task), job)


def redacted_kwargs(app: App, task: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    """A schedule's keyword arguments as its task's redaction shows them."""
    return redact_arguments(app.tasks.get(task), [], kwargs)[1]


def queue_infos(app: App, stats: Stats) -> list[QueueInfo]:
    """``app.queues()`` from a stats snapshot the page has read already: the same rows
    without a second stats query (the costliest read of a page)."""
    paused = set(stats.paused)
    names = set(stats.counts) | paused | {t.queue for t in app.tasks.values()}
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


def paused_at(app: App) -> Mapping[str, float | None]:
    """When each paused queue was paused."""
    return app.paused_queues()
