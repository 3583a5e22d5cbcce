"""``sqljobs workflows``: list workflows, or show one's timeline of steps."""

from __future__ import annotations

import dataclasses
import json
import time

import click

from ..humanize import ago, duration, iso_local
from ..jobs import JobState, WorkflowStep
from ..workflow_ops import WorkflowRun, step_wait
from .format import Column, one_line, show, table_parts, width
from .options import JOB_ID, Ctx, pass_ctx


@click.group()
def workflows() -> None:
    """Inspect durable workflows (``@app.workflow``)."""


@workflows.command("list")
@click.option(
    "--state",
    type=click.Choice([s.value for s in JobState]),
    default=None,
    show_default="all",
    help="Only workflows in this state.",
)
@click.option("--limit", type=click.IntRange(1, 1000), default=50, help="At most this many.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@pass_ctx
def workflows_list(ctx: Ctx, state: str | None, limit: int, as_json: bool) -> None:
    """The newest workflows of the App's workflow tasks, with what each waits for."""
    runs = ctx.app.workflows(state=state, limit=limit)
    if as_json:
        click.echo(json.dumps([dataclasses.asdict(r) for r in runs], indent=2))
        return
    now = time.time()
    columns = [
        Column("id", [str(r.id) for r in runs], 0, justify="right"),
        Column("workflow", [r.task for r in runs], 0),
        Column("state", [r.state for r in runs], 0),
        Column("steps", [str(r.steps) for r in runs], 1, justify="right"),
        Column("waits for", [_waits_for(r, now) for r in runs], 2, flex=True),
        Column("created", [ago(r.created_at, now) for r in runs], 3),
    ]
    empty = "no workflows" if not ctx.app.tasks or any(
        t.is_workflow for t in ctx.app.tasks.values()
    ) else "this App registers no workflow (@app.workflow)"  # fmt: skip
    show(*table_parts(columns, width(), empty))


def _waits_for(run: WorkflowRun, now: float) -> str:
    if run.state != JobState.WAITING:
        return ""
    if run.wait_event is not None:
        until = "" if run.wake_at is None else f" (until {iso_local(run.wake_at)})"
        return f"event {run.wait_event}{until}"
    if run.waiting_on:
        return f"{run.waiting_on} child job(s)"
    if run.wake_at is not None:
        return f"its time, in {duration(max(0.0, run.wake_at - now))}"
    return ""


@workflows.command("show")
@click.argument("job_id", type=JOB_ID)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@pass_ctx
def workflows_show(ctx: Ctx, job_id: int, as_json: bool) -> None:
    """A workflow's timeline: each checkpointed step with its state, duration, result or
    error, and what it waits for; then the job itself (as ``jobs show``)."""
    job = ctx.app.get_job(job_id)
    if job is None:
        raise click.ClickException(f"no job with id {job_id}")
    steps = ctx.app.workflow_history(job_id)
    if as_json:
        out = {"job": job.to_dict(), "steps": [s.to_dict() for s in steps]}
        click.echo(json.dumps(out, indent=2, default=str))
        return
    click.echo(f"workflow {job.id} ({job.task}): {job.state.value}, attempt {job.attempts}")
    reason = ctx.app.waiting_reason(job)
    if reason:
        click.echo(f"  {reason}")
    columns = [
        Column("#", [str(s.position) for s in steps], 0, justify="right"),
        Column("kind", [s.kind for s in steps], 1),
        Column("step", [s.name for s in steps], 0),
        Column("state", [s.state for s in steps], 0),
        Column("took", [_took(s) for s in steps], 2, justify="right"),
        Column("started", [iso_local(s.started_at) for s in steps], 4),
        Column("result / detail", [_outcome(s) for s in steps], 3, flex=True),
    ]
    show(*table_parts(columns, width(), "no steps checkpointed yet"))
    if job.state is JobState.DEAD and job.last_error:
        click.echo(f"last error: {one_line(job.last_error)}")


def _took(step: WorkflowStep) -> str:
    if step.started_at is None or step.ended_at is None:
        return ""
    return duration(max(0.0, step.ended_at - step.started_at))


def _outcome(step: WorkflowStep) -> str:
    if step.error:
        return one_line(step.error)
    if step.state == "waiting":
        wait = step_wait(step)
        if wait.children:
            return "children " + ", ".join(map(str, wait.children))
        if wait.wake_at is not None:
            return f"until {iso_local(wait.wake_at)}"
        until = wait.timeout_at
        return f"event {step.name}" + ("" if until is None else f" until {iso_local(until)}")
    if step.detail.get("timed_out"):
        return "timed out"
    return "" if step.result is None else one_line(step.result)
