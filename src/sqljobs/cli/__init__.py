"""The ``sqljobs`` command line.

What a person reads is laid out by :mod:`sqljobs.cli.format` (times in their zone, tables
that fit the terminal); ``--json`` gives scripts the raw values. Nothing here picks a
database on its own: with no app and no URL the command refuses instead of creating a
``sqljobs.db`` in whatever folder it was run from.
"""

from __future__ import annotations

import faulthandler
import importlib
import json
import logging
import math
import os
import signal
import sys
import time
from dataclasses import replace
from importlib import metadata
from typing import Any

import click
from rich.text import Text

from ..app import App
from ..browse import JobFilter, WorkerStatus
from ..errors import ConfigurationError, JobNotFound, ScheduleNotFound, SqljobsError
from ..humanize import duration, iso_local, redact_url
from ..jobs import Job, JobState, QueueInfo
from ..logs import LogFormat, configure_logging
from ..redaction import redact_job
from ..roles import ROLES
from ..roles import grants as grant_statements
from ..url import DEFAULT_URL
from ..validate import MAX_ID, check_queue_name
from .format import (
    RUNNING_CANCELLED,
    job_parts,
    jobs_columns,
    limits_columns,
    paused_lines,
    queues_columns,
    schedules_columns,
    show,
    stats_columns,
    table_parts,
    width,
    workers_columns,
)

JOB_ID = click.IntRange(1, MAX_ID)
"""A job id argument: a number out of the 64-bit range is a usage error that names it
(the database could not even be asked about it)."""
NO_DATABASE = (
    "no database given: pass --url URL or --app MODULE:ATTR, or set SQLJOBS_URL or "
    f"SQLJOBS_APP (a new SQLite file would be --url {DEFAULT_URL})"
)


def load_app(spec: str | None, url: str | None) -> App:
    """``module:attr`` (or ``SQLJOBS_APP``) names the App; else a bare App on the URL
    (``--url`` or ``SQLJOBS_URL``). Neither is an error, not a new ``./sqljobs.db``."""
    spec = spec or os.environ.get("SQLJOBS_APP")
    if not spec:
        if not (url or os.environ.get("SQLJOBS_URL")):
            raise ConfigurationError(NO_DATABASE)
        return App(url)
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise click.BadParameter(f"expected MODULE:ATTR, got {spec!r}", param_hint="--app")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise click.BadParameter(
            f"cannot import {module_name!r}: {exc}", param_hint="--app"
        ) from exc
    app = getattr(module, attr, None)
    if not isinstance(app, App):
        raise click.BadParameter(f"{spec!r} is not a sqljobs.App", param_hint="--app")
    if url:
        app.url = url
    return app


class Ctx:
    """The global options, and the App they name, loaded only by commands that use it
    (``lab`` brings its own database)."""

    def __init__(self, owns_logging: bool = False) -> None:
        self.owns_logging = owns_logging
        self.app_spec: str | None = None
        self.url: str | None = None
        self.verbose = 0
        self.log_format: LogFormat = "text"
        self._app: App | None = None

    @property
    def app(self) -> App:
        if self._app is None:
            self._app = load_app(self.app_spec, self.url)
        return self._app

    def setup_logging(self, worker: bool) -> None:
        """-v INFO, -vv DEBUG; a worker logs INFO without -v (its banner, failed attempts
        and stop summary are what an operator reads). Only when run as ``sqljobs``: a
        program that calls :data:`cli` in-process keeps its own logging."""
        if not self.owns_logging:
            return
        if self.verbose >= 2:
            level = logging.DEBUG
        elif self.verbose == 1 or worker:
            level = logging.INFO
        else:
            level = logging.WARNING
        configure_logging(level, self.log_format)


pass_ctx = click.make_pass_decorator(Ctx)


class Seconds(click.FloatRange):
    """A duration in seconds: finite and not negative (``nan`` and ``inf`` are refused);
    ``positive`` refuses 0 too."""

    name = "seconds"

    def __init__(self, positive: bool = False) -> None:
        super().__init__(min=0, min_open=positive)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        seconds = super().convert(value, param, ctx)
        if not math.isfinite(seconds):
            self.fail(f"{value!r} is not a finite number of seconds", param, ctx)
        return seconds


