"""``sqljobs dashboard`` and ``sqljobs metrics``: the dashboard, or its ``/metrics`` alone,
served over HTTP (both need the ``dashboard`` extra, imported only when they run)."""

from __future__ import annotations

import click

from ..errors import SqljobsError
from .options import Ctx, pass_ctx


@click.command()
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


@click.command()
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
