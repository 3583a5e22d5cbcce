"""What the workflow pages and JSON read through the App: a workflow's job and its
checkpointed steps, the child jobs its steps started, and the filter that lists those on
``/jobs?workflow=ID``; and each step shaped for the timeline (what it waits for, how long
it took, its children with their states).

A job is a workflow when its task is registered as one (``@app.workflow``). A job whose
task this dashboard's App does not register is taken for one when it has checkpointed
steps, so a dashboard started without ``--app`` still shows a workflow's timeline (its
list, ``app.workflows()``, needs the App's workflow tasks).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from ..app import App
from ..jobs import MAX_IDS, Job, JobFilter, WorkflowStep
from ..workflow_ops import step_wait
from .api import BadParameter
from .reads import jobs_by_id
from .render import RESULT_PREVIEW

CHILDREN_SHOWN = 20
"""A step's child jobs linked on its row of the timeline; ``/jobs?workflow=ID`` lists
them all."""
NO_JOB = "no job with id {id}: it never existed, or it was deleted or pruned"
_CHILD_KEY = re.compile(r"wf:(\d{1,19}):(\d{1,9}):(\d{1,9}):.+")
"""A workflow's child job's key (``sqljobs.workflows.CHILD_KEY``): the workflow, the
step's position, the child's index in it."""
_KNOWN_DETAIL = frozenset(
    {"wake_at", "timeout_at", "after", "event_id", "emitted_at", "timed_out", "children",
     "failures", "retry_at"}
)  # fmt: skip


@dataclass(frozen=True)
class Missing:
    """No such job, or one that is no workflow (a 404): ``reason`` says which, and
    ``way_back`` where a person goes from there (a path below the dashboard's root)."""

    reason: str
    way_back: str


def steps_of(app: App, job: Job) -> list[WorkflowStep] | None:
    """``job``'s checkpointed steps if it is a workflow, else None (a task registered as
    a plain one is not read at all)."""
    task = app.tasks.get(job.task)
    if task is not None and not task.is_workflow:
        return None
    steps = app.workflow_history(job.id)
    if task is None and not steps:
        return None
    return steps


def load(app: App, job_id: int) -> tuple[Job, list[WorkflowStep]] | Missing:
    """The workflow with job id ``job_id`` (as stored, not redacted) and its steps, or
    why there is none."""
    found = app.get_job(job_id)
    if found is None:
        return Missing(NO_JOB.format(id=job_id), "/workflows")
    steps = steps_of(app, found)
    if steps is None:
        known = found.task in app.tasks
        why = (
            f"its task {found.task!r} is a plain task (@app.task), not a workflow"
            if known
            else f"its task {found.task!r} is not registered in this dashboard's app and it "
            "has no checkpointed steps"
        )
        return Missing(f"job {job_id} is not a workflow: {why}", f"/jobs/{job_id}")
    return found, steps


def child_ids(steps: Sequence[WorkflowStep]) -> list[int]:
    """The ids of the child jobs a workflow's steps started, in the order they were."""
    found: list[int] = []
    for step in steps:
        found += _children(step)
    return list(dict.fromkeys(found))


def _children(step: WorkflowStep) -> list[int]:
    return list(step_wait(step).children)


def children_filter(app: App, wanted: JobFilter, workflow: int | None) -> JobFilter:
    """``wanted`` narrowed to the child jobs of ``workflow`` (its first :data:`MAX_IDS`);
    unchanged when None. A workflow that is no workflow is a BadParameter (a 400)."""
    if workflow is None:
        return wanted
    loaded = load(app, workflow)
    if isinstance(loaded, Missing):
        why = loaded.reason
        raise BadParameter(f"workflow={workflow} lists a workflow's child jobs, but {why}")
    return replace(wanted, ids=tuple(child_ids(loaded[1])[:MAX_IDS]))


def parent_of(job: Job) -> tuple[int, int] | None:
    """The workflow a child job was started by, and the step's position, from its key
    (``wf:WORKFLOW:POSITION:INDEX:TASK``); None for any other job."""
    key = job.key or job.released_key
    match = _CHILD_KEY.fullmatch(key) if key else None
    return None if match is None else (int(match[1]), int(match[2]))


@dataclass(frozen=True)
class StepRow:
    """One step as the timeline shows it: ``wake_at``, when a sleeping step (or a step
    waiting to try again) is due; ``timeout_at``, when a wait gives up; ``event``, what a
    wait waits for; ``children`` (id and state, None when pruned) up to
    :data:`CHILDREN_SHOWN` and how many ``more``; ``value`` the result decoded (as text
    when it is not JSON), ``long`` when a table cell's preview of it is cut; ``notes`` for
    detail this dashboard does not know."""

    step: WorkflowStep
    took: float | None
    wake_at: float | None
    timeout_at: float | None
    event: str | None
    event_id: Any
    emitted_at: float | None
    timed_out: bool
    failures: int
    children: list[tuple[int, str | None]]
    more: int
    has_result: bool
    value: Any
    long: bool
    notes: list[str]


def step_rows(app: App, steps: Sequence[WorkflowStep]) -> list[StepRow]:
    """The timeline: every step, with the states of the children it shows read in one
    query a thousand."""
    shown = {step.position: _children(step)[:CHILDREN_SHOWN] for step in steps}
    found = jobs_by_id(app, [i for ids in shown.values() for i in ids])
    states = {i: job.state.value for i, job in found.items()}
    return [_row(step, [(i, states.get(i)) for i in shown[step.position]]) for step in steps]


def _row(step: WorkflowStep, children: list[tuple[int, str | None]]) -> StepRow:
    detail = step.detail
    took = None
    if step.started_at is not None and step.ended_at is not None:
        took = max(0.0, step.ended_at - step.started_at)
    value: Any = None
    if step.result is not None:
        try:
            value = json.loads(step.result)
        except ValueError:
            value = step.result  # a damaged row's result, shown as it is
    wait = step_wait(step)
    return StepRow(
        step=step,
        took=took,
        wake_at=wait.wake_at,
        timeout_at=wait.timeout_at,
        event=wait.event,
        event_id=detail.get("event_id"),
        emitted_at=_time(detail.get("emitted_at")),
        timed_out=bool(detail.get("timed_out")),
        failures=int(detail["failures"]) if isinstance(detail.get("failures"), int) else 0,
        children=children,
        more=max(0, len(_children(step)) - len(children)),
        has_result=step.result is not None,
        value=value,
        long=len(json.dumps(value, ensure_ascii=False, default=str)) > RESULT_PREVIEW,
        notes=[f"{k}={v}" for k, v in detail.items() if k not in _KNOWN_DETAIL],
    )


def _time(value: Any) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return None