class Deferred(click.Command):
    """Stands in a group's command list for a command that is imported only when it runs,
    so ``sqljobs --help`` and every other command do not load it. ``target`` is
    ``module:attr``; ``short_help`` is what the list shows (a test keeps it equal to the
    real command's)."""

    def __init__(self, name: str, target: str, short_help: str) -> None:
        super().__init__(name, short_help=short_help, add_help_option=False)
        self.target = target

    def load(self) -> click.Command:
        module, _, attr = self.target.partition(":")
        command = getattr(importlib.import_module(module), attr)
        assert isinstance(command, click.Command), f"{self.target} is not a click command"
        return command


class DeferringGroup(click.Group):
    """A click group that swaps a :class:`Deferred` command for the real one when it is
    resolved to run (or to complete or show its own help)."""

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        name, command, rest = super().resolve_command(ctx, args)
        if isinstance(command, Deferred):
            command = command.load()
        return name, command, rest

    def invoke(self, ctx: click.Context) -> Any:
        """Run the command; one of this group's own options given after the command
        (``sqljobs worker --app x``) is refused with where it belongs, not click's bare
        "No such option"."""
        try:
            return super().invoke(ctx)
        except click.NoSuchOption as exc:
            mine = {opt for param in self.params if not param.is_eager for opt in param.opts}
            if exc.option_name not in mine or exc.ctx is None:
                raise
            command = exc.ctx.command_path[len(ctx.command_path) :].strip()  # "jobs list"
            raise click.UsageError(
                f"{exc.option_name} is an option of sqljobs itself, not of {command!r}: "
                f"give it before the command ({ctx.command_path} {exc.option_name} ... "
                f"{command} ...)",
                ctx=exc.ctx,
            ) from None


def _version() -> str:
    try:
        return metadata.version("sqljobs")
    except metadata.PackageNotFoundError:  # a source tree that was never installed
        return "unknown (not installed)"


@click.group(
    cls=DeferringGroup,
    context_settings={"show_default": True, "help_option_names": ["-h", "--help"]},
)
@click.version_option(_version(), "--version", prog_name="sqljobs", message="%(prog)s %(version)s")
@click.option(
    "--app",
    "app_spec",
    metavar="MODULE:ATTR",
    help="The App to use (or set SQLJOBS_APP); its database unless --url is given.",
)
@click.option(
    "--url",
    help="Database URL, sqlite:///jobs.db or postgresql://user@host/db (or set "
    "SQLJOBS_URL); overrides the app's.",
)
@click.option(
    "-v",
    "--verbose",
    count=True,
    help="More logging: -v info, -vv debug (worker: info without -v).",
)
@click.option(
    "--log-format",
    type=click.Choice(["text", "json"]),
    default="text",
    help="Log lines on stderr as text, or as one JSON object per line.",
)
@click.pass_context
def cli(
    click_ctx: click.Context,
    app_spec: str | None,
    url: str | None,
    verbose: int,
    log_format: LogFormat,
) -> None:
    """Durable background jobs in your SQL database."""
    ctx = click_ctx.ensure_object(Ctx)
    ctx.app_spec, ctx.url, ctx.verbose, ctx.log_format = app_spec, url, verbose, log_format
    ctx.setup_logging(worker=click_ctx.invoked_subcommand == "worker")


