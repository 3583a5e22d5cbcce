"""The FastAPI pattern, run as the real ASGI application (examples/fastapi_shop.py) under
Starlette's TestClient, which runs its lifespan, so the jobs run in the lifespan's worker:
a job enqueued by an endpoint runs and its result comes back through another; an order
and its receipt job commit together or not at all (PostgreSQL's AsyncConnection); the
dashboard mounted at /jobs-admin keeps its links, its actions and its login under the
prefix; shutting the application down drains a running job."""

from __future__ import annotations

import asyncio
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from fastapi import FastAPI
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.testclient import TestClient

import sqljobs
from examples.fastapi_shop import create_shop, shop_jobs
from sqljobs import JobContext, JobFilter, JobState, Retry
from sqljobs.contrib.asgi import background_worker, worker_lifespan

from .conftest import db_execute, is_pg, wait_until

LOOPBACK = "http://127.0.0.1"  # the unguarded dashboard serves a loopback Host only
PREFIX = "/jobs-admin"


@contextmanager
def running(api: FastAPI | Starlette, base_url: str = LOOPBACK) -> Iterator[TestClient]:
    """The application started (its lifespan, and so its worker, running) and stopped."""
    with TestClient(api, base_url=base_url) as client:
        yield client


def _job(jobs: sqljobs.App, job_id: int) -> sqljobs.Job:
    job = jobs.get_job(job_id)
    assert job is not None
    return job


def test_a_report_runs_in_the_lifespan_worker_and_its_result_comes_back(url: str) -> None:
    jobs = shop_jobs(url)
    later = jobs.tasks["build_report"].with_options(delay=3600).enqueue("tomorrow").id
    with running(create_shop(jobs)) as shop:
        wait_until(lambda: [w.concurrency for w in jobs.workers()] == [4], what="the worker")
        asked = shop.post("/reports", json={"tenant": "acme"})
        assert asked.status_code == 202, asked.text
        job_id = asked.json()["job_id"]
        answer = shop.get(f"/jobs/{job_id}/result", params={"timeout": 10})
        assert answer.status_code == 200
        assert answer.json() == {
            "job_id": job_id,
            "state": "done",
            "result": {"tenant": "acme", "orders": 0},
        }
        waiting = shop.get(f"/jobs/{later}/result", params={"timeout": 0.05})
        assert waiting.status_code == 202 and waiting.json()["state"] == "not ended"
        assert shop.get("/jobs/999999/result", params={"timeout": 0}).status_code == 404
        if not is_pg(url):  # no async connection to share: the shop says so
            refused = shop.post("/orders", json={"item": "widget", "quantity": 1})
            assert refused.status_code == 501 and "PostgreSQL" in refused.text
    assert _job(jobs, job_id).worker is not None
    assert jobs.workers() == []  # stopped with the application, and unregistered


@pytest.mark.parametrize("url", ["postgres"], indirect=True)
def test_an_order_and_its_receipt_job_commit_together_or_not_at_all(url: str) -> None:
    jobs = shop_jobs(url)
    with running(create_shop(jobs)) as shop:
        placed = shop.post("/orders", json={"item": "widget", "quantity": 3})
        assert placed.status_code == 201, placed.text
        first = placed.json()
        receipt = shop.get(f"/jobs/{first['receipt_job']}/result", params={"timeout": 10})
        assert receipt.json()["result"] == f"receipt for order {first['order_id']} sent"

        refused = shop.post("/orders", json={"item": "widget", "quantity": 100})
        assert refused.status_code == 409 and "not enough" in refused.text
        again = shop.post("/orders", json={"item": "widget", "quantity": 2}).json()

    # the refused request wrote its order and its job (their ids were taken), and both
    # were rolled back with it
    assert again["order_id"] > first["order_id"] + 1
    assert again["receipt_job"] > first["receipt_job"] + 1
    orders = db_execute(jobs, "SELECT id, quantity FROM shop_orders ORDER BY id")
    assert orders == [(first["order_id"], 3), (again["order_id"], 2)]
    receipts = jobs.find_jobs(JobFilter(task="send_receipt")).jobs
    assert sorted(j.id for j in receipts) == [first["receipt_job"], again["receipt_job"]]
    stock = db_execute(jobs, "SELECT available FROM shop_stock")
    assert stock == [(5,)]


def _links(html: str) -> list[str]:
    return re.findall(r'(?:href|action|src)="(/[^"]*)"', html)


