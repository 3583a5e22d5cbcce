"""The ``sqljobs`` command line."""

from __future__ import annotations

import faulthandler
import importlib
import json
import logging
import os
import signal
import sys
import time
from datetime import datetime
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from .app import App
from .cron import zone
from .errors import ConfigurationError, SqljobsError
from .jobs import Job, JobState
from .schedules import ScheduleNotFound


def load_app(spec: str | None, url: str | None) -> App:
    """``module:attr`` (or ``SQLJOBS_APP``) names the App; else a bare App on the URL."""
    spec = spec or os.environ.get("SQLJOBS_APP")
    if not spec:
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
    def __init__(self, app_spec: str | None, url: str | None) -> None:
        self.app_spec, self.url = app_spec, url
        self._app: App | None = None

    @property
    def app(self) -> App:
        if self._app is None:
            self._app = load_app(self.app_spec, self.url)
        return self._app


pass_ctx = click.make_pass_decorator(Ctx)


@click.group()
@click.option("--app", "app_spec", metavar="MODULE:ATTR", help="The App (or SQLJOBS_APP).")
@click.option("--url", help="Database URL (or SQLJOBS_URL); overrides the app's.")
@click.option("-v", "--verbose", count=True, help="More logging (-v info, -vv debug).")
@click.pass_context
def cli(click_ctx: click.Context, app_spec: str | None, url: str | None, verbose: int) -> None:
    """Durable background jobs in your SQL database."""
    level = [logging.WARNING, logging.INFO, logging.DEBUG][min(verbose, 2)]
    logging.basicConfig(level=level, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    click_ctx.obj = Ctx(app_spec, url)


@cli.command()
@click.option("--concurrency", default=8, show_default=True, help="Jobs run at once per process.")
@click.option("--processes", default=1, show_default=True, help="Worker processes.")
@click.option("--queues", default=None, help="Comma-separated queues (default: all).")
@click.option(
    "--drain-timeout",
    type=float,
    default=None,
    help="Seconds to wait for in-flight jobs at shutdown (< shortest lease).",
)
@pass_ctx
def worker(
    ctx: Ctx, concurrency: int, processes: int, queues: str | None, drain_timeout: float | None
) -> None:
    """Run jobs until SIGTERM (graceful drain) or a second signal (at once).

    SIGUSR1 prints every thread's stack to stderr, for diagnosing a stuck worker."""
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    names = [q.strip() for q in queues.split(",") if q.strip()] if queues else None
    ctx.app.run_worker(
        concurrency=concurrency, queues=names, processes=processes, drain_timeout=drain_timeout
    )


@cli.command()
@click.argument("task")
@click.option("--args", "args_json", default="[]", help="JSON list of positional arguments.")
@click.option("--kwargs", "kwargs_json", default="{}", help="JSON object of keyword arguments.")
@click.option("--key", default=None, help="Business key: a second enqueue returns the same job.")
@click.option("--delay", type=float, default=None, help="Seconds before the job may run.")
@click.option("--queue", default=None)
@click.option("--priority", type=int, default=None)
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
) -> None:
    """Enqueue TASK by name."""
    args = _json_arg(args_json, list, "--args")
    kwargs = _json_arg(kwargs_json, dict, "--kwargs")
    handle = ctx.app.enqueue(
        task, args=args, kwargs=kwargs, key=key, delay=delay, queue=queue, priority=priority
    )
    click.echo(json.dumps({"id": handle.id, "created": handle.created}))


def _json_arg(text: str, kind: type, name: str) -> Any:
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise click.BadParameter(f"not valid JSON: {exc}", param_hint=name) from exc
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
    table = Table(title=f"sqljobs on {ctx.app.url}")
    table.add_column("queue")
    for state in JobState:
        table.add_column(state.value, justify="right")
    table.add_column("oldest pending", justify="right")
    for queue, counts in sorted(st.counts.items()):
        age = st.oldest_pending_age_by_queue.get(queue)
        table.add_row(queue, *(str(counts.get(s.value, 0)) for s in JobState), _age(age))
    console = Console()
    console.print(table)
    console.print(f"oldest pending job: {_age(st.oldest_pending_age)}; live workers: {st.workers}")


def _age(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds:.1f} s"


@cli.group()
def jobs() -> None:
    """Inspect and act on jobs."""


@jobs.command("list")
@click.option("--state", type=click.Choice([s.value for s in JobState]), default=None)
@click.option("--queue", default=None)
@click.option("--limit", default=50, show_default=True)
@click.option("--json", "as_json", is_flag=True)
@pass_ctx
def jobs_list(ctx: Ctx, state: str | None, queue: str | None, limit: int, as_json: bool) -> None:
    """The newest jobs, optionally of one state or queue."""
    rows = ctx.app.list_jobs(state, queue, limit)
    if as_json:
        click.echo(json.dumps([j.to_dict() for j in rows], indent=2))
        return
    table = Table()
    for col in ("id", "task", "queue", "state", "attempts", "run at", "last error"):
        table.add_column(col)
    for j in rows:
        table.add_row(
            str(j.id),
            j.task,
            j.queue,
            j.state.value,
            f"{j.attempts}/{j.max_attempts}",
            _when(j.run_at),
            (j.last_error or "")[:60],
        )
    Console().print(table)


