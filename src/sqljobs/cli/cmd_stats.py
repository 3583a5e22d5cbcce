"""``sqljobs stats`` and ``sqljobs workers``: what the queues hold and who runs them, now."""

from __future__ import annotations

import json
import time
from typing import Any

import click
from rich.text import Text

from ..humanize import duration, redact_url
from ..jobs import WorkerStatus
from ..rollup import replacement_counts, replacements_text
from .format import limits_columns, show, stats_columns, table_parts, width, workers_columns
from .options import Ctx, pass_ctx


@click.command()
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


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@pass_ctx
def workers(ctx: Ctx, as_json: bool) -> None:
    """The live workers (seen within their heartbeat) and the jobs each is running."""
    statuses = ctx.app.workers()
    if as_json:
        click.echo(json.dumps([_worker_json(w) for w in statuses], indent=2))
        return
    replaced = replacement_counts(ctx.app.metric_totals())
    show(
        *table_parts(workers_columns(statuses, time.time()), width(), "no live workers"),
        *([Text(replacements_text(replaced))] if any(replaced.values()) else []),
    )


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
