"""``sqljobs enqueue``: enqueue a task by name, its arguments given as JSON."""

from __future__ import annotations

import json
from typing import Any

import click

from .options import Ctx, Seconds, pass_ctx


@click.command()
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
    "--debounce",
    type=Seconds(),
    default=None,
    show_default="none",
    help="With --key: run this many seconds after the latest enqueue with the key; while "
    "its job is pending, an enqueue replaces its arguments and moves its start.",
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
    debounce: float | None,
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
        debounce=debounce,
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
