"""What the pages and the JSON read through the App, shaped for showing: jobs with their
redacted arguments hidden, and queues built from one stats read.

Every place a job's arguments leave the dashboard goes through :func:`redacted` (tasks
declare ``redact=[...]``); a schedule's keyword arguments through
:func:`redacted_kwargs`; a workflow's steps through :func:`redacted_steps`, since a run
or gather step's result quotes its child jobs' results and errors.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from ..app import App
from ..jobs import Job, JobFilter, JobState, QueueInfo, WorkflowStep
from ..redaction import redact_arguments, redact_job, scrubber
from ..stats import Stats

_READ_AT_ONCE = 1000
"""Jobs one ``find_jobs`` call reads by id (its most)."""


def redacted(app: App, job: Job) -> Job:
    """``job`` with the values of its task's redacted parameters shown as ``***``, also
    where its error, traceback, history or progress note quote them."""
    return redact_job(app.tasks.get(job.task), job)


def redacted_kwargs(app: App, task: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    """A schedule's keyword arguments as its task's redaction shows them."""
    return redact_arguments(app.tasks.get(task), [], kwargs)[1]


def jobs_by_id(app: App, ids: Iterable[int]) -> dict[int, Job]:
    """The jobs of ``ids`` that still exist, as stored (not redacted), a query a thousand."""
    unique = list(dict.fromkeys(ids))
    found: dict[int, Job] = {}
    for start in range(0, len(unique), _READ_AT_ONCE):
        chunk = tuple(unique[start : start + _READ_AT_ONCE])
        found.update((j.id, j) for j in app.find_jobs(JobFilter(ids=chunk), limit=len(chunk)).jobs)
    return found


def redacted_steps(app: App, steps: Sequence[WorkflowStep]) -> list[WorkflowStep]:
    """A workflow's steps with the values its child jobs' tasks redact replaced by
    ``***`` where a run or gather step's result quotes a child's result or error (each
    child's own page hides them so). Children are read only when the App has a task that
    redacts; a pruned child's entry stays as stored."""
    if not any(task.redact for task in app.tasks.values()):
        return list(steps)
    quoting = [s for s in steps if s.kind in ("run", "gather") and s.result is not None]
    ids = [i for s in quoting for i in s.detail.get("children", []) if isinstance(i, int)]
    children = jobs_by_id(app, ids)
    scrubs = {
        job.id: scrubber(app.tasks.get(job.task), job.args, job.kwargs)
        for job in children.values()
        if getattr(app.tasks.get(job.task), "redact", None)
    }
    if not scrubs:
        return list(steps)
    positions = {step.position for step in quoting}
    return [
        replace(step, result=_scrub_outcome(step.result, scrubs))
        if step.position in positions
        else step
        for step in steps
    ]


def _scrub_outcome(
    text: str | None, scrubs: Mapping[int, Callable[[str | None], str | None]]
) -> str | None:
    """A run or gather step's result (a list of ``{"id", "state", "result", "error"}``)
    with each child's result and error scrubbed by that child's scrubber."""
    try:
        outcome = json.loads(text or "null")
    except ValueError:
        return text
    if not isinstance(outcome, list):
        return text
    for entry in outcome:
        child = entry.get("id") if isinstance(entry, dict) else None
        scrub = scrubs.get(child) if isinstance(child, int) else None
        if scrub is not None:
            entry["result"] = _scrub_value(entry.get("result"), scrub)
            entry["error"] = _scrub_value(entry.get("error"), scrub)
    return json.dumps(outcome)


def _scrub_value(value: Any, scrub: Callable[[str | None], str | None]) -> Any:
    """``value`` (decoded JSON) with every string in it scrubbed."""
    if isinstance(value, str):
        return scrub(value)
    if isinstance(value, list):
        return [_scrub_value(item, scrub) for item in value]
    if isinstance(value, dict):
        return {key: _scrub_value(item, scrub) for key, item in value.items()}
    return value


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
