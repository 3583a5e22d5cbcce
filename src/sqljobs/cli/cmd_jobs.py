"""``sqljobs jobs``: list, show, retry, cancel and delete jobs, one or many."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import click

from ..app import App
from ..errors import ConfigurationError, JobNotFound
from ..humanize import RUNNING_CANCELLED
from ..jobs import Job, JobFilter, JobState
from ..redaction import redact_job
from .format import job_parts, jobs_columns, show, table_parts, width
from .options import JOB_ID, Ctx, pass_ctx, queue_name


@click.group()
def jobs() -> None:
    """Inspect and act on jobs."""


@jobs.command("list")
@click.option(
    "--state",
    type=click.Choice([s.value for s in JobState]),
    default=None,
    show_default="all",
    help="Only jobs in this state.",
)
@click.option("--queue", default=None, show_default="all", help="Only jobs of this queue.")
@click.option("--task", default=None, show_default="all", help="Only jobs of this task.")
@click.option("--key", default=None, help="Only the job with this key.")
@click.option(
    "--text", default=None, help="Only jobs whose arguments contain this (case-insensitive)."
)
@click.option(
    "--before", type=click.IntRange(min=1), default=None, help="Only jobs older than this id."
)
@click.option(
    "--limit", type=click.IntRange(1, 1000), default=50, help="At most this many, newest first."
)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@pass_ctx
def jobs_list(
    ctx: Ctx,
    state: str | None,
    queue: str | None,
    task: str | None,
    key: str | None,
    text: str | None,
    before: int | None,
    limit: int,
    as_json: bool,
) -> None:
    """The newest jobs matching every filter given; the next page is --before the id the
    last line names."""
    wanted = _filter(state=state, queue=queue, task=task, key=key, text=text)
    page = ctx.app.find_jobs(wanted, before=before, limit=limit)
    rows = [_redacted(ctx, j) for j in page.jobs]
    if as_json:
        click.echo(json.dumps([j.to_dict() for j in rows], indent=2))
        return
    empty = f"no {state} jobs" if state else "no jobs"
    show(*table_parts(jobs_columns(rows), width(), empty))
    if page.next_before is not None:
        click.echo(f"more: sqljobs jobs list --before {page.next_before} (with the same filters)")


def _filter(**fields: Any) -> JobFilter:
    """The options as a JobFilter; a bad one is a usage error that names it."""
    try:
        return JobFilter(**fields)
    except ConfigurationError as exc:
        raise click.UsageError(str(exc)) from None


@jobs.command("delete")
@click.argument("job_id", type=JOB_ID, required=False)
@click.option(
    "--state",
    type=click.Choice(["done", "dead", "cancelled"]),
    default=None,
    show_default="all three",
    help="Delete only ended jobs in this state.",
)
@click.option("--queue", default=None, help="Delete the ended jobs of this queue.")
@click.option("--task", default=None, help="Delete the ended jobs of this task.")
@click.option("--yes", is_flag=True, help="Do not ask before deleting many jobs.")
@pass_ctx
def jobs_delete(
    ctx: Ctx,
    job_id: int | None,
    state: str | None,
    queue: str | None,
    task: str | None,
    yes: bool,
) -> None:
    """Delete one ended job by id, or every done, dead or cancelled job matching --state,
    --queue and --task (asks first, with the count, unless --yes). Jobs that have not
    ended are never deleted: cancel them first."""
    filters = state is not None or queue is not None or task is not None
    if (job_id is not None) == filters:
        raise click.UsageError("give a job id, or --state, --queue or --task for many: one")
    if job_id is not None:
        try:
            deleted = ctx.app.delete_job(job_id)
        except ConfigurationError as exc:
            raise click.ClickException(str(exc)) from None
        if not deleted:
            raise click.ClickException(f"no job with id {job_id}")
        click.echo(f"job {job_id} deleted")
        return
    wanted = _filter(state=state, queue=queue, task=task)
    newest = ctx.app.find_jobs(limit=1).jobs
    ended = [s for s in ("done", "dead", "cancelled") if state in (None, s)]
    counts = [ctx.app.count_jobs(replace(wanted, state=s)) for s in ended]
    count, capped = sum(c.n for c in counts), any(c.capped for c in counts)
    if count == 0 and not capped:
        click.echo(f"no ended jobs match ({wanted.describe()}): nothing to delete")
        return
    if not yes:
        amount = (
            (f"at least {count:,}" if count else "all the matching") if capped else f"{count:,}"
        )
        click.confirm(f"delete {amount} ended jobs ({wanted.describe()})?", abort=True, err=True)
    if newest:  # what was counted: a job enqueued since is not deleted
        wanted = replace(wanted, up_to=newest[0].id)
    click.echo(f"{ctx.app.delete_jobs(wanted)} job(s) deleted")


def _get(ctx: Ctx, job_id: int) -> Job:
    job = ctx.app.get_job(job_id)
    if job is None:
        raise click.ClickException(f"no job with id {job_id}")
    return job


def _redacted(ctx: Ctx, job: Job) -> Job:
    """The job with the arguments its task redacts shown as ``***``, in its texts too."""
    return redact_job(ctx.app.tasks.get(job.task), job)


@jobs.command("show")
@click.argument("job_id", type=JOB_ID)
@click.option("--json", "as_json", is_flag=True, help="The job as JSON, times in Unix seconds.")
@pass_ctx
def jobs_show(ctx: Ctx, job_id: int, as_json: bool) -> None:
    """Everything about one job, with its attempt history."""
    job = _redacted(ctx, _get(ctx, job_id))
    if as_json:
        click.echo(json.dumps(job.to_dict(), indent=2, default=str))
        return
    task = ctx.app.tasks.get(job.task)  # only a task registered here is known not to store
    stores = task is None or task.store_result
    children = ctx.app.job_children(job.id)
    show(*job_parts(job, width(), ctx.app.waiting_reason(job), stores, children))


@jobs.command("retry")
@click.argument("job_id", type=JOB_ID, required=False)
@click.option("--dead", "all_dead", is_flag=True, help="Retry every dead job.")
@click.option("--queue", default=None, show_default="all", help="With --dead: only this queue.")
@pass_ctx
def jobs_retry(ctx: Ctx, job_id: int | None, all_dead: bool, queue: str | None) -> None:
    """Send a dead or cancelled job (or all dead jobs) back to pending."""
    if all_dead == (job_id is not None):
        raise click.UsageError("give either a job id or --dead")
    if all_dead:
        click.echo(f"{ctx.app.retry_dead(queue)} dead jobs back to pending")
        return
    assert job_id is not None
    job = _get(ctx, job_id)
    if job.state in (JobState.DEAD, JobState.CANCELLED) and ctx.app.retry_job(job.id):
        click.echo(f"job {job.id} is pending again, with fresh attempts")
        return
    state = _get(ctx, job_id).state.value  # it may have changed since
    raise click.ClickException(
        f"job {job.id} is {state}; only dead or cancelled jobs can be retried"
    )


@jobs.command("cancel")
@click.argument("job_id", type=JOB_ID, required=False)
@click.option("--queue", default=None, help="Cancel every job of this queue (with the others).")
@click.option("--task", default=None, help="Cancel every job of this task (with the others).")
@click.option(
    "--state",
    type=click.Choice(["pending", "waiting", "running"]),
    default=None,
    show_default="all three",
    help="Cancel only jobs in this state (with the others).",
)
@click.option("--yes", is_flag=True, help="Do not ask before cancelling many jobs.")
@pass_ctx
def jobs_cancel(
    ctx: Ctx,
    job_id: int | None,
    queue: str | None,
    task: str | None,
    state: str | None,
    yes: bool,
) -> None:
    """Cancel one job by id, or every pending, waiting or running job matching --queue,
    --task and --state (asks first, with the count, unless --yes).

    A pending or waiting job never runs; a running one's worker is told to stop (its handler sees
    ctx.cancelled) and its outcome is discarded. Cancelling a cancelled job is not an
    error."""
    filters = queue is not None or task is not None or state is not None
    if job_id is not None and filters:
        raise click.UsageError("give a job id, or --queue/--task/--state: not both")
    if job_id is None:
        if not filters:
            raise click.UsageError("give a job id, or --queue, --task or --state for many")
        _cancel_many(ctx.app, queue, task, state, yes)
        return
    try:
        cancelled = ctx.app.cancel(job_id)
    except JobNotFound:
        raise click.ClickException(f"no job with id {job_id}") from None
    job = _get(ctx, job_id)
    if cancelled:
        if job.cancelled_while_running:
            click.echo(f"job {job_id} cancelled while running: {RUNNING_CANCELLED}")
        else:
            click.echo(f"job {job_id} cancelled")
        return
    if job.state is JobState.CANCELLED:
        click.echo(f"job {job_id} was already cancelled")
        return
    raise click.ClickException(
        f"job {job_id} is {job.state.value}; only pending, waiting or running jobs can be cancelled"
    )


def _cancel_many(
    app: App, queue: str | None, task: str | None, state: str | None, yes: bool
) -> None:
    if queue is not None:
        queue_name(queue, "jobs cancel --queue", "--queue")
    what = _describe_filters(queue, task, state)
    count, exact = _count_cancellable(app, queue, task, state)
    if count == 0:
        click.echo(f"no {what}: nothing to cancel")
        return
    if not yes:
        amount = str(count) if exact else f"up to {count}"
        click.confirm(f"cancel {amount} {what}?", abort=True, err=True)
    cancelled = app.cancel_many(queue=queue, task=task, state=state)
    running = (
        ""
        if state == "pending"
        else "; the workers of those that were running are told to stop within a heartbeat "
        "(their handlers see ctx.cancelled), and their outcomes will be discarded"
    )
    click.echo(f"{cancelled} job(s) cancelled{running}")


def _describe_filters(queue: str | None, task: str | None, state: str | None) -> str:
    """``pending, waiting or running jobs of task 'send' in queue 'mail'``."""
    text = f"{state or 'pending, waiting or running'} jobs"
    if task is not None:
        text += f" of task {task!r}"
    if queue is not None:
        text += f" in queue {queue!r}"
    return text


CANCEL_COUNT_LIMIT = 1000
"""The most jobs read to count a bulk cancel by task (the stats count by queue and state
only); beyond it the prompt gives the count of every task as an upper bound."""


def _count_cancellable(
    app: App, queue: str | None, task: str | None, state: str | None
) -> tuple[int, bool]:
    """How many jobs a bulk cancel would take now, and whether that count is exact."""
    states = [state] if state else ["pending", "waiting", "running"]
    counts = app.stats().counts
    queues = [queue] if queue is not None else list(counts)
    bound = sum(counts.get(q, {}).get(s, 0) for q in queues for s in states)
    if task is None or bound == 0:
        return bound, True
    if bound > CANCEL_COUNT_LIMIT:
        return bound, False
    jobs = [j for s in states for j in app.list_jobs(s, queue, CANCEL_COUNT_LIMIT)]
    return sum(1 for j in jobs if j.task == task), True
