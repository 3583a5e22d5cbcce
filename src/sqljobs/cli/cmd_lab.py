"""``sqljobs lab``: re-run the reference article's experiments and compare."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import click
from rich.console import Console

from ..errors import ConfigurationError
from ..lab.db import DEFAULT_PG, is_postgres
from ..lab.results import summary
from ..lab.runner import NAMES, run_all, select


@click.command()
@click.argument("experiments", nargs=-1, metavar="[E1..E10|all]")
@click.option("--backend", type=click.Choice(["sqlite", "postgres"]), default=None,
              help="Database engine (default: from --url, else sqlite).")  # fmt: skip
@click.option("--url", "lab_url", default=None,
              help="SQLite file whose folder holds the scratch files, or a PostgreSQL server "
                   "URL on which scratch databases are created and dropped.")  # fmt: skip
@click.option("--json", "as_json", is_flag=True, help="Print every figure as JSON.")
@click.option("--charts", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Write one PNG per experiment here (needs the 'lab' extra).")  # fmt: skip
@click.option("--quick", is_flag=True, help="Smaller runs: all of them in a few minutes.")
@click.pass_context
def lab(
    click_ctx: click.Context,
    experiments: tuple[str, ...],
    backend: str | None,
    lab_url: str | None,
    as_json: bool,
    charts: Path | None,
    quick: bool,
) -> None:
    """Re-run the article's experiments (E1-E9) and E10 (workflows) against a real database.

    Each table shows our figure with the article's in brackets; broken variants are
    marked "don't". Exits 1 if any structural claim failed.
    """
    parent = click_ctx.obj
    url = lab_url or getattr(parent, "url", None)
    backend = backend or ("postgres" if url and is_postgres(url) else "sqlite")
    if url and is_postgres(url) != (backend == "postgres"):
        raise click.BadParameter(f"--url {url!r} is not a {backend} URL", param_hint="--url")
    try:
        names = select(experiments)
    except ConfigurationError as exc:
        raise click.BadParameter(str(exc), param_hint="EXPERIMENT") from None
    if charts is not None:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise click.UsageError(
                "--charts needs matplotlib: pip install 'sqljobs[lab]'"
            ) from None
    if backend == "postgres":
        _check_server(url or DEFAULT_PG)
    if logging.getLogger("sqljobs").getEffectiveLevel() >= logging.WARNING:  # no -v
        # the experiments expire leases and kill jobs on purpose (thousands of log lines);
        # what they did is in the tables and claims, and -v shows the logs
        logging.getLogger("sqljobs").setLevel(logging.CRITICAL)
    console = Console(stderr=as_json)
    if not as_json:
        console.print(
            f"[bold]sqljobs lab[/]: {', '.join(names)} on {backend}"
            + (" (quick)" if quick else "")
            + "; our figures, the article's in brackets"
        )
    results = run_all(names, backend, url, quick, console, charts, show_tables=not as_json)
    if as_json:
        doc = {
            "backend": backend,
            "quick": quick,
            "experiments": [r.to_dict() for r in results],
        }
        click.echo(json.dumps(doc, indent=2))
    else:
        console.print(summary(results))
    if not all(r.all_held for r in results):
        sys.exit(1)


def _check_server(url: str) -> None:
    """Fail with one clear line, not a traceback, when the server cannot be reached."""
    try:
        import psycopg
    except ImportError:
        raise click.UsageError(
            "--backend postgres needs psycopg: pip install 'sqljobs[postgres]'"
        ) from None
    try:
        psycopg.connect(url, connect_timeout=5).close()
    except psycopg.Error as exc:
        safe = url.split("@")[-1]
        raise click.ClickException(f"cannot reach PostgreSQL at {safe}: {exc}") from None


__all__ = ["NAMES", "lab"]
