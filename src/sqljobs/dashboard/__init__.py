"""``sqljobs dashboard``: backlog health in a browser, JSON for scripts, ``/metrics`` for
Prometheus, and the few actions an operator needs (retry, cancel, pause and resume a
queue).

Reads come straight from the database on every request, so every dashboard, scraper and
``sqljobs stats`` agrees. It binds to 127.0.0.1 unless told otherwise, and refuses to bind
beyond loopback without a token; once a token is set, every request needs it. Actions are
POSTs that need a CSRF token too (or a bearer token), and are logged; ``read_only`` refuses
them all. See :mod:`sqljobs.dashboard.security`.

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
  "error": why}`` with 401 (token missing or wrong), 403 (read-only, or no valid CSRF
  token), 404 (no such job) or
  409 (the job's state rules it out). The page's own form posts get a 303 back to the page
  instead, which shows the same sentence.
- ``GET /api/csrf``: ``{"csrf": token}`` for this session (its cookie comes with it), to
  send as the ``X-CSRF-Token`` header of a script's actions when it has no bearer token.
- A bad parameter is a 400 ``{"error": why}`` that names it and says what is allowed.

Needs the ``dashboard`` extra (starlette, uvicorn, prometheus-client, python-multipart).
"""

from __future__ import annotations

import ipaddress
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from urllib.parse import urlencode

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Route

from ..app import App
from ..jobs import Job, JobState
from ..redaction import redact_arguments
from . import actions, api, metrics, page
from .security import (
    AUTH_COOKIE,
    BAD_CSRF,
    BAD_TOKEN,
    CSRF_FIELD,
    CSRF_HEADER,
    READ_ONLY,
    SESSION_COOKIE,
    Guard,
    Identity,
    check_bind,
)

__all__ = ["check_bind", "create_app", "is_loopback", "serve"]

log = logging.getLogger("sqljobs.dashboard")


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


def _refuse(request: Request, outcome: actions.Outcome) -> Response:
    """A security refusal keeps its status even for a form (no redirect that hides it)."""
    if _from_page(request):
        return HTMLResponse(page.refusal(outcome.message), status_code=outcome.status)
    return JSONResponse(outcome.body, status_code=outcome.status)


async def _bad_parameter(request: Request, exc: Exception) -> Response:
    if request.method == "POST":
        return _reply(request, actions.refused(400, str(exc)))
    return JSONResponse({"error": str(exc)}, status_code=400)


def _set_cookie(response: Response, name: str, value: str) -> None:
    response.set_cookie(name, value, httponly=True, samesite="strict", path="/")


def _jobs_touched(outcome: actions.Outcome, per_job: bool) -> int:
    """How many jobs an action changed, for its log line."""
    if "retried" in outcome.body:
        return int(outcome.body["retried"])
    return int(per_job and outcome.status == 200 and "note" not in outcome.body)


class _Gate(BaseHTTPMiddleware):
    """Before any route: the Host check, the session cookie, and (with a token) the
    authentication every request but the login page needs."""

    def __init__(self, asgi: Callable[..., Awaitable[None]], guard: Guard) -> None:
        super().__init__(asgi)
        self.guard = guard

    async def dispatch(self, request: Request, call_next: RequestResponseEndpoint) -> Response:
        host = request.headers.get("host", "")
        if (why := self.guard.host_refusal(host)) is not None:
            log.warning("dashboard request refused: %s", why)
            return JSONResponse({"ok": False, "error": why}, status_code=400)
        session = self.guard.session(request)
        new_session = session is None
        request.state.session = session or self.guard.new_session()
        request.state.identity = identity = self.guard.identify(request)
        if identity is None and request.url.path != "/login":
            response: Response
            if request.method == "GET" and "text/html" in request.headers.get("accept", ""):
                response = RedirectResponse("/login", status_code=303)
            else:
                body = (
                    {"ok": False, "error": BAD_TOKEN}
                    if request.method == "POST"
                    else {"error": BAD_TOKEN}
                )
                response = JSONResponse(body, status_code=401)
                response.headers["WWW-Authenticate"] = (
                    'Bearer realm="sqljobs", Basic realm="sqljobs"'
                )
        else:
            response = await call_next(request)
        if new_session and not any(
            c.startswith(f"{SESSION_COOKIE}=") for c in response.headers.getlist("set-cookie")
        ):
            _set_cookie(response, SESSION_COOKIE, request.state.session)
        # buttons inside another site's frame could be clicked for the user (clickjacking)
        response.headers["X-Frame-Options"] = "DENY"
        response.headers["Content-Security-Policy"] = "frame-ancestors 'none'"
        return response