@cli.command()
@click.option(
    "--concurrency",
    type=click.IntRange(min=1),
    default=8,
    help="Jobs run at once in each worker process.",
)
@click.option(
    "--processes",
    type=click.IntRange(min=1),
    default=1,
    help="Worker processes; more than 1 run under a supervisor that restarts a crashed one.",
)
@click.option(
    "--queues",
    default=None,
    show_default="all queues",
    help="Comma-separated queues to take jobs from.",
)
@click.option(
    "--drain-timeout",
    type=Seconds(),
    default=None,
    show_default="half the shortest task lease, at most 10 s",
    help="Seconds running jobs get to finish after SIGTERM before they are handed back; "
    "must be shorter than the shortest task lease.",
)
@click.option(
    "--cancel-grace",
    type=Seconds(positive=True),
    default=30.0,
    show_default=True,
    help="Seconds a cancelled handler that ignores ctx.cancelled may run on before it is "
    "logged as stuck; with --processes its worker process is then replaced.",
)
@click.option(
    "--poll-interval",
    type=Seconds(positive=True),
    default=5.0,
    show_default=True,
    help="Seconds between fallback looks for work, jittered by 10% (an idle worker asks "
    "when the next job is due, one read, and claims if one is); in poll-only mode "
    "(?listen=false, behind PgBouncer in transaction mode) the only way a worker learns of "
    "jobs enqueued by other processes.",
)
@click.option(
    "--log-format",
    "worker_log_format",
    type=click.Choice(["text", "json"]),
    default=None,
    show_default="the global --log-format",
    help="Log lines as text or JSON; wins over the global option.",
)
@pass_ctx
def worker(
    ctx: Ctx,
    concurrency: int,
    processes: int,
    queues: str | None,
    drain_timeout: float | None,
    cancel_grace: float,
    poll_interval: float,
    worker_log_format: LogFormat | None,
) -> None:
    """Run jobs until SIGTERM or Ctrl-C (graceful drain) or a second signal (at once).

    SIGUSR1 prints every thread's stack to stderr, for diagnosing a stuck worker."""
    if worker_log_format is not None:
        ctx.log_format = worker_log_format
        ctx.setup_logging(worker=True)
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    names = [q.strip() for q in queues.split(",") if q.strip()] if queues else None
    # after a signal the worker logs its own stop summary; nothing more to print here
    ctx.app.run_worker(
        concurrency=concurrency,
        queues=names,
        processes=processes,
        drain_timeout=drain_timeout,
        cancel_grace=cancel_grace,
        poll_interval=poll_interval,
    )


@cli.command()
@click.argument("task")
@click.option("--args", "args_json", default="[]", help="JSON list of positional arguments.")
@click.option("--kwargs", "kwargs_json", default="{}", help="JSON object of keyword arguments.")
@click.option(
    "--key",
    default=None,
    show_default="none",
    help="Business key: enqueueing it again returns the job that has it (while kept).",
)
@click.option(
    "--delay",
    type=Seconds(),
    default=None,
    show_default="0, due now",
    help="Seconds from now before the job may run.",
)
@click.option(
    "--queue",
    default=None,
    show_default="the task's queue, else the app's default queue",
    help="Queue to put the job in.",
)
@click.option(
    "--priority",
    type=int,
    default=None,
    show_default="the task's priority, else 0",
    help="Among due jobs, higher runs first.",
)
@click.option(
    "--after",
    default=None,
    metavar="IDS",
    help="Comma-separated job ids this job waits for (state 'waiting' until they are done).",
)
@click.option(
    "--after-policy",
    type=click.Choice(["done", "always"]),
    default="done",
    show_default=True,
    help="'done': run only if every parent is done (else cancelled); 'always': once all ended.",
)
@click.option(
    "--remote",
    is_flag=True,
    help="The task is registered only by another service's workers; skip the check that "
    "this app knows it.",
)
@pass_ctx
def enqueue(
    ctx: Ctx,
    task: str,
    args_json: str,
    kwargs_json: str,
    key: str | None,
    delay: float | None,
    queue: str | None,
    priority: int | None,
    after: str | None,
    after_policy: str,
    remote: bool,
) -> None:
    """Enqueue TASK by name; prints {"id": ..., "created": ...}."""
    args = _json_arg(args_json, list, "--args")
    kwargs = _json_arg(kwargs_json, dict, "--kwargs")
    parents = _ids_arg(after, "--after")
    handle = ctx.app.enqueue(
        task,
        args=args,
        kwargs=kwargs,
        key=key,
        delay=delay,
        queue=queue,
        priority=priority,
        known=not remote,
        after=parents,
        after_policy="always" if after_policy == "always" else "done",
    )
    click.echo(json.dumps({"id": handle.id, "created": handle.created}))


