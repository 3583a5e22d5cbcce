"""``sqljobs dashboard``: backlog health in a browser, JSON for scripts, ``/metrics`` for
Prometheus, and the few actions an operator needs (retry, cancel, pause and resume a
queue).

Reads come straight from the database on every request, so every dashboard, scraper and
``sqljobs stats`` agrees. It binds to 127.0.0.1 unless told otherwise. Actions are POSTs;
once a token is set they need it (``Authorization: Bearer <token>`` or a ``token`` form
field), and a dashboard exposed beyond loopback refuses actions until one is set (its page
then shows no buttons, and says why).

The JSON API:

- ``GET /api/stats``: counts by queue and state, live workers, and the ages of the oldest
  due pending jobs in float seconds (ages are durations, so they stay numbers).
- ``GET /api/queues``: every queue with ``paused``, ``paused_at``, its ``counts`` by state
  and ``oldest_due_age`` (float seconds).
- ``GET /api/jobs?state=S&queue=Q&limit=N``: the newest jobs first, ``limit`` from 1 to
  1000 (default 50). ``GET /api/jobs/ID``: one job, with its ``result`` (the task's
  return value, or null) and ``progress`` (``done``, ``total``, ``note``, ``updated_at``,
  or null). In jobs, the times ``run_at``, ``created_at``, ``lease_until``,
  ``started_at``, ``finished_at``, ``deadline_at``, ``progress.updated_at`` and, in
  ``history`` entries, ``started_at`` and ``ended_at`` are ISO 8601 strings in UTC
  (``2026-12-03T08:14:05.123+00:00``) or null: a person reading the JSON sees when, and
  every language parses them; so is a queue's ``paused_at``.
- ``POST /api/jobs/ID/retry`` (a dead or cancelled job), ``POST /api/jobs/ID/cancel`` (a
  pending or running one, ``app.cancel``: ``was_running`` says whether a handler was cut
  short; cancelling a cancelled job succeeds with a note), ``POST /api/dead/retry?queue=Q``
  and ``POST /api/queues/NAME/pause`` or ``/resume`` (pausing a paused queue, or resuming
  one that is not, succeeds with a note) answer ``{"ok": true, ...}``, or ``{"ok": false,
  "error": why}`` with 401 (token missing or wrong), 403 (read-only), 404 (no such job) or
  409 (the job's state rules it out). The page's own form posts get a 303 back to the page
  instead, which shows the same sentence.
- A bad parameter is a 400 ``{"error": why}`` that names it and says what is allowed.

Needs the ``dashboard`` extra (starlette, uvicorn, prometheus-client, python-multipart).
"""

from __future__ import annotations

import hmac
import ipaddress
import time
from urllib.parse import urlencode

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Route

from ..app import App
from ..errors import ConfigurationError
from ..jobs import JobState
from . import actions, api, metrics, page

__all__ = ["create_app", "is_loopback", "serve"]

READ_ONLY = (
    "read-only: this dashboard is reachable beyond this machine and has no token; "
    "restart it with --token to allow its actions (retry, cancel, pause, resume)"
)
BAD_TOKEN = (
    "a valid token is required: the one this dashboard was started with (--token), "
    "as 'Authorization: Bearer <token>' or in the page's token field"
)


def is_loopback(host: str) -> bool:
    """True for an address only this machine can reach."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _from_page(request: Request) -> bool:
    """A post from the page's own forms, which wants the page back rather than JSON."""
    content_type = request.headers.get("content-type", "")
    return content_type.startswith("application/x-www-form-urlencoded")


def _reply(request: Request, outcome: actions.Outcome) -> Response:
    """JSON for scripts; for the page's forms, back to the page with the outcome's sentence."""
    if _from_page(request):
        kind = "message" if outcome.status < 400 else "error"
        return RedirectResponse("/?" + urlencode({kind: outcome.message}), status_code=303)
    return JSONResponse(outcome.body, status_code=outcome.status)


async def _bad_parameter(request: Request, exc: Exception) -> Response:
    if request.method == "POST":
        return _reply(request, actions.refused(400, str(exc)))
    return JSONResponse({"error": str(exc)}, status_code=400)


