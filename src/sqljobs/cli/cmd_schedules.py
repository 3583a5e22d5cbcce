"""``sqljobs schedules``: list periodic schedules, pause, resume or run one now."""

from __future__ import annotations

import json

import click

from ..errors import ScheduleNotFound
from ..humanize import iso_local
from .format import schedules_columns, show, table_parts, width
from .options import Ctx, pass_ctx


@click.group(invoke_without_command=True)
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