def _when(ts: float | None) -> str:
    return "-" if ts is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts))


def _get(ctx: Ctx, job_id: int) -> Job:
    job = ctx.app.get_job(job_id)
    if job is None:
        raise click.ClickException(f"no job with id {job_id}")
    return job


@jobs.command("show")
@click.argument("job_id", type=int)
@pass_ctx
def jobs_show(ctx: Ctx, job_id: int) -> None:
    """Everything about one job, with its attempt history."""
    click.echo(json.dumps(_get(ctx, job_id).to_dict(), indent=2, default=str))


@jobs.command("retry")
@click.argument("job_id", type=int, required=False)
@click.option("--dead", "all_dead", is_flag=True, help="Retry every dead job.")
@click.option("--queue", default=None, help="With --dead: only this queue.")
@pass_ctx
def jobs_retry(ctx: Ctx, job_id: int | None, all_dead: bool, queue: str | None) -> None:
    """Send a dead or cancelled job (or all dead jobs) back to pending."""
    if all_dead == (job_id is not None):
        raise click.UsageError("give either a job id or --dead")
    if all_dead:
        click.echo(f"{ctx.app.backend.retry_dead(queue)} dead jobs back to pending")
        return
    job = _get(ctx, job_id)  # type: ignore[arg-type]
    if not ctx.app.retry_job(job.id):
        raise click.ClickException(
            f"job {job.id} is {job.state.value}; only dead or cancelled jobs can be retried"
        )
    click.echo(f"job {job.id} is pending again")


@jobs.command("cancel")
@click.argument("job_id", type=int)
@pass_ctx
def jobs_cancel(ctx: Ctx, job_id: int) -> None:
    """Cancel a pending job, or a running one (its handler is told to stop)."""
    job = _get(ctx, job_id)
    if not ctx.app.cancel_job(job.id):
        raise click.ClickException(f"job {job.id} is {job.state.value}; it cannot be cancelled")
    click.echo(f"job {job.id} cancelled")


@cli.group(invoke_without_command=True)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_context
def schedules(click_ctx: click.Context, as_json: bool) -> None:
    """List periodic schedules (name, expression, next run, last run, last outcome,
    paused), or act on one: pause, resume, run-now."""
    if click_ctx.invoked_subcommand is not None:
        return
    rows = click_ctx.find_object(Ctx).app.list_schedules()  # type: ignore[union-attr]
    if as_json:
        click.echo(json.dumps([r.to_dict() for r in rows], indent=2))
        return
    table = Table()
    for col in ("name", "expression", "next run", "last run", "last outcome", "paused"):
        table.add_column(col)
    for r in rows:
        table.add_row(
            r.name,
            r.schedule.expression,
            _when_in(r.next_run_at, r.schedule.tz),
            _when_in(r.last_run_at, r.schedule.tz),
            _outcome(r.last_outcome, r.last_job_id),
            "yes" if r.paused else "",
        )
    Console().print(table)


def _when_in(ts: float | None, tz: str) -> str:
    """A schedule's times in its own time zone, so they read like its cron expression."""
    if ts is None:
        return "-"
    try:
        where = zone(tz)
    except ConfigurationError:
        where = zone("UTC")
    return datetime.fromtimestamp(ts, where).strftime("%Y-%m-%d %H:%M:%S %Z")


def _outcome(outcome: str | None, job_id: int | None) -> str:
    if outcome is None:
        return "-"
    return outcome if job_id is None else f"{outcome} #{job_id}"


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
    click.echo(f"schedule {name} resumed; next run {_when(state.next_run_at if state else None)}")


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
    ctx.app.auto_migrate = False
    applied = ctx.app.backend.migrate()
    click.echo("applied: " + ", ".join(applied) if applied else "schema is up to date")


from .lab.cli import lab  # noqa: E402  (the lab imports its experiments lazily)

cli.add_command(lab)


@cli.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option("--port", default=8080, show_default=True)
@click.option(
    "--token",
    envvar="SQLJOBS_DASHBOARD_TOKEN",
    default=None,
    help="Needed by actions (retry, cancel); required for them beyond loopback "
    "(or SQLJOBS_DASHBOARD_TOKEN).",
)
@pass_ctx
def dashboard(ctx: Ctx, host: str, port: int, token: str | None) -> None:
    """Serve the dashboard, its JSON and /metrics for Prometheus."""
    try:
        from .dashboard import is_loopback, serve
    except ImportError as exc:
        raise click.ClickException(
            f"the dashboard needs its extra: pip install 'sqljobs[dashboard]' ({exc})"
        ) from exc
    if not is_loopback(host) and token is None:
        click.echo(
            f"dashboard on {host}, beyond this machine, without a token: read-only "
            "(give --token to allow retry and cancel)",
            err=True,
        )
    click.echo(f"sqljobs dashboard on http://{host}:{port}/ (metrics at /metrics)", err=True)
    serve(ctx.app, host, port, token)


def main() -> None:
    try:
        cli(standalone_mode=True)
    except (SqljobsError, ConfigurationError) as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
