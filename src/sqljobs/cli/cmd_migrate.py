"""``sqljobs migrate`` and ``sqljobs grants``: the schema, and what each PostgreSQL role
may do with it."""

from __future__ import annotations

import click

from ..errors import ConfigurationError
from ..roles import ROLES
from ..roles import grants as grant_statements
from .options import Ctx, pass_ctx


@click.command()
@pass_ctx
def migrate(ctx: Ctx) -> None:
    """Apply pending schema migrations."""
    ctx.app.auto_migrate = False  # else opening the database applies them before we can list them
    applied = ctx.app.migrate()
    click.echo("applied: " + ", ".join(applied) if applied else "schema is up to date")


@click.command()
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
