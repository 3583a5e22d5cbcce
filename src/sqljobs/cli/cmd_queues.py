"""``sqljobs queues``: list queues, pause and resume one."""

from __future__ import annotations

import json
import time
from typing import Any

import click
from rich.text import Text

from ..app import App
from ..jobs import QueueInfo
from .format import paused_lines, queues_columns, show, table_parts, width
from .options import Ctx, pass_ctx, queue_name


@click.group(invoke_without_command=True)
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
    queue_name(name, "queues pause", "NAME")
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
    queue_name(name, "queues resume", "NAME")
    if ctx.app.resume_queue(name):
        click.echo(f"queue {name} resumed: workers take its jobs again")
    else:
        click.echo(f"queue {name} was not paused")
