"""The dashboard as an ASGI application: :func:`create_app` sets up one :class:`Site` and
maps every URL to its endpoint in the route modules (pages, the JSON reads and
``/metrics``, the actions), behind the :class:`~sqljobs.dashboard.gate.Gate`;
:func:`serve` runs it under uvicorn."""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from ..app import App
from ..errors import ConfigurationError
from ..validate import finite_number
from . import actions, api, render
from .action_routes import ActionRoutes
from .api_routes import ApiRoutes
from .gate import Gate
from .page_routes import PageRoutes
from .pages import BULK_VERBS, DEFAULT_ALERT_AGE, Pages
from .security import Guard, WrongTokenThrottle, check_bind, is_loopback
from .site import Site


def create_app(
    app: App,
    *,
    token: str | None = None,
    exposed: bool = False,
    read_only: bool = False,
    port: int | None = None,
    alert_age: float = DEFAULT_ALERT_AGE,
    throttle: WrongTokenThrottle | None = None,
) -> Starlette:
    """The dashboard as an ASGI application over ``app``'s database.

    ``exposed`` (reachable beyond loopback) needs a ``token``: without one this raises
    ConfigurationError. Unexposed, only a Host of localhost, 127.0.0.1 or [::1] is served
    (with ``port``, when given). ``read_only`` refuses every action and shows no buttons.
    ``alert_age``: seconds the oldest due job may wait before the overview shows its age
    as an alert. ``throttle`` counts wrong tokens by client address (a default one).

    Mounted in another application (``Mount("/jobs-admin", create_app(app))``), its
    links, forms, redirects and cookies stay under the prefix (docs/fastapi.md)."""
    guard = Guard.create(token, exposed=exposed, port=port)
    throttle = throttle or WrongTokenThrottle()
    try:
        alert_age = finite_number(alert_age, "alert_age", positive=True)
    except ConfigurationError:
        raise ConfigurationError(f"alert_age must be seconds > 0, got {alert_age!r}") from None
    pages = Pages(app, render.environment(), alert_age)
    site = Site(app, pages, guard, throttle, read_only)
    return Starlette(
        routes=routes(site),
        middleware=[Middleware(Gate, guard=guard, throttle=throttle)],
        exception_handlers={api.BadParameter: site.bad_parameter},
    )


def routes(site: Site) -> list[BaseRoute]:
    """Every URL of the dashboard, in the order they are matched."""
    page, read, act = PageRoutes(site), ApiRoutes(site), ActionRoutes(site)
    return [
        Route("/", page.overview),
        Route("/jobs", page.jobs_page),
        Route("/jobs/confirm", page.confirm_page),
        Route("/jobs/{job_id}", page.job_page),
        Route("/workflows", page.workflows_page),
        Route("/workflows/{job_id}", page.workflow_page),
        Route("/queues", page.queues_page),
        Route("/schedules", page.schedules_page),
        Route("/workers", page.workers_page),
        Route("/login", page.login, methods=["GET", "POST"]),
        Route("/logout", page.logout, methods=["POST"]),
        Route("/metrics", read.scrape),
        Mount("/static", StaticFiles(packages=[("sqljobs.dashboard", "static")])),
        Route("/api/csrf", read.csrf),
        Route("/api/stats", read.stats),
        Route("/api/queues", read.queues),
        Route("/api/workers", read.workers),
        Route("/api/schedules", read.schedules),
        Route("/api/jobs", read.jobs),
        Route("/api/workflows", read.workflows),
        Route("/api/workflows/{job_id}", read.workflow),
        # bulk actions before the routes that take an id in their place
        *(Route(f"/api/jobs/{verb}", act.on_jobs(verb), methods=["POST"]) for verb in BULK_VERBS),
        # the id is checked by api.job_id, which says what is wrong with a bad one
        Route("/api/jobs/{job_id}", read.job),
        Route("/api/jobs/{job_id}/retry", act.on_job("retry", actions.retry), methods=["POST"]),
        Route("/api/jobs/{job_id}/cancel", act.on_job("cancel", actions.cancel), methods=["POST"]),
        Route("/api/jobs/{job_id}/delete", act.on_job("delete", actions.delete), methods=["POST"]),
        Route("/api/dead/retry", act.retry_dead, methods=["POST"]),
        # the name is checked by api.queue_name, which says what a name may hold
        Route(
            "/api/queues/{name}/pause",
            act.on_queue("pause", actions.pause_queue),
            methods=["POST"],
        ),
        Route(
            "/api/queues/{name}/resume",
            act.on_queue("resume", actions.resume_queue),
            methods=["POST"],
        ),
        # a schedule's name may hold a slash ("daily-report:acme/eu")
        Route(
            "/api/schedules/{name:path}/pause",
            act.on_schedule("pause", actions.pause_schedule),
            methods=["POST"],
        ),
        Route(
            "/api/schedules/{name:path}/resume",
            act.on_schedule("resume", actions.resume_schedule),
            methods=["POST"],
        ),
        Route(
            "/api/schedules/{name:path}/run",
            act.on_schedule("run now", actions.run_schedule_now),
            methods=["POST"],
        ),
    ]


def serve(
    app: App,
    host: str = "127.0.0.1",
    port: int = 8080,
    token: str | None = None,
    *,
    read_only: bool = False,
    alert_age: float = DEFAULT_ALERT_AGE,
) -> None:
    """Run the dashboard until interrupted; refuses a bind beyond loopback without a token."""
    import uvicorn

    check_bind(host, token)
    asgi = create_app(
        app,
        token=token,
        exposed=not is_loopback(host),
        read_only=read_only,
        port=port,
        alert_age=alert_age,
    )
    uvicorn.run(asgi, host=host, port=port, log_level="warning")
