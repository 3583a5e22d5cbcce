"""``sqljobs dashboard``: backlog health in a browser, JSON for scripts, ``/metrics`` for
Prometheus, and the actions an operator needs (retry, cancel and delete jobs, one or many;
pause and resume a queue or a schedule; run a schedule now).

Reads come straight from the database on every request, through the App (no SQL here), so
every dashboard, scraper and ``sqljobs stats`` agrees, on either backend. It binds to
127.0.0.1 unless told otherwise, and refuses to bind beyond loopback without a token;
once a token is set, every request needs it. Actions are POSTs that need a CSRF token too
(or a bearer token), and are logged; ``read_only`` refuses them all. See
:mod:`sqljobs.dashboard.security`.

The pages (:mod:`sqljobs.dashboard.pages`; ``docs/dashboard.md`` describes them):
``/`` overview, ``/jobs`` (filters and a ``before`` cursor as query parameters),
``/jobs/ID``, ``/jobs/confirm`` (a bulk action's count, before it is done), ``/queues``,
``/schedules``, ``/workers``.

The JSON API:

- ``GET /api/stats``: counts by queue and state, live workers, and the ages of the oldest
  due pending jobs in float seconds (ages are durations, so they stay numbers).
- ``GET /api/queues``: every queue with ``paused``, ``paused_at``, its ``counts`` by state
  and ``oldest_due_age`` (float seconds).
- ``GET /api/jobs?state=S&queue=Q&task=T&key=K&text=X&since=A&until=B&before=ID&limit=N``:
  the matching jobs, newest first, ``limit`` from 1 to 1000 (default 50). ``since`` and
  ``until`` bound the creation time (``1h`` ago, ISO 8601, or Unix seconds); ``text`` is
  found in the arguments. When there are more, a ``Link: <...>; rel="next"`` header names
  the next page (its ``before``). ``GET /api/jobs/ID``: one job, with its ``result`` (the
  task's return value, or null) and ``progress`` (``done``, ``total``, ``note``,
  ``updated_at``, or null). In jobs, the times ``run_at``, ``created_at``,
  ``lease_until``, ``started_at``, ``finished_at``, ``deadline_at``,
  ``progress.updated_at`` and, in ``history`` entries, ``started_at`` and ``ended_at`` are
  ISO 8601 strings in UTC (``2026-12-03T08:14:05.123+00:00``) or null: a person reading
  the JSON sees when, and every language parses them; so is a queue's ``paused_at``.
- ``GET /api/workers``: every live worker and the jobs it is running;
  ``GET /api/schedules``: every schedule, with its timing ``in_words``.
- ``POST /api/jobs/ID/retry`` (a dead or cancelled job), ``POST /api/jobs/ID/cancel`` (a
  pending, waiting or running one, ``app.cancel``: ``was_running`` says whether a handler
  was cut short; cancelling a cancelled job succeeds with a note), ``POST
  /api/jobs/ID/delete`` (an ended one), ``POST /api/dead/retry?queue=Q``, ``POST
  /api/queues/NAME/pause`` or ``/resume`` (pausing a paused queue, or resuming one that is
  not, succeeds with a note), ``POST /api/jobs/retry``, ``/cancel`` or ``/delete`` with
  ``ids`` (a selection) or filter parameters (every match; at least one is needed),
  answering ``{"ok": true, "retried"|"cancelled"|"deleted": n}``, and ``POST
  /api/schedules/NAME/pause``, ``/resume`` or ``/run`` answer ``{"ok": true, ...}``, or
  ``{"ok": false, "error": why}`` with 401 (token missing or wrong), 403 (read-only, or
  no valid CSRF token), 404 (no such job or schedule) or 409 (the job's state rules it
  out). The pages' own form posts get a 303 back to the page they came from instead,
  which shows the same sentence.
- ``GET /api/csrf``: ``{"csrf": token}`` for this session (its cookie comes with it), to
  send as the ``X-CSRF-Token`` header of a script's actions when it has no bearer token.
- A bad parameter is a 400 ``{"error": why}`` that names it and says what is allowed (a
  page that a person opened says it on a page).

Needs the ``dashboard`` extra (starlette, uvicorn, prometheus-client, python-multipart,
jinja2).
"""