def test_the_mounted_dashboard_links_and_actions_carry_the_prefix(url: str) -> None:
    jobs = shop_jobs(url)

    runs: list[int] = []

    @jobs.task(retry=Retry(max_attempts=1))
    def broken() -> str:
        runs.append(1)
        if len(runs) == 1:
            raise RuntimeError("broken on purpose")
        return "mended"

    with running(create_shop(jobs)) as shop:
        dead = broken.enqueue().id
        wait_until(lambda: _job(jobs, dead).state is JobState.DEAD)
        overview = shop.get(f"{PREFIX}/")
        assert overview.status_code == 200
        links = _links(overview.text)
        assert links and all(link.startswith(f"{PREFIX}/") for link in links), links
        assert shop.get(f"{PREFIX}/static/dashboard.css").status_code == 200
        for page_path in ("/jobs", "/queues", "/schedules", "/workers", "/jobs/confirm"):
            other = shop.get(
                f"{PREFIX}{page_path}",
                params={"action": "retry", "state": "dead"} if page_path == "/jobs/confirm" else {},
            )
            assert other.status_code == 200, (page_path, other.text)
            assert all(link.startswith(f"{PREFIX}/") for link in _links(other.text)), page_path

        # from the overview to the dead job's page, by its link
        assert f"{PREFIX}/jobs/{dead}" in links
        page = shop.get(f"{PREFIX}/jobs/{dead}")
        assert page.status_code == 200 and "broken on purpose" in page.text
        assert all(link.startswith(f"{PREFIX}/") for link in _links(page.text))

        # its Retry button posts to the prefixed action, with the session's CSRF token
        retry = f"{PREFIX}/api/jobs/{dead}/retry"
        assert retry in _links(page.text)
        csrf = re.search(r'name="csrf" value="([^"]+)"', page.text)
        assert csrf is not None
        back = f"{PREFIX}/jobs/{dead}"
        forged = shop.post(retry, data={"back": back}, follow_redirects=False)
        assert forged.status_code == 403  # no CSRF token: refused under the prefix too
        assert _job(jobs, dead).state is JobState.DEAD
        done = shop.post(retry, data={"csrf": csrf.group(1), "back": back}, follow_redirects=False)
        assert done.status_code == 303
        assert done.headers["location"].startswith(f"{back}?message=")
        # sent back to pending (PostgreSQL's worker finds it at its next poll: no NOTIFY)
        assert _job(jobs, dead).state in (JobState.PENDING, JobState.RUNNING, JobState.DONE)
        assert shop.get(done.headers["location"]).status_code == 200

        # the JSON's next-page link carries the prefix too
        listed = shop.get(f"{PREFIX}/api/jobs", params={"limit": 1})
        assert f"<{PREFIX}/api/jobs?" in listed.headers["link"]


def test_a_guarded_mounted_dashboard_logs_in_under_its_prefix(url: str) -> None:
    jobs = shop_jobs(url)
    shop_app = create_shop(jobs, dashboard_token="s3cret")
    with running(shop_app, base_url="http://shop.example") as shop:  # exposed: any Host
        html = {"accept": "text/html"}
        asked = shop.get(f"{PREFIX}/jobs", headers=html, follow_redirects=False)
        assert asked.status_code == 303 and asked.headers["location"] == f"{PREFIX}/login"
        login = shop.get(f"{PREFIX}/login", headers=html)
        assert f'action="{PREFIX}/login"' in login.text
        csrf = re.search(r'name="csrf" value="([^"]+)"', login.text)
        assert csrf is not None
        entered = shop.post(
            f"{PREFIX}/login",
            data={"csrf": csrf.group(1), "token": "s3cret"},
            follow_redirects=False,
        )
        assert entered.status_code == 303 and entered.headers["location"] == f"{PREFIX}/"
        cookies = entered.headers.get_list("set-cookie")
        assert cookies and all(f"Path={PREFIX}/" in c for c in cookies), cookies  # its own
        assert shop.get(f"{PREFIX}/", headers=html).status_code == 200
        assert shop.post("/reports", json={"tenant": "acme"}).status_code == 202  # the shop's own


def test_shutting_the_application_down_drains_a_running_job(url: str) -> None:
    jobs = shop_jobs(url)
    started = threading.Event()

    @jobs.task
    def until_shutdown(ctx: JobContext) -> str:
        started.set()
        deadline = time.monotonic() + 10
        while not ctx.shutting_down and time.monotonic() < deadline:
            time.sleep(0.005)  # the job's own work, until the worker drains
        return "saw the shutdown" if ctx.shutting_down else "never saw it"

    with running(create_shop(jobs)):
        job_id = until_shutdown.enqueue().id
        assert started.wait(10)
        assert _job(jobs, job_id).state is JobState.RUNNING
    # leaving the block ran the lifespan's shutdown: the worker drained the job
    job = _job(jobs, job_id)
    assert job.state is JobState.DONE and job.result == "saw the shutdown"


def test_worker_lifespan_serves_a_plain_starlette_app(url: str) -> None:
    jobs = sqljobs.App(url)

    @jobs.task
    async def double(n: int) -> int:
        return 2 * n

    async def endpoint(request: Request) -> JSONResponse:
        handle = await double.enqueue_async(int(request.path_params["n"]))
        return JSONResponse(await handle.result_async(timeout=10))

    api = Starlette(
        routes=[Route("/double/{n}", endpoint)], lifespan=worker_lifespan(jobs, concurrency=2)
    )
    with running(api) as client:
        assert client.get("/double/21").json() == 42
    assert jobs.workers() == []


def test_a_worker_that_stops_by_itself_is_logged_and_raised_at_the_end(
    url: str, caplog: pytest.LogCaptureFixture
) -> None:
    jobs = sqljobs.App(url)

    async def main() -> Any:
        async with background_worker(jobs, concurrency=0) as worker:  # refused at start
            await asyncio.wait([worker])
            return worker.done()

    with pytest.raises(sqljobs.ConfigurationError, match="concurrency must be >= 1"):
        asyncio.run(main())
    assert "the application's sqljobs worker stopped" in caplog.text
