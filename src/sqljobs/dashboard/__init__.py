"""``sqljobs dashboard``: backlog health in a browser, JSON for scripts, ``/metrics`` for
Prometheus, and the few actions an operator needs (retry, cancel).

Reads come straight from the database on every request, so every dashboard, scraper and
``sqljobs stats`` agrees. It binds to 127.0.0.1 unless told otherwise. Actions are POSTs;
once a token is set they need it (``Authorization: Bearer <token>`` or a ``token`` form
field), and a dashboard exposed beyond loopback refuses actions until one is set.

Needs the ``dashboard`` extra (starlette, uvicorn, prometheus-client).
"""

from __future__ import annotations

import hmac
import ipaddress
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Route

from ..app import App
from ..errors import ConfigurationError
from ..jobs import JobState
from . import metrics, page

__all__ = ["create_app", "is_loopback", "serve"]


def is_loopback(host: str) -> bool:
    """True for an address only this machine can reach."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def create_app(app: App, *, token: str | None = None, exposed: bool = False) -> Starlette:
    """The dashboard as an ASGI application over ``app``'s database.

    ``exposed`` (bound beyond loopback) without a ``token`` leaves it read-only."""
    if token is not None and not token:
        raise ConfigurationError("the dashboard token must not be empty")

    async def allowed(request: Request) -> Response | None:
        """None if the action may go ahead, else the refusal."""
        if token is None:
            if exposed:
                return JSONResponse(
                    {"error": "actions are off: this dashboard is reachable beyond this "
                              "machine and has no token (start it with --token)"},
                    status_code=403,
                )  # fmt: skip
            return None
        given = request.headers.get("authorization", "").removeprefix("Bearer ").strip()
        if not given and request.headers.get("content-type", "").startswith(
            "application/x-www-form-urlencoded"
        ):
            given = str((await request.form()).get("token", ""))
        if not hmac.compare_digest(given.encode(), token.encode()):
            return JSONResponse({"error": "a valid token is required"}, status_code=401)
        return None

    def done(request: Request, body: dict[str, Any]) -> Response:
        """JSON for scripts; back to the page for the page's own forms."""
        if request.headers.get("content-type", "").startswith("application/x-www-form"):
            return RedirectResponse("/", status_code=303)
        return JSONResponse(body, status_code=200 if body.get("ok", True) else 409)

    def home(request: Request) -> Response:
        dead = app.list_jobs(state=JobState.DEAD.value, limit=50)
        recent = app.list_jobs(limit=50)
        needs_token = token is not None
        return HTMLResponse(page.render(app.stats(), dead, recent, needs_token))

    def stats(request: Request) -> Response:
        return JSONResponse(app.stats().to_dict())

    def jobs(request: Request) -> Response:
        state = request.query_params.get("state")
        if state is not None and state not in {s.value for s in JobState}:
            return JSONResponse({"error": f"unknown state {state!r}"}, status_code=400)
        try:
            limit = int(request.query_params.get("limit", "50"))
        except ValueError:
            return JSONResponse({"error": "limit must be an integer"}, status_code=400)
        found = app.list_jobs(state=state, queue=request.query_params.get("queue"), limit=limit)
        return JSONResponse([job.to_dict() for job in found])

    def job(request: Request) -> Response:
        found = app.get_job(request.path_params["job_id"])
        if found is None:
            return JSONResponse({"error": "no such job"}, status_code=404)
        return JSONResponse(found.to_dict())

    async def retry(request: Request) -> Response:
        if (refusal := await allowed(request)) is not None:
            return refusal
        return done(
            request, {"ok": await run_in_threadpool(app.retry_job, request.path_params["job_id"])}
        )

    async def cancel(request: Request) -> Response:
        if (refusal := await allowed(request)) is not None:
            return refusal
        return done(
            request, {"ok": await run_in_threadpool(app.cancel_job, request.path_params["job_id"])}
        )

    async def retry_dead(request: Request) -> Response:
        if (refusal := await allowed(request)) is not None:
            return refusal
        queue = request.query_params.get("queue")
        retried = await run_in_threadpool(app.backend.retry_dead, queue)
        return done(request, {"ok": True, "retried": retried})

    def scrape(request: Request) -> Response:
        return Response(metrics.render(app), media_type="text/plain; version=0.0.4")

    return Starlette(
        routes=[
            Route("/", home),
            Route("/metrics", scrape),
            Route("/api/stats", stats),
            Route("/api/jobs", jobs),
            Route("/api/jobs/{job_id:int}", job),
            Route("/api/jobs/{job_id:int}/retry", retry, methods=["POST"]),
            Route("/api/jobs/{job_id:int}/cancel", cancel, methods=["POST"]),
            Route("/api/dead/retry", retry_dead, methods=["POST"]),
        ]
    )


def serve(app: App, host: str = "127.0.0.1", port: int = 8080, token: str | None = None) -> None:
    """Run the dashboard until interrupted."""
    import uvicorn

    asgi = create_app(app, token=token, exposed=not is_loopback(host))
    uvicorn.run(asgi, host=host, port=port, log_level="warning")
