"""The App's workflow operations: ``@app.workflow``, ``app.emit``, ``app.workflow_history``
and ``app.workflows`` (the runtime a workflow function is given is
:mod:`sqljobs.workflows`)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Concatenate, overload

from .errors import ConfigurationError
from .jobs import Job, JobState, WorkflowStep
from .payload import encode_result
from .retention import KeyRetention
from .retry import Retry
from .tasks import _P, _R, Task, define_task
from .validate import check_job_id, check_text, whole_number

if TYPE_CHECKING:
    from .app import App
    from .workflows import Workflow

log = logging.getLogger("sqljobs.workflow")


@dataclass(frozen=True)
class WorkflowRun:
    """One workflow as ``app.workflows()`` lists it: its job id, task and state, how many
    steps it has checkpointed, and what a parked one waits for (an event, a time, how many
    children)."""

    id: int
    task: str
    state: str
    steps: int
    wait_event: str | None
    wake_at: float | None
    waiting_on: int
    created_at: float
    finished_at: float | None


class WorkflowDecorator:
    """What ``@app.workflow(...)`` returns: a decorator that registers the function."""

    def __init__(self, register: Callable[[Callable[..., Any]], Task[..., Any]]) -> None:
        self._register = register

    @overload
    def __call__(
        self, fn: Callable[Concatenate[Workflow, _P], Coroutine[Any, Any, _R]], /
    ) -> Task[_P, _R]: ...
    @overload
    def __call__(self, fn: Callable[Concatenate[Workflow, _P], _R], /) -> Task[_P, _R]: ...
    def __call__(self, fn: Callable[..., Any], /) -> Task[..., Any]:
        return self._register(fn)


@overload
def define_workflow(
    app: App, fn: Callable[Concatenate[Workflow, _P], Coroutine[Any, Any, _R]], /
) -> Task[_P, _R]: ...
@overload
def define_workflow(app: App, fn: Callable[Concatenate[Workflow, _P], _R], /) -> Task[_P, _R]: ...
@overload
def define_workflow(
    app: App,
    fn: None = None,
    /,
    *,
    name: str | None = None,
    queue: str | None = None,
    lease: float | timedelta | None = None,
    retry: Retry | None = None,
    priority: int = 0,
    timeout: float | timedelta | None = None,
    store_result: bool = True,
    concurrency: int | None = None,
    concurrency_key: Callable[..., Any] | None = None,
    rate: str | None = None,
    redact: Sequence[str] = (),
    key_retention: KeyRetention = "default",
) -> WorkflowDecorator: ...
def define_workflow(
    app: App, fn: Callable[..., Any] | None = None, /, *, name: str | None = None,
    queue: str | None = None, lease: float | timedelta | None = None,
    retry: Retry | None = None, priority: int = 0, timeout: float | timedelta | None = None,
    store_result: bool = True, concurrency: int | None = None,
    concurrency_key: Callable[..., Any] | None = None, rate: str | None = None,
    redact: Sequence[str] = (), key_retention: KeyRetention = "default",
) -> Task[..., Any] | WorkflowDecorator:  # fmt: skip
    """``@app.workflow``: register a durable workflow, a task whose function takes a
    :class:`sqljobs.Workflow` first (see :mod:`sqljobs.workflows`). It is a job like any
    other (keys, priority, limits, results, cancel); options as for ``@app.task``, where
    ``timeout`` bounds one attempt (the run between two parks), not the whole workflow."""

    def register(func: Callable[..., Any]) -> Task[..., Any]:
        task = define_task(
            app, func, name=name, queue=queue, lease=lease, retry=retry, priority=priority,
            timeout=timeout, store_result=store_result, concurrency=concurrency,
            concurrency_key=concurrency_key, rate=rate, redact=redact,
            key_retention=key_retention, workflow=True,
        )  # fmt: skip
        assert isinstance(task, Task)
        return task

    return register(fn) if fn is not None else WorkflowDecorator(register)


def emit(app: App, event: str, payload: Any = None, *, connection: Any = None) -> int:
    """Emit event ``event`` with ``payload`` (JSON): every workflow waiting for it is due at
    once, and one that waits for it later finds it (events are kept, in the order they
    committed, for ``Retention.events``). Given ``connection`` (a DB-API connection on the
    queue's database) it joins that transaction: a rollback emits nothing. Returns the
    event's id."""
    check_text(event, "app.emit(event)")
    text = None if payload is None else encode_result(f"event {event}", payload, app.max_payload)
    event_id = app.backend.emit_event(event, text, connection)
    if connection is None:
        app._wakeups.announce()
    log.info("event %r emitted (id %s)", event, event_id)
    return event_id


def workflow_history(app: App, job_id: int) -> list[WorkflowStep]:
    """A workflow's checkpointed positions in order: its steps, sleeps, waits and children,
    with their states, results and times."""
    return app.backend.workflow_steps(check_job_id(job_id))


def list_workflows(app: App, state: str | None = None, limit: int = 50) -> list[WorkflowRun]:
    """This App's workflows, newest first (``state``: of that state only)."""
    if state is not None and state not in set(JobState):
        raise ConfigurationError(f"state must be one of {', '.join(JobState)}, got {state!r}")
    limit = whole_number(limit, "limit", high=10_000)
    tasks = sorted(t.name for t in app.tasks.values() if t.is_workflow)
    if not tasks:
        return []
    rows = app.backend.workflow_jobs(tasks, state, limit)
    return [WorkflowRun(
        int(r["id"]), r["task"], r["state"], int(r["steps"]), r["wait_event"],
        None if r["wake_at"] is None else float(r["wake_at"]), int(r["waiting_on"]),
        float(r["created_at"]), None if r["finished_at"] is None else float(r["finished_at"]),
    ) for r in rows]  # fmt: skip


def parked_reason(app: App, job: Job) -> str | None:
    """What a parked workflow waits for, from its last checkpoint (None: it is no
    parked workflow)."""
    steps = app.backend.workflow_steps(job.id)
    waiting = [s for s in steps if s.state == "waiting"]
    if not waiting:
        return None
    wait = step_wait(waiting[-1])
    if wait.children:
        return f"workflow waits for its child job(s) {', '.join(map(str, wait.children))}"
    if wait.wake_at is not None:
        return f"workflow sleeps until {_utc(wait.wake_at)}"
    if wait.event is not None:
        more = "" if wait.timeout_at is None else f" (until {_utc(wait.timeout_at)})"
        return f"workflow waits for event {wait.event!r}{more}"
    return "workflow waits (its last checkpoint does not say for what)"


@dataclass(frozen=True)
class StepWait:
    """What a checkpointed step waits for, or waited for, read from its detail: the one
    reader that ``app.waiting_reason``, ``sqljobs workflows show`` and the dashboard's
    timeline share. ``wake_at``: a sleep's end or, while the step waits, a failed step's
    next try; ``event`` and ``timeout_at``: a wait's; ``children``: the child jobs a run
    or gather started. A damaged detail's value of the wrong type is left out."""

    wake_at: float | None
    event: str | None
    timeout_at: float | None
    children: tuple[int, ...]


def step_wait(step: WorkflowStep) -> StepWait:
    """What ``step`` waits (or waited) for: see :class:`StepWait`."""
    detail = step.detail
    wake_at = _time(detail.get("wake_at"))
    if wake_at is None and step.state == "waiting":
        wake_at = _time(detail.get("retry_at"))
    listed = detail.get("children")
    children = tuple(
        int(i) for i in (listed if isinstance(listed, list) else ())
        if isinstance(i, int) and not isinstance(i, bool) and i > 0
    )  # fmt: skip
    event = step.name if step.kind == "wait" else None
    return StepWait(wake_at, event, _time(detail.get("timeout_at")), children)


def _time(value: Any) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return None


def _utc(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).isoformat()
