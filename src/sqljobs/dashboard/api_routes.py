"""The endpoints that scripts and scrapers read: the JSON API's ``GET`` routes
(``/api/csrf``, ``/api/stats``, ``/api/queues``, ``/api/jobs``, ``/api/jobs/ID``,
``/api/workers``, ``/api/schedules``) and ``/metrics``. Parameters are checked and JSON
is shaped by :mod:`sqljobs.dashboard.api`; the URLs are :mod:`sqljobs.dashboard.server`'s."""

from __future__ import annotations

import time
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from . import api, flows, forms, metrics
from .pages import in_words
from .reads import paused_at, redacted, redacted_kwargs, redacted_steps
from .site import Site


class ApiRoutes:
    """The JSON reads and ``/metrics`` of ``site``, one method an endpoint."""

    def __init__(self, site: Site) -> None:
        self.site = site

    def csrf(self, request: Request) -> Response:
        return JSONResponse({"csrf": self.site.guard.csrf_token(request.state.session)})

    def stats(self, request: Request) -> Response:
        return JSONResponse(self.site.app.stats().to_dict())

    def queues(self, request: Request) -> Response:
        app = self.site.app
        api.only(request.query_params, (), "/api/queues")
        when = paused_at(app)
        return JSONResponse([api.queue_json(q, when.get(q.name)) for q in app.queues()])

    def jobs(self, request: Request) -> Response:
        app = self.site.app
        params = request.query_params
        api.only(params, (*api.FILTER_PARAMS, "before", "limit", "workflow"), "/api/jobs")
        found = flows.children_filter(
            app, api.job_filter(params, time.time()), api.workflow(params)
        )
        page = app.find_jobs(found, before=api.before(params), limit=api.limit(params))
        response = JSONResponse([api.job_json(redacted(app, job)) for job in page.jobs])
        if page.next_before is not None:
            query = [(k, v) for k, v in params.multi_items() if k != "before"]
            query.append(("before", str(page.next_before)))
            next_page = f"{forms.root(request)}/api/jobs?{urlencode(query)}"
            response.headers["Link"] = f'<{next_page}>; rel="next"'
        return response

    def job(self, request: Request) -> Response:
        app = self.site.app
        job_id = api.job_id(request.path_params["job_id"])
        found = app.get_job(job_id)
        if found is None:
            return JSONResponse({"error": f"no job with id {job_id}"}, status_code=404)
        return JSONResponse(api.job_json(redacted(app, found)))

    def workflows(self, request: Request) -> Response:
        app = self.site.app
        params = request.query_params
        api.only(params, ("state", "limit"), "/api/workflows")
        runs = app.workflows(state=api.state(params), limit=api.limit(params))
        return JSONResponse([api.run_json(run) for run in runs])

    def workflow(self, request: Request) -> Response:
        app = self.site.app
        api.only(request.query_params, (), "/api/workflows/ID")
        job_id = api.job_id(request.path_params["job_id"])
        loaded = flows.load(app, job_id)
        if isinstance(loaded, flows.Missing):
            return JSONResponse({"error": loaded.reason}, status_code=404)
        found, stored = loaded
        steps = redacted_steps(app, stored)
        return JSONResponse(
            {
                "job": api.job_json(redacted(app, found)),
                "reason": app.waiting_reason(found),
                "steps": [api.step_json(step) for step in steps],
                "children": flows.child_ids(steps),
            }
        )

    def workers(self, request: Request) -> Response:
        app = self.site.app
        api.only(request.query_params, (), "/api/workers")
        return JSONResponse(
            [
                api.worker_json(w, [api.job_json(redacted(app, j)) for j in w.running])
                for w in app.workers()
            ]
        )

    def schedules(self, request: Request) -> Response:
        app = self.site.app
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

    def scrape(self, request: Request) -> Response:
        return Response(metrics.render(self.site.app), media_type="text/plain; version=0.0.4")