def create_app(app: App, *, token: str | None = None, exposed: bool = False) -> Starlette:
    """The dashboard as an ASGI application over ``app``'s database.

    ``exposed`` (bound beyond loopback) without a ``token`` leaves it read-only."""
    if token is not None and not token:
        raise ConfigurationError("the dashboard token must not be empty")
    read_only = READ_ONLY if exposed and token is None else None

    async def refusal(request: Request) -> actions.Outcome | None:
        """None if the action may go ahead, else why not."""
        if read_only is not None:
            return actions.refused(403, read_only)
        if token is None:
            return None
        given = request.headers.get("authorization", "").removeprefix("Bearer ").strip()
        if not given and _from_page(request):
            given = str((await request.form()).get("token", ""))
        if not hmac.compare_digest(given.encode(), token.encode()):
            return actions.refused(401, BAD_TOKEN)
        return None

    def home(request: Request) -> Response:
        view = page.View(
            now=time.time(),
            read_only=read_only,
            needs_token=token is not None,
            message=request.query_params.get("message"),
            error=request.query_params.get("error"),
        )
        board = page.Board(
            stats=app.stats(),
            queues=app.queues(),
            paused_at=_paused_at(app),
            dead=app.list_jobs(state=JobState.DEAD.value, limit=50),
            running=app.list_jobs(state=JobState.RUNNING.value, limit=50),
            recent=app.list_jobs(limit=50),
        )
        return HTMLResponse(page.render(board, view))

    def stats(request: Request) -> Response:
        return JSONResponse(app.stats().to_dict())

    def queues(request: Request) -> Response:
        api.only(request.query_params, (), "/api/queues")
        paused_at = _paused_at(app)
        return JSONResponse([api.queue_json(q, paused_at.get(q.name)) for q in app.queues()])

    def jobs(request: Request) -> Response:
        params = request.query_params
        api.only(params, ("state", "queue", "limit"), "/api/jobs")
        found = app.list_jobs(api.state(params), api.queue(params), api.limit(params))
        return JSONResponse([api.job_json(job) for job in found])

    def job(request: Request) -> Response:
        job_id = api.job_id(request.path_params["job_id"])
        found = app.get_job(job_id)
        if found is None:
            return JSONResponse({"error": f"no job with id {job_id}"}, status_code=404)
        return JSONResponse(api.job_json(found))

    async def retry(request: Request) -> Response:
        if (refused := await refusal(request)) is not None:
            return _reply(request, refused)
        job_id = api.job_id(request.path_params["job_id"])
        return _reply(request, await run_in_threadpool(actions.retry, app, job_id))

    async def cancel(request: Request) -> Response:
        if (refused := await refusal(request)) is not None:
            return _reply(request, refused)
        job_id = api.job_id(request.path_params["job_id"])
        return _reply(request, await run_in_threadpool(actions.cancel, app, job_id))

    async def pause_queue(request: Request) -> Response:
        if (refused := await refusal(request)) is not None:
            return _reply(request, refused)
        name = api.queue_name(request.path_params["name"])
        return _reply(request, await run_in_threadpool(actions.pause_queue, app, name))

    async def resume_queue(request: Request) -> Response:
        if (refused := await refusal(request)) is not None:
            return _reply(request, refused)
        name = api.queue_name(request.path_params["name"])
        return _reply(request, await run_in_threadpool(actions.resume_queue, app, name))

    async def retry_dead(request: Request) -> Response:
        if (refused := await refusal(request)) is not None:
            return _reply(request, refused)
        api.only(request.query_params, ("queue",), "/api/dead/retry")
        queue = api.queue(request.query_params)
        return _reply(request, await run_in_threadpool(actions.retry_dead, app, queue))

    def scrape(request: Request) -> Response:
        return Response(metrics.render(app), media_type="text/plain; version=0.0.4")

    return Starlette(
        routes=[
            Route("/", home),
            Route("/metrics", scrape),
            Route("/api/stats", stats),
            Route("/api/queues", queues),
            Route("/api/jobs", jobs),
            # the id is checked by api.job_id, which says what is wrong with a bad one
            Route("/api/jobs/{job_id}", job),
            Route("/api/jobs/{job_id}/retry", retry, methods=["POST"]),
            Route("/api/jobs/{job_id}/cancel", cancel, methods=["POST"]),
            Route("/api/dead/retry", retry_dead, methods=["POST"]),
            # the name is checked by api.queue_name, which says what a name may hold
            Route("/api/queues/{name}/pause", pause_queue, methods=["POST"]),
            Route("/api/queues/{name}/resume", resume_queue, methods=["POST"]),
        ],
        exception_handlers={api.BadParameter: _bad_parameter},
    )


def _paused_at(app: App) -> dict[str, float | None]:
    """When each paused queue was paused: a setting the backend keeps beside the flag."""
    return {name: at for name, (paused, at) in app.backend.queue_states().items() if paused}


def serve(app: App, host: str = "127.0.0.1", port: int = 8080, token: str | None = None) -> None:
    """Run the dashboard until interrupted."""
    import uvicorn

    asgi = create_app(app, token=token, exposed=not is_loopback(host))
    uvicorn.run(asgi, host=host, port=port, log_level="warning")