from __future__ import annotations

import ipaddress
import logging
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any
from urllib.parse import urlencode

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from ..app import App
from ..browse import JobFilter
from ..errors import BackendError, ConfigurationError
from . import actions, api, forms, metrics, render
from .pages import BULK_VERBS, DEFAULT_ALERT_AGE, Pages, View, in_words
from .reads import paused_at, redacted, redacted_kwargs
from .security import (
    AUTH_COOKIE,
    BAD_CSRF,
    BAD_TOKEN,
    CSRF_FIELD,
    CSRF_HEADER,
    READ_ONLY,
    SESSION_COOKIE,
    TOO_MANY_WRONG,
    Guard,
    Identity,
    WrongTokenThrottle,
    check_bind,
)

__all__ = ["check_bind", "create_app", "is_loopback", "serve"]

log = logging.getLogger("sqljobs.dashboard")

CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; base-uri 'none'; object-src 'none'; "
    "frame-ancestors 'none'"
)
"""Scripts and styles only from the dashboard's own static files: a value that slipped
through escaping still could not run. (Inline SVG is markup, not a resource.)"""


def is_loopback(host: str) -> bool:
    """True for an address only this machine can reach."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _set_cookie(response: Response, name: str, value: str, request: Request) -> None:
    """HttpOnly and SameSite=Strict always; Secure when the request came over HTTPS; sent
    only below the dashboard's prefix, when it is mounted in another application."""
    secure = request.url.scheme == "https"
    path = f"{forms.root(request)}/"
    response.set_cookie(name, value, httponly=True, samesite="strict", path=path, secure=secure)


_COUNTED = ("retried", "cancelled", "deleted")


def _jobs_touched(outcome: actions.Outcome, per_job: bool) -> int:
    """How many jobs an action changed, for its log line."""
    for key in _COUNTED:
        if isinstance(outcome.body.get(key), int) and not isinstance(outcome.body[key], bool):
            return int(outcome.body[key])
    return int(per_job and outcome.status == 200 and "note" not in outcome.body)


class _Gate(BaseHTTPMiddleware):
    """Before any route: the Host check, the session cookie, and (with a token) the
    authentication every request but the login page and the static files needs."""

    def __init__(
        self, asgi: Callable[..., Awaitable[None]], guard: Guard, throttle: WrongTokenThrottle
    ) -> None:
        super().__init__(asgi)
        self.guard = guard
        self.throttle = throttle

    async def dispatch(self, request: Request, call_next: RequestResponseEndpoint) -> Response:
        host = request.headers.get("host", "")
        if (why := self.guard.host_refusal(host)) is not None:
            log.warning("dashboard request refused: %s", why)
            return JSONResponse({"ok": False, "error": why}, status_code=400)
        session = self.guard.session(request)
        new_session = session is None
        request.state.session = session or self.guard.new_session()
        client = request.client.host if request.client else "?"
        response: Response
        if (wait := self.throttle.wait(client)) > 0:
            return _too_many(wait)
        request.state.identity = identity = self.guard.identify(request)
        if identity is None and "authorization" in request.headers:
            self.throttle.failed(client)
            log.warning("dashboard request from %s refused: wrong token", client)
        path = forms.route_path(request)
        open_path = path == "/login" or path.startswith("/static/")
        if identity is None and not open_path:
            if request.method == "GET" and "text/html" in request.headers.get("accept", ""):
                response = RedirectResponse(f"{forms.root(request)}/login", status_code=303)
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
            _set_cookie(response, SESSION_COOKIE, request.state.session, request)
        # buttons inside another site's frame could be clicked for the user (clickjacking)
        response.headers["X-Frame-Options"] = "DENY"
        response.headers["Content-Security-Policy"] = CONTENT_SECURITY_POLICY
        response.headers["X-Content-Type-Options"] = "nosniff"
        return response