def _ids_arg(text: str | None, name: str) -> list[int]:
    """Job ids given as "12,13"."""
    if text is None:
        return []
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise click.BadParameter(
            f"must be job ids separated by commas, got {text!r}", param_hint=name
        ) from None


def _json_arg(text: str, kind: type, name: str) -> Any:
    try:
        value = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise click.BadParameter(f"not valid JSON: {exc}", param_hint=name) from None
    if not isinstance(value, kind):
        raise click.BadParameter(f"must be a JSON {kind.__name__}", param_hint=name)
    return value


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@pass_ctx
def stats(ctx: Ctx, as_json: bool) -> None:
    """Counts by queue and state, and the age of the oldest due pending job."""
    st = ctx.app.stats()
    if as_json:
        click.echo(json.dumps(st.to_dict(), indent=2))
        return
    lines = [
        Text(f"sqljobs on {redact_url(ctx.app.url)}"),
        *table_parts(stats_columns(st), width(), "no jobs"),
        Text(f"oldest pending job: {duration(st.oldest_pending_age)}; live workers: {st.workers}"),
    ]
    if st.unserved:
        waiting = ", ".join(f"{task} ({n})" for task, n in sorted(st.unserved.items()))
        lines.append(Text(f"pending for a task no live worker runs: {waiting}"))
    if st.paused:
        lines.append(Text(f"paused queues (no new jobs taken): {', '.join(st.paused)}"))
    if st.limits:
        lines += [Text("concurrency and rate limits, the busiest keys:")]
        lines += table_parts(limits_columns(st), width(), "")
    show(*lines)


@cli.group()
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
        _queue_name(queue, "jobs cancel --queue", "--queue")
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


def _queue_name(name: str, where: str, hint: str) -> str:
    """A queue name as the app would check it, refused as a bad parameter (with what a
    name may hold) before anything is read or written."""
    try:
        return check_queue_name(name, where)
    except ConfigurationError as exc:
        raise click.BadParameter(str(exc), param_hint=hint) from exc


@cli.group(invoke_without_command=True)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_context
def queues(click_ctx: click.Context, as_json: bool) -> None:
    """List queues (paused or not, jobs by state, the age of the oldest due job), or
    pause or resume one."""
    if click_ctx.invoked_subcommand is None:
        _list_queues(click_ctx.find_object(Ctx).app, as_json)  # type: ignore[union-attr]


@queues.command("list")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@pass_ctx
def queues_list(ctx: Ctx, as_json: bool) -> None:
    """Every queue that has jobs, tasks of this app or a setting, by name."""
    _list_queues(ctx.app, as_json)


def _list_queues(app: App, as_json: bool) -> None:
    rows = app.queues()
    # the moment of a pause is a setting the backend keeps beside the flag
    paused_at = app.paused_queues()
    if as_json:
        click.echo(json.dumps([_queue_json(q, paused_at) for q in rows], indent=2))
        return
    parts: list[Any] = table_parts(
        queues_columns(rows, paused_at, time.time()), width(), "no queues"
    )
    parts += [Text(line) for line in paused_lines(rows, paused_at)]
    show(*parts)


def _queue_json(queue: QueueInfo, paused_at: dict[str, float | None]) -> dict[str, Any]:
    return {
        "name": queue.name,
        "paused": queue.paused,
        "paused_at": paused_at.get(queue.name) if queue.paused else None,
        "counts": dict(queue.counts),
        "oldest_due_age": queue.oldest_due_age,
    }


