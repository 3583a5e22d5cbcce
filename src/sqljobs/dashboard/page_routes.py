"""The endpoints of the HTML pages (``/``, ``/jobs``, ``/jobs/confirm``, ``/jobs/ID``,
``/workflows``, ``/workflows/ID``, ``/queues``, ``/schedules``, ``/workers``) and of the
login page and log out. What each page reads and shows is
:mod:`sqljobs.dashboard.pages`'; the URLs are :mod:`sqljobs.dashboard.server`'s."""

from __future__ import annotations

import logging
import time
from dataclasses import replace

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from ..jobs import JobFilter
from . import api, flows, forms
from .gate import set_cookie
from .pages import BULK_VERBS
from .security import AUTH_COOKIE, BAD_CSRF, CSRF_FIELD, SESSION_COOKIE
from .site import Site, html

log = logging.getLogger("sqljobs.dashboard")


class PageRoutes:
    """The pages of ``site``, one method an endpoint."""

    def __init__(self, site: Site) -> None:
        self.site = site

    def overview(self, request: Request) -> Response:
        forms.page_params(request, (), "/")
        return html(self.site.pages.overview(self.site.view(request)))

    def jobs_page(self, request: Request) -> Response:
        params = forms.page_params(request, (*api.FILTER_PARAMS, "before", "workflow"), "/jobs")
        now = time.time()
        workflow = api.workflow(params)
        found = flows.children_filter(self.site.app, api.job_filter(params, now), workflow)
        query = [(k, v) for k, v in params.multi_items() if k not in forms.FLASH]
        view = self.site.view(request)
        return html(self.site.pages.jobs(view, found, api.before(params), query, workflow))

    def confirm_page(self, request: Request) -> Response:
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
        view = replace(self.site.view(request), back=back)
        return html(self.site.pages.confirm(view, verb, found))

    def job_page(self, request: Request) -> Response:
        forms.page_params(request, (), "/jobs/ID")
        job_id = api.job_id(request.path_params["job_id"])
        pages = self.site.pages
        page = pages.job(self.site.view(request), job_id)
        if page is None:
            reason = f"no job with id {job_id}: it never existed, or it was deleted or pruned"
            jobs_list = f"{forms.root(request)}/jobs"
            refusal = pages.refusal(self.site.view(request), reason, jobs_list, "Not found")
            return html(refusal, 404)
        return html(page)

    def workflows_page(self, request: Request) -> Response:
        params = forms.page_params(request, ("state",), "/workflows")
        return html(self.site.pages.workflows(self.site.view(request), api.state(params)))

    def workflow_page(self, request: Request) -> Response:
        forms.page_params(request, (), "/workflows/ID")
        job_id = api.job_id(request.path_params["job_id"])
        pages = self.site.pages
        page = pages.workflow(self.site.view(request), job_id)
        if isinstance(page, flows.Missing):
            way_back = f"{forms.root(request)}{page.way_back}"
            refusal = pages.refusal(self.site.view(request), page.reason, way_back, "Not found")
            return html(refusal, 404)
        return html(page)

    def queues_page(self, request: Request) -> Response:
        forms.page_params(request, (), "/queues")
        return html(self.site.pages.queues(self.site.view(request)))

    def schedules_page(self, request: Request) -> Response:
        forms.page_params(request, (), "/schedules")
        return html(self.site.pages.schedules(self.site.view(request)))

    def workers_page(self, request: Request) -> Response:
        forms.page_params(request, (), "/workers")
        return html(self.site.pages.workers(self.site.view(request)))

    async def login(self, request: Request) -> Response:
        guard, pages = self.site.guard, self.site.pages
        if guard.token is None:
            return RedirectResponse(f"{forms.root(request)}/", status_code=303)
        view = self.site.view(request)
        if request.method == "GET":
            return html(pages.login(view))
        form = await request.form()
        client = request.client.host if request.client else "?"
        if not guard.csrf_ok(guard.session(request), str(form.get(CSRF_FIELD, ""))):
            return html(pages.login(replace(view, error=BAD_CSRF)), 403)
        if not guard.token_ok(str(form.get("token", ""))):
            self.site.throttle.failed(client)
            log.warning("dashboard login from %s refused: wrong token", client)
            return html(pages.login(replace(view, error="wrong token")), 401)
        session = guard.new_session()  # a fresh session, so one planted before is worthless
        log.info("dashboard login from %s", client)
        response = RedirectResponse(f"{forms.root(request)}/", status_code=303)
        set_cookie(response, SESSION_COOKIE, session, request)
        set_cookie(response, AUTH_COOKIE, guard.auth_cookie(session), request)
        return response

    async def logout(self, request: Request) -> Response:
        form = await request.form()
        guard = self.site.guard
        if not guard.csrf_ok(guard.session(request), str(form.get(CSRF_FIELD, ""))):
            return html(self.site.pages.refusal(self.site.view(request), BAD_CSRF), 403)
        response = RedirectResponse(f"{forms.root(request)}/login", status_code=303)
        response.delete_cookie(
            AUTH_COOKIE, path=f"{forms.root(request)}/", httponly=True, samesite="strict"
        )
        return response