def _too_many(wait: float) -> Response:
    why = TOO_MANY_WRONG.format(wait=max(wait, 1.0))
    response = JSONResponse({"ok": False, "error": why}, status_code=429)
    response.headers["Retry-After"] = str(max(int(wait + 0.999), 1))
    return response


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
    number = isinstance(alert_age, int | float) and not isinstance(alert_age, bool)
    if not number or not math.isfinite(alert_age) or alert_age <= 0:
        raise ConfigurationError(f"alert_age must be seconds > 0, got {alert_age!r}")
    pages = Pages(app, render.environment(), float(alert_age))

    def view_of(request: Request) -> View:
        identity: Identity | None = request.state.identity
        given = request.query_params
        flash = {  # only the sentences this dashboard signed: a link cannot bring its own
            kind: given[kind]
            for kind in ("message", "error")
            if kind in given and guard.flash_ok(kind, given[kind], given.get("sig", ""))
        }
        return View(
            now=time.time(),
            read_only=READ_ONLY if read_only else None,
            csrf=guard.csrf_token(request.state.session),
            logged_in=identity is not None and identity.who.startswith("login session"),
            message=flash.get("message", "")[: forms.MAX_FLASH] or None,
            error=flash.get("error", "")[: forms.MAX_FLASH] or None,
            back=forms.here(request),
            root=forms.root(request),
        )

    def html(body: str, status: int = 200) -> HTMLResponse:
        return HTMLResponse(body, status_code=status)

    def reply(request: Request, outcome: actions.Outcome, back: str | None = None) -> Response:
        """JSON for scripts; for the pages' forms, back to the page they came from with
        the outcome's sentence."""
        if forms.from_page(request):
            kind = "message" if outcome.status < 400 else "error"
            home = f"{forms.root(request)}/"
            where = back or forms.local_path(getattr(request.state, "back", None), home)
            sig = guard.flash_sig(kind, outcome.message)
            return RedirectResponse(
                forms.with_flash(where, kind, outcome.message, sig), status_code=303
            )
        return JSONResponse(outcome.body, status_code=outcome.status)

    def refuse(request: Request, outcome: actions.Outcome) -> Response:
        """A security refusal keeps its status even for a form (no redirect that hides it)."""
        if forms.from_page(request):
            home = f"{forms.root(request)}/"
            way_back = forms.local_path(getattr(request.state, "back", None), home)
            page = pages.refusal(view_of(request), outcome.message, way_back)
            return html(page, outcome.status)
        return JSONResponse(outcome.body, status_code=outcome.status)

    async def bad_parameter(request: Request, exc: Exception) -> Response:
        log.info("dashboard %s %s refused (400): %s", request.method, request.url.path, exc)
        if request.method == "POST":
            return reply(request, actions.refused(400, str(exc)))
        if forms.wants_page(request):
            # back to the page without its parameters (a confirmation: to the jobs it asked about)
            confirming = forms.route_path(request) == "/jobs/confirm"
            way_back = forms.local_path(
                request.query_params.get("back"),
                f"{forms.root(request)}/jobs" if confirming else request.url.path,
            )
            page = pages.refusal(view_of(request), str(exc), way_back, "Bad address")
            return html(page, 400)
        return JSONResponse({"error": str(exc)}, status_code=400)

    async def refusal(request: Request, identity: Identity) -> actions.Outcome | None:
        """None if the action may go ahead, else why not."""
        if read_only:
            return actions.refused(403, READ_ONLY)
        if identity.bearer:
            return None  # a browser never sends a bearer token by itself
        given = request.headers.get(CSRF_HEADER, "")
        if not given and forms.from_page(request):
            given = str((await request.form()).get(CSRF_FIELD, ""))
        if not guard.csrf_ok(guard.session(request), given):
            return actions.refused(403, BAD_CSRF)
        return None

    async def act(
        request: Request,
        what: str,
        run: Callable[[], actions.Outcome],
        per_job: bool = True,
        back: Callable[[actions.Outcome], str | None] = lambda outcome: None,
    ) -> Response:
        """Check, run and log one action: who did what to how many jobs."""
        identity: Identity = request.state.identity
        client = request.client.host if request.client else "?"
        request.state.back = None
        if forms.from_page(request):
            request.state.back = str((await request.form()).get("back", "") or "")
        if (refused := await refusal(request, identity)) is not None:
            log.warning(
                "dashboard action %s by %s from %s refused (%d): %s",
                what, identity.who, client, refused.status, refused.message,
                extra={"who": identity.who, "action": what, "status": refused.status},
            )  # fmt: skip
            return refuse(request, refused)
        try:
            outcome = await run_in_threadpool(run)
        except BackendError as exc:  # e.g. a role that may only read (docs/security.md)
            outcome = actions.refused(500, f"the database refused this action: {exc}")
        jobs = _jobs_touched(outcome, per_job)
        log.info(
            "dashboard action %s by %s from %s: %d job(s) changed; %s",
            what, identity.who, client, jobs, outcome.message,
            extra={"who": identity.who, "action": what, "jobs": jobs, "status": outcome.status},
        )  # fmt: skip
        return reply(request, outcome, back(outcome))

    # -- pages --------------------------------------------------------------------------

    def overview(request: Request) -> Response:
        forms.page_params(request, (), "/")
        return html(pages.overview(view_of(request)))

    def jobs_page(request: Request) -> Response:
        params = forms.page_params(request, (*api.FILTER_PARAMS, "before"), "/jobs")
        now = time.time()
        found = api.job_filter(params, now)
        query = [(k, v) for k, v in params.multi_items() if k not in forms.FLASH]
        return html(pages.jobs(view_of(request), found, api.before(params), query))

    def confirm_page(request: Request) -> Response:
        params = forms.page_params(
            request, (*api.FILTER_PARAMS, "ids", "action", "back"), "/jobs/confirm"
        )
        verb = params.get("action", "")
        if verb not in BULK_VERBS:
            raise api.BadParameter(f"action must be one of {', '.join(BULK_VERBS)}, not {verb!r}")
        found = api.job_filter(params, time.time(), selection=True)
        if found == JobFilter():
            raise api.BadParameter(
                "no jobs chosen: tick the boxes of the jobs to act on, or filter the jobs "
                "and act on every match"
            )
        back = forms.local_path(params.get("back"), f"{forms.root(request)}/jobs")
        return html(pages.confirm(replace(view_of(request), back=back), verb, found))

    def job_page(request: Request) -> Response:
        forms.page_params(request, (), "/jobs/ID")
        job_id = api.job_id(request.path_params["job_id"])
        page = pages.job(view_of(request), job_id)
        if page is None:
            reason = f"no job with id {job_id}: it never existed, or it was deleted or pruned"
            jobs_list = f"{forms.root(request)}/jobs"
            return html(pages.refusal(view_of(request), reason, jobs_list, "Not found"), 404)
        return html(page)

    def queues_page(request: Request) -> Response:
        forms.page_params(request, (), "/queues")
        return html(pages.queues(view_of(request)))

    def schedules_page(request: Request) -> Response:
        forms.page_params(request, (), "/schedules")
        return html(pages.schedules(view_of(request)))

    def workers_page(request: Request) -> Response:
        forms.page_params(request, (), "/workers")
        return html(pages.workers(view_of(request)))

    async def login(request: Request) -> Response:
        if token is None:
            return RedirectResponse(f"{forms.root(request)}/", status_code=303)
        view = view_of(request)
        if request.method == "GET":
            return html(pages.login(view))
        form = await request.form()
        client = request.client.host if request.client else "?"
        if not guard.csrf_ok(guard.session(request), str(form.get(CSRF_FIELD, ""))):
            return html(pages.login(replace(view, error=BAD_CSRF)), 403)
        if not guard.token_ok(str(form.get("token", ""))):
            throttle.failed(client)
            log.warning("dashboard login from %s refused: wrong token", client)
            return html(pages.login(replace(view, error="wrong token")), 401)
        session = guard.new_session()  # a fresh session, so one planted before is worthless
        log.info("dashboard login from %s", client)
        response = RedirectResponse(f"{forms.root(request)}/", status_code=303)
        _set_cookie(response, SESSION_COOKIE, session, request)
        _set_cookie(response, AUTH_COOKIE, guard.auth_cookie(session), request)
        return response

    async def logout(request: Request) -> Response:
        form = await request.form()
        if not guard.csrf_ok(guard.session(request), str(form.get(CSRF_FIELD, ""))):
            return html(pages.refusal(view_of(request), BAD_CSRF), 403)
        response = RedirectResponse(f"{forms.root(request)}/login", status_code=303)
        response.delete_cookie(
            AUTH_COOKIE, path=f"{forms.root(request)}/", httponly=True, samesite="strict"
        )
        return response

    # -- JSON ---------------------------------------------------------------------------

    def csrf(request: Request) -> Response:
        return JSONResponse({"csrf": guard.csrf_token(request.state.session)})

    def stats(request: Request) -> Response:
        return JSONResponse(app.stats().to_dict())

    def queues(request: Request) -> Response:
        api.only(request.query_params, (), "/api/queues")
        when = paused_at(app)
        return JSONResponse([api.queue_json(q, when.get(q.name)) for q in app.queues()])

    def jobs(request: Request) -> Response:
        params = request.query_params
        api.only(params, (*api.FILTER_PARAMS, "before", "limit"), "/api/jobs")
        found = api.job_filter(params, time.time())
        page = app.find_jobs(found, before=api.before(params), limit=api.limit(params))
        response = JSONResponse([api.job_json(redacted(app, job)) for job in page.jobs])
        if page.next_before is not None:
            query = [(k, v) for k, v in params.multi_items() if k != "before"]
            query.append(("before", str(page.next_before)))
            next_page = f"{forms.root(request)}/api/jobs?{urlencode(query)}"
            response.headers["Link"] = f'<{next_page}>; rel="next"'
        return response

    def job(request: Request) -> Response:
        job_id = api.job_id(request.path_params["job_id"])
        found = app.get_job(job_id)
        if found is None:
            return JSONResponse({"error": f"no job with id {job_id}"}, status_code=404)
        return JSONResponse(api.job_json(redacted(app, found)))

    def workers(request: Request) -> Response:
        api.only(request.query_params, (), "/api/workers")
        return JSONResponse(
            [
                api.worker_json(w, [api.job_json(redacted(app, j)) for j in w.running])
                for w in app.workers()
            ]
        )

    def schedules(request: Request) -> Response:
        api.only(request.query_params, (), "/api/schedules")
        now = time.time()
        return JSONResponse(
            [
                api.schedule_json(
                    s, redacted_kwargs(app, s.schedule.task, s.schedule.kwargs), in_words(s, now)
                )
                for s in app.list_schedules()
            ]
        )

    def scrape(request: Request) -> Response:
        return Response(metrics.render(app), media_type="text/plain; version=0.0.4")

    # -- actions ------------------------------------------------------------------------

    def on_job(verb: str, change: Callable[[App, int], actions.Outcome]) -> Any:
        async def endpoint(request: Request) -> Response:
            job_id = request.path_params["job_id"]

            def back(outcome: actions.Outcome) -> str | None:
                # a deleted job's own page is gone: back to the list
                gone = verb == "delete" and outcome.status == 200
                jobs_list = f"{forms.root(request)}/jobs"
                return jobs_list if gone and request.state.back == f"{jobs_list}/{job_id}" else None

            return await act(
                request,
                f"{verb} job {job_id}",
                lambda: change(app, api.job_id(job_id)),
                back=back,
            )

        return endpoint

    def on_jobs(verb: str) -> Any:
        async def endpoint(request: Request) -> Response:
            params = await forms.action_fields(request)
            where = f"/api/jobs/{verb}"

            def run() -> actions.Outcome:
                api.only(params, (*api.FILTER_PARAMS, "ids", "up_to"), where)
                found = api.job_filter(params, time.time(), selection=True)
                if replace(found, up_to=None) == JobFilter():
                    raise api.BadParameter(
                        f"{where} needs ids (a selection) or a filter ("
                        f"{', '.join(api.FILTER_PARAMS)}): acting on every job at once is "
                        "never what a typo should do"
                    )
                return actions.bulk(app, verb, found)

            return await act(request, f"{verb} jobs", run)

        return endpoint

    def on_queue(verb: str, change: Callable[[App, str], actions.Outcome]) -> Any:
        async def endpoint(request: Request) -> Response:
            name = request.path_params["name"]
            return await act(
                request,
                f"{verb} queue {name!r}",
                lambda: change(app, api.queue_name(name)),
                per_job=False,
            )

        return endpoint

    def on_schedule(verb: str, change: Callable[[App, str], actions.Outcome]) -> Any:
        async def endpoint(request: Request) -> Response:
            name = request.path_params["name"]
            return await act(
                request, f"{verb} schedule {name!r}", lambda: change(app, name), per_job=False
            )

        return endpoint

    async def retry_dead(request: Request) -> Response:
        params = request.query_params
        where = "every queue" if "queue" not in params else f"queue {params['queue']!r}"

        def run() -> actions.Outcome:
            api.only(params, ("queue",), "/api/dead/retry")
            return actions.retry_dead(app, api.queue(params))

        return await act(request, f"retry the dead jobs of {where}", run, per_job=False)

    return Starlette(
        routes=[
            Route("/", overview),
            Route("/jobs", jobs_page),
            Route("/jobs/confirm", confirm_page),
            Route("/jobs/{job_id}", job_page),
            Route("/queues", queues_page),
            Route("/schedules", schedules_page),
            Route("/workers", workers_page),
            Route("/login", login, methods=["GET", "POST"]),
            Route("/logout", logout, methods=["POST"]),
            Route("/metrics", scrape),
            Mount("/static", StaticFiles(packages=[("sqljobs.dashboard", "static")])),
            Route("/api/csrf", csrf),
            Route("/api/stats", stats),
            Route("/api/queues", queues),
            Route("/api/workers", workers),
            Route("/api/schedules", schedules),
            Route("/api/jobs", jobs),
            # bulk actions before the routes that take an id in their place
            *(Route(f"/api/jobs/{verb}", on_jobs(verb), methods=["POST"]) for verb in BULK_VERBS),
            # the id is checked by api.job_id, which says what is wrong with a bad one
            Route("/api/jobs/{job_id}", job),
            Route("/api/jobs/{job_id}/retry", on_job("retry", actions.retry), methods=["POST"]),
            Route("/api/jobs/{job_id}/cancel", on_job("cancel", actions.cancel), methods=["POST"]),
            Route("/api/jobs/{job_id}/delete", on_job("delete", actions.delete), methods=["POST"]),
            Route("/api/dead/retry", retry_dead, methods=["POST"]),
            # the name is checked by api.queue_name, which says what a name may hold
            Route(
                "/api/queues/{name}/pause",
                on_queue("pause", actions.pause_queue),
                methods=["POST"],
            ),
            Route(
                "/api/queues/{name}/resume",
                on_queue("resume", actions.resume_queue),
                methods=["POST"],
            ),
            # a schedule's name may hold a slash ("daily-report:acme/eu")
            Route(
                "/api/schedules/{name:path}/pause",
                on_schedule("pause", actions.pause_schedule),
                methods=["POST"],
            ),
            Route(
                "/api/schedules/{name:path}/resume",
                on_schedule("resume", actions.resume_schedule),
                methods=["POST"],
            ),
            Route(
                "/api/schedules/{name:path}/run",
                on_schedule("run now", actions.run_schedule_now),
                methods=["POST"],
            ),
        ],
        middleware=[Middleware(_Gate, guard=guard, throttle=throttle)],
        exception_handlers={api.BadParameter: bad_parameter},
    )


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