@queues.command("pause")
@click.argument("name")
@pass_ctx
def queues_pause(ctx: Ctx, name: str) -> None:
    """Stop every worker, on every host, from taking new jobs of queue NAME; running jobs
    finish, and enqueues and schedules still add to it."""
    _queue_name(name, "queues pause", "NAME")
    known = {q.name for q in ctx.app.queues()}
    if ctx.app.pause_queue(name):
        click.echo(f"queue {name} paused: workers take no new jobs from it; running jobs finish")
    else:
        click.echo(f"queue {name} was already paused")
    if name not in known:
        click.echo(
            f"note: no job or task of this app uses queue {name!r} yet (a typo?); "
            "it stays paused until resumed",
            err=True,
        )


@queues.command("resume")
@click.argument("name")
@pass_ctx
def queues_resume(ctx: Ctx, name: str) -> None:
    """Let workers take jobs of queue NAME again (they are woken at once)."""
    _queue_name(name, "queues resume", "NAME")
    if ctx.app.resume_queue(name):
        click.echo(f"queue {name} resumed: workers take its jobs again")
    else:
        click.echo(f"queue {name} was not paused")


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@pass_ctx
def workers(ctx: Ctx, as_json: bool) -> None:
    """The live workers (seen within their heartbeat) and the jobs each is running."""
    statuses = ctx.app.workers()
    if as_json:
        click.echo(json.dumps([_worker_json(w) for w in statuses], indent=2))
        return
    show(*table_parts(workers_columns(statuses, time.time()), width(), "no live workers"))


def _worker_json(status: WorkerStatus) -> dict[str, Any]:
    return {
        "id": status.id,
        "host": status.host,
        "pid": status.pid,
        "queues": status.queues,
        "concurrency": status.concurrency,
        "started_at": status.started_at,
        "last_seen": status.last_seen,
        "tasks": status.tasks,
        "running": [
            {"id": j.id, "task": j.task, "queue": j.queue, "started_at": j.started_at}
            for j in status.running
        ],
    }


@cli.group(invoke_without_command=True)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_context
def schedules(click_ctx: click.Context, as_json: bool) -> None:
    """List periodic schedules (times in this machine's zone, each schedule's own zone
    beside them), or act on one: pause, resume, run-now."""
    if click_ctx.invoked_subcommand is not None:
        return
    rows = click_ctx.find_object(Ctx).app.list_schedules()  # type: ignore[union-attr]
    if as_json:
        click.echo(json.dumps([r.to_dict() for r in rows], indent=2))
        return
    show(*table_parts(schedules_columns(rows), width(), "no schedules"))


@schedules.command("pause")
@click.argument("name")
@pass_ctx
def schedules_pause(ctx: Ctx, name: str) -> None:
    """Stop a schedule from firing until it is resumed."""
    if not ctx.app.pause_schedule(name):
        raise click.ClickException(f"no schedule named {name!r}")
    click.echo(f"schedule {name} paused")


@schedules.command("resume")
@click.argument("name")
@pass_ctx
def schedules_resume(ctx: Ctx, name: str) -> None:
    """Let a paused schedule fire again, from its next tick after now."""
    if not ctx.app.resume_schedule(name):
        raise click.ClickException(f"no schedule named {name!r}")
    state = ctx.app.get_schedule(name)
    when = iso_local(state.next_run_at if state else None)
    click.echo(f"schedule {name} resumed; next run {when}")


@schedules.command("run-now")
@click.argument("name")
@pass_ctx
def schedules_run_now(ctx: Ctx, name: str) -> None:
    """Enqueue one run of a schedule now (with overlap=skip, not while one is pending or
    running). Prints {"id": ..., "created": ...}."""
    try:
        handle = ctx.app.run_schedule_now(name)
    except ScheduleNotFound as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(json.dumps({"id": handle.id, "created": handle.created}))


@cli.command()
@pass_ctx
def migrate(ctx: Ctx) -> None:
    """Apply pending schema migrations."""
    ctx.app.auto_migrate = False  # else opening the database applies them before we can list them
    applied = ctx.app.migrate()
    click.echo("applied: " + ", ".join(applied) if applied else "schema is up to date")


