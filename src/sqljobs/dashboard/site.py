"""What every route of one dashboard shares: the App it reads, its pages, its guard and
throttle, whether it is read-only; and the ways its routes answer (a page, JSON, a
redirect back to the page a form came from, a refusal), with the check and log line every
action goes through."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response

from ..app import App
from ..errors import BackendError
from . import actions, forms
from .pages import Pages, View
from .security import (
    BAD_CSRF,
    CSRF_FIELD,
    CSRF_HEADER,
    READ_ONLY,
    Guard,
    Identity,
    WrongTokenThrottle,
)

log = logging.getLogger("sqljobs.dashboard")

_COUNTED = ("retried", "cancelled", "deleted")


def _jobs_touched(outcome: actions.Outcome, per_job: bool) -> int:
    """How many jobs an action changed, for its log line."""
    for key in _COUNTED:
        if isinstance(outcome.body.get(key), int) and not isinstance(outcome.body[key], bool):
            return int(outcome.body[key])
    return int(per_job and outcome.status == 200 and "note" not in outcome.body)


def html(body: str, status: int = 200) -> HTMLResponse:
    return HTMLResponse(body, status_code=status)


@dataclass(frozen=True)
class Site:
    """One dashboard over ``app``, as :func:`~sqljobs.dashboard.server.create_app` set it
    up; every route module is handed the same one."""

    app: App
    pages: Pages
    guard: Guard
    throttle: WrongTokenThrottle
    read_only: bool

    def view(self, request: Request) -> View:
        identity: Identity | None = request.state.identity
        given = request.query_params
        flash = {  # only the sentences this dashboard signed: a link cannot bring its own
            kind: given[kind]
            for kind in ("message", "error")
            if kind in given and self.guard.flash_ok(kind, given[kind], given.get("sig", ""))
        }
        return View(
            now=time.time(),
            read_only=READ_ONLY if self.read_only else None,
            csrf=self.guard.csrf_token(request.state.session),
            logged_in=identity is not None and identity.who.startswith("login session"),
            message=flash.get("message", "")[: forms.MAX_FLASH] or None,
            error=flash.get("error", "")[: forms.MAX_FLASH] or None,
            back=forms.here(request),
            root=forms.root(request),
        )

    def reply(
        self, request: Request, outcome: actions.Outcome, back: str | None = None
    ) -> Response:
        """JSON for scripts; for the pages' forms, back to the page they came from with
        the outcome's sentence."""
        if forms.from_page(request):
            kind = "message" if outcome.status < 400 else "error"
            home = f"{forms.root(request)}/"
            where = back or forms.local_path(getattr(request.state, "back", None), home)
            sig = self.guard.flash_sig(kind, outcome.message)
            return RedirectResponse(
                forms.with_flash(where, kind, outcome.message, sig), status_code=303
            )
        return JSONResponse(outcome.body, status_code=outcome.status)

    def refuse(self, request: Request, outcome: actions.Outcome) -> Response:
        """A security refusal keeps its status even for a form (no redirect that hides it)."""
        if forms.from_page(request):
            home = f"{forms.root(request)}/"
            way_back = forms.local_path(getattr(request.state, "back", None), home)
            page = self.pages.refusal(self.view(request), outcome.message, way_back)
            return html(page, outcome.status)
        return JSONResponse(outcome.body, status_code=outcome.status)

    async def bad_parameter(self, request: Request, exc: Exception) -> Response:
        """The answer to an :class:`~sqljobs.dashboard.api.BadParameter` from any route."""
        log.info("dashboard %s %s refused (400): %s", request.method, request.url.path, exc)
        if request.method == "POST":
            return self.reply(request, actions.refused(400, str(exc)))
        if forms.wants_page(request):
            # back to the page without its parameters (a confirmation: to the jobs it asked about)
            confirming = forms.route_path(request) == "/jobs/confirm"
            way_back = forms.local_path(
                request.query_params.get("back"),
                f"{forms.root(request)}/jobs" if confirming else request.url.path,
            )
            page = self.pages.refusal(self.view(request), str(exc), way_back, "Bad address")
            return html(page, 400)
        return JSONResponse({"error": str(exc)}, status_code=400)

    async def _refusal(self, request: Request, identity: Identity) -> actions.Outcome | None:
        """None if the action may go ahead, else why not."""
        if self.read_only:
            return actions.refused(403, READ_ONLY)
        if identity.bearer:
            return None  # a browser never sends a bearer token by itself
        given = request.headers.get(CSRF_HEADER, "")
        if not given and forms.from_page(request):
            given = str((await request.form()).get(CSRF_FIELD, ""))
        if not self.guard.csrf_ok(self.guard.session(request), given):
            return actions.refused(403, BAD_CSRF)
        return None

    async def act(
        self,
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
        if (refused := await self._refusal(request, identity)) is not None:
            log.warning(
                "dashboard action %s by %s from %s refused (%d): %s",
                what, identity.who, client, refused.status, refused.message,
                extra={"who": identity.who, "action": what, "status": refused.status},
            )  # fmt: skip
            return self.refuse(request, refused)
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
        return self.reply(request, outcome, back(outcome))