def create_app(
    app: App,
    *,
    token: str | None = None,
    exposed: bool = False,
    read_only: bool = False,
    port: int | None = None,
) -> Starlette:
    """The dashboard as an ASGI application over ``app``'s database.

    ``exposed`` (reachable beyond loopback) needs a ``token``: without one this raises
    ConfigurationError. Unexposed, only a Host of localhost, 127.0.0.1 or [::1] is served
    (with ``port``, when given). ``read_only`` refuses every action and shows no buttons."""
    guard = Guard.create(token, exposed=exposed, port=port)

    async def refusal(request: Request, identity: Identity) -> actions.Outcome | None:
        """None if the action may go ahead, else why not."""
        if read_only:
            return actions.refused(403, READ_ONLY)
        if identity.bearer:
            return None  # a browser never sends a bearer token by itself
        given = request.headers.get(CSRF_HEADER, "")
        if not given and _from_page(request):
            given = str((await request.form()).get(CSRF_FIELD, ""))
        if not guard.csrf_ok(guard.session(request), given):
            return actions.refused(403, BAD_CSRF)
        return None

    async def act(
        request: Request, what: str, run: Callable[[], actions.Outcome], per_job: bool = True
    ) -> Response:
        """Check, run and log one action: who did what to how many jobs."""
        identity: Identity = request.state.identity
        client = request.client.host if request.client else "?"
        if (refused := await refusal(request, identity)) is not None:
            log.warning(
                "dashboard action %s by %s from %s refused (%d): %s",
                what, identity.who, client, refused.status, refused.message,
                extra={"who": identity.who, "action": what, "status": refused.status},
            )  # fmt: skip
            return _refuse(request, refused)
        outcome = await run_in_threadpool(run)
        jobs = _jobs_touched(outcome, per_job)
        log.info(
            "dashboard action %s by %s from %s: %d job(s) changed; %s",
            what, identity.who, client, jobs, outcome.message,
            extra={"who": identity.who, "action": what, "jobs": jobs, "status": outcome.status},
        )  # fmt: skip
        return _reply(request, outcome)

    def redacted(job: Job) -> Job:
        args, kwargs = redact_arguments(app.tasks.get(job.task), job.args, job.kwargs)
        if args is job.args and kwargs is job.kwargs:
            return job
        return replace(job, args=args, kwargs=kwargs)

    def listed(state: str | None = None, queue: str | None = None, limit: int = 50) -> list[Job]:
        return [redacted(job) for job in app.list_jobs(state, queue, limit)]

    def home(request: Request) -> Response:
        identity: Identity = request.state.identity
        view = page.View(
            now=time.time(),
            read_only=READ_ONLY if read_only else None,
            csrf=guard.csrf_token(request.state.session),
            logged_in=identity.who.startswith("login session"),
            message=request.query_params.get("message"),
            error=request.query_params.get("error"),
        )
        board = page.Board(
            stats=app.stats(),
            queues=app.queues(),
            paused_at=_paused_at(app),
            dead=listed(JobState.DEAD.value),
            running=listed(JobState.RUNNING.value),
            recent=listed(),
        )
        return HTMLResponse(page.render(board, view))

    async def login(request: Request) -> Response:
        if token is None:
            return RedirectResponse("/", status_code=303)
        csrf = guard.csrf_token(request.state.session)
        if request.method == "GET":
            return HTMLResponse(page.login(csrf))
        form = await request.form()
        client = request.client.host if request.client else "?"
        if not guard.csrf_ok(guard.session(request), str(form.get(CSRF_FIELD, ""))):
            return HTMLResponse(page.login(csrf, BAD_CSRF), status_code=403)
        if not guard.token_ok(str(form.get("token", ""))):
            log.warning("dashboard login from %s refused: wrong token", client)
            return HTMLResponse(page.login(csrf, "wrong token"), status_code=401)
        session = guard.new_session()  # a fresh session, so one planted before is worthless
        log.info("dashboard login from %s", client)
        response = RedirectResponse("/", status_code=303)
        _set_cookie(response, SESSION_COOKIE, session)
        _set_cookie(response, AUTH_COOKIE, guard.auth_cookie(session))
        return response

    async def logout(request: Request) -> Response:
        form = await request.form()
        if not guard.csrf_ok(guard.session(request), str(form.get(CSRF_FIELD, ""))):
            return HTMLResponse(page.refusal(BAD_CSRF), status_code=403)
        response = RedirectResponse("/login", status_code=303)
        response.delete_cookie(AUTH_COOKIE, path="/", httponly=True, samesite="strict")
        return response

    def csrf(request: Request) -> Response:
        return JSONResponse({"csrf": guard.csrf_token(request.state.session)})

    def stats(request: Request) -> Response:
        return JSONResponse(app.stats().to_dict())

    def queues(request: Request) -> Response:
        api.only(request.query_params, (), "/api/queues")
        paused_at = _paused_at(app)
        return JSONResponse([api.queue_json(q, paused_at.get(q.name)) for q in app.queues()])

    def jobs(request: Request) -> Response:
        params = request.query_params
        api.only(params, ("state", "queue", "limit"), "/api/jobs")
        found = listed(api.state(params), api.queue(params), api.limit(params))
        return JSONResponse([api.job_json(job) for job in found])

    def job(request: Request) -> Response:
        job_id = api.job_id(request.path_params["job_id"])
        found = app.get_job(job_id)
        if found is None:
            return JSONResponse({"error": f"no job with id {job_id}"}, status_code=404)
        return JSONResponse(api.job_json(redacted(found)))

    async def retry(request: Request) -> Response:
        job_id = request.path_params["job_id"]
        return await act(
            request, f"retry job {job_id}", lambda: actions.retry(app, api.job_id(job_id))
        )

    async def cancel(request: Request) -> Response:
        job_id = request.path_params["job_id"]
        return await act(
            request, f"cancel job {job_id}", lambda: actions.cancel(app, api.job_id(job_id))
        )

    async def pause_queue(request: Request) -> Response:
        name = request.path_params["name"]
        return await act(
            request,
            f"pause queue {name!r}",
            lambda: actions.pause_queue(app, api.queue_name(name)),
            per_job=False,
        )

    async def resume_queue(request: Request) -> Response:
        name = request.path_params["name"]
        return await act(
            request,
            f"resume queue {name!r}",
            lambda: actions.resume_queue(app, api.queue_name(name)),
            per_job=False,
        )

    async def retry_dead(request: Request) -> Response:
        params = request.query_params
        where = "every queue" if "queue" not in params else f"queue {params['queue']!r}"

        def run() -> actions.Outcome:
            api.only(params, ("queue",), "/api/dead/retry")
            return actions.retry_dead(app, api.queue(params))

        return await act(request, f"retry the dead jobs of {where}", run, per_job=False)

    def scrape(request: Request) -> Response:
        return Response(metrics.render(app), media_type="text/plain; version=0.0.4")

    return Starlette(
        routes=[
            Route("/", home),
            Route("/login", login, methods=["GET", "POST"]),
            Route("/logout", logout, methods=["POST"]),
            Route("/metrics", scrape),
            Route("/api/csrf", csrf),
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
        middleware=[Middleware(_Gate, guard=guard)],
        exception_handlers={api.BadParameter: _bad_parameter},
    )


def _paused_at(app: App) -> dict[str, float | None]:
    """When each paused queue was paused: a setting the backend keeps beside the flag."""
    return {name: at for name, (paused, at) in app.backend.queue_states().items() if paused}


def serve(
    app: App,
    host: str = "127.0.0.1",
    port: int = 8080,
    token: str | None = None,
    *,
    read_only: bool = False,
) -> None:
    """Run the dashboard until interrupted; refuses a bind beyond loopback without a token."""
    import uvicorn

    check_bind(host, token)
    asgi = create_app(
        app, token=token, exposed=not is_loopback(host), read_only=read_only, port=port
    )
    uvicorn.run(asgi, host=host, port=port, log_level="warning")
