"""Assertions on what a test enqueued, with failure messages that list what was."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..errors import ConfigurationError
from ..jobs import Job, JobFilter
from ..tasks import Task
from ..validate import is_whole

if TYPE_CHECKING:
    from ..app import App

QUEUED_STATES = ("pending", "waiting")
"""What "enqueued" means: jobs not yet run (due now or later, or waiting for parents)."""

_SHOWN = 20  # jobs a failure message lists
_SCAN = 1000  # jobs per state an assertion reads: a test's queue, not a production one


def assert_enqueued(
    app: App,
    task: Task | str,
    *,
    args: Sequence[Any] | None = None,
    kwargs: Mapping[str, Any] | None = None,
    queue: str | None = None,
    key: str | None = None,
    count: int | None = None,
) -> list[Job]:
    """Assert that ``task`` has jobs enqueued (pending or waiting) with these ``args`` and
    ``kwargs`` (compared as stored, after the JSON round trip; left out: any), ``queue``
    and ``key``: exactly ``count`` of them if given, else at least one. Returns them."""
    if count is not None and not is_whole(count, 0):
        raise ConfigurationError(f"assert_enqueued(count={count!r}): give a whole number >= 0")
    name, queued = _queued(app, task)
    matching = [j for j in queued if _matches(j, args, kwargs, queue, key)]
    if (count is None and matching) or len(matching) == count:
        return matching
    wanted = "a job" if count is None else f"{count} job{'' if count == 1 else 's'}"
    found = f"found {len(matching)}" if matching or count else "found none"
    raise AssertionError(
        f"expected {wanted} of task {name!r}{_described(args, kwargs, queue, key)} "
        f"enqueued; {found}.\n{_listing(app, queued, name)}"
    )


def assert_not_enqueued(
    app: App,
    task: Task | str,
    *,
    args: Sequence[Any] | None = None,
    kwargs: Mapping[str, Any] | None = None,
    queue: str | None = None,
    key: str | None = None,
) -> None:
    """Assert that no job of ``task`` matching ``args``, ``kwargs``, ``queue`` and ``key``
    (each left out: any) is enqueued (pending or waiting)."""
    name, queued = _queued(app, task)
    matching = [j for j in queued if _matches(j, args, kwargs, queue, key)]
    if matching:
        raise AssertionError(
            f"expected no job of task {name!r}{_described(args, kwargs, queue, key)} enqueued; "
            f"found {len(matching)}:\n" + "\n".join(_line(j) for j in matching[:_SHOWN])
        )


def enqueued_jobs(app: App, task: Task | str | None = None) -> list[Job]:
    """The jobs enqueued and not yet run (pending or waiting), oldest first; of ``task``
    only, if given."""
    name = None if task is None else _task_name(task)
    jobs: list[Job] = []
    for state in QUEUED_STATES:
        jobs += app.find_jobs(JobFilter(state=state, task=name), limit=_SCAN).jobs
    return sorted(jobs, key=lambda j: j.id)


def _queued(app: App, task: Task | str) -> tuple[str, list[Job]]:
    name = _task_name(task)
    return name, enqueued_jobs(app, name)


def _task_name(task: Task | str) -> str:
    if isinstance(task, Task):
        return task.name
    if isinstance(task, str) and task:
        return task
    raise ConfigurationError(f"give a task (the @app.task object) or its name, got {task!r}")


def _matches(
    job: Job,
    args: Sequence[Any] | None,
    kwargs: Mapping[str, Any] | None,
    queue: str | None,
    key: str | None,
) -> bool:
    return (
        (args is None or job.args == _stored(list(args), "args"))
        and (kwargs is None or job.kwargs == _stored(dict(kwargs), "kwargs"))
        and (queue is None or job.queue == queue)
        and (key is None or job.key == key)
    )


def _stored(value: Any, what: str) -> Any:
    """``value`` as a job stores it (a tuple reads back as a list), so they compare."""
    try:
        return json.loads(json.dumps(value))
    except (TypeError, ValueError) as exc:
        raise ConfigurationError(
            f"{what}={value!r} is not JSON, so no job can hold it: {exc}"
        ) from None


def _described(
    args: Iterable[Any] | None, kwargs: Mapping[str, Any] | None, queue: str | None, key: str | None
) -> str:
    parts = [f"{n}={v!r}" for n, v in (("args", args), ("kwargs", kwargs), ("queue", queue),
                                          ("key", key)) if v is not None]  # fmt: skip
    return f" with {', '.join(parts)}" if parts else ""


def _listing(app: App, queued: list[Job], name: str) -> str:
    """What is enqueued: the task's jobs if it has any, else every task's."""
    jobs = queued or enqueued_jobs(app)
    if not jobs:
        return "Nothing is enqueued."
    whose = f"of task {name!r}" if queued else "(none of that task)"
    more = f"\n  ... and {len(jobs) - _SHOWN} more" if len(jobs) > _SHOWN else ""
    return f"Enqueued {whose}:\n" + "\n".join(_line(j) for j in jobs[:_SHOWN]) + more


def _line(job: Job) -> str:
    extra = f", key={job.key!r}" if job.key else ""
    return (
        f"  job {job.id} {job.task}(args={job.args!r}, kwargs={job.kwargs!r}) "
        f"queue={job.queue!r} state={job.state.value}{extra}"
    )
