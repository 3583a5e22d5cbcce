"""The ``sqljobs`` command line.

What a person reads is laid out by :mod:`sqljobs.cli.format` (times in their zone, tables
that fit the terminal); ``--json`` gives scripts the raw values. Nothing here picks a
database on its own: with no app and no URL the command refuses instead of creating a
``sqljobs.db`` in whatever folder it was run from.

This module holds the root group and its global options; each command group is a module of
its own (``cmd_jobs.py`` for ``sqljobs jobs ...``), and :mod:`sqljobs.cli.options` what
they share.
"""

from __future__ import annotations

import sys

import click

from .._version import __version__
from ..errors import SqljobsError
from ..logs import LogFormat
from .cmd_dashboard import dashboard, metrics
from .cmd_enqueue import enqueue
from .cmd_jobs import jobs
from .cmd_migrate import grants, migrate
from .cmd_queues import queues
from .cmd_schedules import schedules
from .cmd_stats import stats, workers
from .cmd_worker import worker
from .cmd_workflows import workflows
from .group import Deferred, DeferringGroup
from .options import Ctx, load_app

__all__ = ["Ctx", "Deferred", "cli", "load_app", "main"]


@click.group(
    cls=DeferringGroup,
    context_settings={"show_default": True, "help_option_names": ["-h", "--help"]},
)
@click.version_option(__version__, "--version", prog_name="sqljobs", message="%(prog)s %(version)s")
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


cli.add_command(worker)
cli.add_command(enqueue)
cli.add_command(stats)
cli.add_command(jobs)
cli.add_command(queues)
cli.add_command(workers)
cli.add_command(schedules)
cli.add_command(migrate)
cli.add_command(grants)
cli.add_command(dashboard)
cli.add_command(metrics)
cli.add_command(workflows)

# the lab (experiments, rich tables, charts) is the largest part: loaded only when it runs
cli.add_command(
    Deferred(
        "lab",
        "sqljobs.cli.cmd_lab:lab",
        "Re-run the article's experiments (E1-E9) and E10 (workflows) against a real database.",
    )
)


def main(args: list[str] | None = None, prog_name: str | None = None) -> None:
    """``sqljobs``: the command line, which configures logging (an in-process call of
    :data:`cli` does not); library errors are one line, not a traceback. ``args`` and
    ``prog_name`` default to the process's (``manage.py sqljobs`` passes its own)."""
    try:
        cli.main(args=args, prog_name=prog_name, standalone_mode=True, obj=Ctx(owns_logging=True))
    except SqljobsError as exc:  # ConfigurationError and the rest of the tree
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
