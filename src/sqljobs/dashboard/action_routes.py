"""The endpoints of the actions: ``POST`` retry, cancel and delete on one job or many, retry
every dead job, pause and resume a queue, pause, resume and run a schedule now. Each goes
through :meth:`Site.act <sqljobs.dashboard.site.Site.act>` (read-only, CSRF, the log
line); what the action does is :mod:`sqljobs.dashboard.actions`'; the URLs are
:mod:`sqljobs.dashboard.server`'s."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import replace

from starlette.requests import Request
from starlette.responses import Response

from ..app import App
from ..jobs import JobFilter
from . import actions, api, forms
from .site import Site

Endpoint = Callable[[Request], Awaitable[Response]]


class ActionRoutes:
    """The actions of ``site``: an endpoint per verb, made by the ``on_*`` methods."""

    def __init__(self, site: Site) -> None:
        self.site = site

    def on_job(self, verb: str, change: Callable[[App, int], actions.Outcome]) -> Endpoint:
        site = self.site

        async def endpoint(request: Request) -> Response:
            job_id = request.path_params["job_id"]

            def back(outcome: actions.Outcome) -> str | None:
                # a deleted job's own page is gone: back to the list
                gone = verb == "delete" and outcome.status == 200
                jobs_list = f"{forms.root(request)}/jobs"
                return jobs_list if gone and request.state.back == f"{jobs_list}/{job_id}" else None

            return await site.act(
                request,
                f"{verb} job {job_id}",
                lambda: change(site.app, api.job_id(job_id)),
                back=back,
            )

        return endpoint

    def on_jobs(self, verb: str) -> Endpoint:
        site = self.site

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
                return actions.bulk(site.app, verb, found)

            return await site.act(request, f"{verb} jobs", run)

        return endpoint

    def on_queue(self, verb: str, change: Callable[[App, str], actions.Outcome]) -> Endpoint:
        site = self.site

        async def endpoint(request: Request) -> Response:
            name = request.path_params["name"]
            return await site.act(
                request,
                f"{verb} queue {name!r}",
                lambda: change(site.app, api.queue_name(name)),
                per_job=False,
            )

        return endpoint

    def on_schedule(self, verb: str, change: Callable[[App, str], actions.Outcome]) -> Endpoint:
        site = self.site

        async def endpoint(request: Request) -> Response:
            name = request.path_params["name"]
            return await site.act(
                request, f"{verb} schedule {name!r}", lambda: change(site.app, name), per_job=False
            )

        return endpoint

    async def retry_dead(self, request: Request) -> Response:
        params = request.query_params
        where = "every queue" if "queue" not in params else f"queue {params['queue']!r}"

        def run() -> actions.Outcome:
            api.only(params, ("queue",), "/api/dead/retry")
            return actions.retry_dead(self.site.app, api.queue(params))

        return await self.site.act(request, f"retry the dead jobs of {where}", run, per_job=False)