@cli.command()
@click.option(
    "--role",
    "kind",
    type=click.Choice(list(ROLES)),
    required=True,
    help="What the PostgreSQL role is for (docs/security.md).",
)
@click.option("--schema", default="public", show_default=True, help="The sqljobs tables' schema.")
@click.argument("name")
def grants(kind: str, schema: str, name: str) -> None:
    """Print the GRANTs that give the existing PostgreSQL role NAME what a producer,
    worker, dashboard or read-only reader needs, and no more. Run them as the tables'
    owner after `sqljobs migrate` (again after an upgrade's). Connects to nothing."""
    try:
        click.echo(grant_statements(kind, name, schema=schema), nl=False)
    except ConfigurationError as exc:
        raise click.UsageError(str(exc)) from exc


# the lab is 2,400 lines of experiments, rich tables and charts: loaded only when it runs
cli.add_command(
    Deferred(
        "lab",
        "sqljobs.cli.lab:lab",
        "Re-run the article's experiments (E1-E9) against a real database.",
    )
)


@cli.command()
@click.option("--host", default="127.0.0.1", help="Address to bind.")
@click.option("--port", type=click.IntRange(1, 65535), default=8080, help="Port to listen on.")
@click.option(
    "--token",
    envvar="SQLJOBS_DASHBOARD_TOKEN",
    default=None,
    show_default="none: loopback only",
    help="Required by every request once set (bearer header, basic auth password or the "
    "login page); required to bind beyond loopback (or SQLJOBS_DASHBOARD_TOKEN).",
)
@click.option("--read-only", is_flag=True, help="Show no buttons and refuse every action (403).")
@click.option(
    "--alert-age",
    type=click.FloatRange(min=0, min_open=True),
    default=60.0,
    show_default=True,
    help="Seconds the oldest due job may wait before the overview shows it in red.",
)
@pass_ctx
def dashboard(
    ctx: Ctx, host: str, port: int, token: str | None, read_only: bool, alert_age: float
) -> None:
    """Serve the dashboard, its JSON and /metrics for Prometheus."""
    try:
        from ..dashboard import check_bind, serve
    except ImportError as exc:
        raise click.ClickException(
            f"the dashboard needs its extra: pip install 'sqljobs[dashboard]' ({exc})"
        ) from exc
    try:
        check_bind(host, token)
    except SqljobsError as exc:
        raise click.UsageError(str(exc)) from exc
    mode = " read-only" if read_only else ""
    click.echo(f"sqljobs{mode} dashboard on http://{host}:{port}/ (metrics at /metrics)", err=True)
    serve(ctx.app, host, port, token, read_only=read_only, alert_age=alert_age)


@cli.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option(
    "--port", type=click.IntRange(1, 65535), default=9464, show_default=True,
    help="Port to serve /metrics on.",
)  # fmt: skip
@pass_ctx
def metrics(ctx: Ctx, host: str, port: int) -> None:
    """Serve /metrics for Prometheus alone, without the dashboard: the same gauges,
    counters and histograms, read from the database at every scrape (job counts, oldest
    due age, workers, paused queues, limits, attempts, durations); every task's series
    are there at zero from the first scrape."""
    try:
        from ..dashboard.metrics import serve_metrics
    except ImportError as exc:
        raise click.ClickException(
            f"metrics need the dashboard extra: pip install 'sqljobs[dashboard]' ({exc})"
        ) from exc
    click.echo(f"sqljobs metrics on http://{host}:{port}/metrics", err=True)
    try:
        serve_metrics(ctx.app, host, port)
    except OSError as exc:
        raise click.ClickException(f"cannot serve metrics on {host}:{port}: {exc}") from exc


def main(args: list[str] | None = None, prog_name: str | None = None) -> None:
    """``sqljobs``: the command line, which configures logging (an in-process call of
    :data:`cli` does not); library errors are one line, not a traceback. ``args`` and
    ``prog_name`` default to the process's (``manage.py sqljobs`` passes its own)."""
    try:
        cli.main(args=args, prog_name=prog_name, standalone_mode=True, obj=Ctx(owns_logging=True))
    except SqljobsError as exc:  # ConfigurationError and the rest of the tree
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
