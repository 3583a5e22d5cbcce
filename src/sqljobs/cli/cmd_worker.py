"""``sqljobs worker``: run jobs until told to stop."""

from __future__ import annotations

import faulthandler
import signal

import click

from ..errors import ConfigurationError
from ..logs import LogFormat
from ..validate import parse_size
from .options import Ctx, Seconds, pass_ctx


@click.command()
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
    "--max-tasks-per-process",
    type=click.IntRange(min=1),
    default=None,
    show_default="no limit",
    help="With --processes: a worker process that has run this many jobs stops claiming, "
    "drains and is replaced (no job lost or charged).",
)
@click.option(
    "--max-memory-per-process",
    default=None,
    show_default="no limit",
    help="With --processes: a worker process whose resident memory is over this size "
    "(bytes, or 512MB, 1.5GiB), checked between jobs, stops claiming, drains and is replaced.",
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
    max_tasks_per_process: int | None,
    max_memory_per_process: str | None,
    worker_log_format: LogFormat | None,
) -> None:
    """Run jobs until SIGTERM or Ctrl-C (graceful drain) or a second signal (at once).

    SIGUSR1 prints every thread's stack to stderr, for diagnosing a stuck worker."""
    if max_memory_per_process is not None:
        try:
            parse_size(max_memory_per_process, "--max-memory-per-process")
        except ConfigurationError as exc:
            raise click.BadParameter(str(exc), param_hint="--max-memory-per-process") from exc
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
        max_tasks_per_process=max_tasks_per_process,
        max_memory_per_process=max_memory_per_process,
    )
