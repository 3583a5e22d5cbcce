"""A small shop on FastAPI and sqljobs, in one process that serves and works.

- ``POST /orders`` stores an order and enqueues its receipt in one transaction on the
  request's ``psycopg.AsyncConnection`` (PostgreSQL): a request that fails after the
  enqueue (out of stock) leaves neither the order nor the job behind.
- ``POST /reports`` enqueues without a transaction of its own (SQLite or PostgreSQL).
- ``GET /jobs/{job_id}/result?timeout=5`` waits for a job's result, a few seconds at most.
- The worker runs in the application's lifespan; shutting down drains it.
- The dashboard is mounted at ``/jobs-admin``.

Run it (``pip install 'sqljobs[postgres,dashboard]' fastapi uvicorn``)::

    SHOP_DATABASE_URL=postgresql://localhost/shop uvicorn --factory examples.fastapi_shop:make_app

``SHOP_DASHBOARD_TOKEN`` guards the dashboard when the shop is reachable beyond loopback.
See docs/fastapi.md for the pattern, and for when to run ``sqljobs worker`` apart.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated, Any, TypedDict

from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.responses import JSONResponse
from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool
from pydantic import BaseModel, Field

import sqljobs
from sqljobs.contrib.asgi import background_worker
from sqljobs.dashboard import create_app as create_dashboard

SHOP_TABLES = """
CREATE TABLE IF NOT EXISTS shop_orders (
    id bigserial PRIMARY KEY, item text NOT NULL, quantity int NOT NULL
);
CREATE TABLE IF NOT EXISTS shop_stock (item text PRIMARY KEY, available int NOT NULL);
INSERT INTO shop_stock (item, available) VALUES ('widget', 10) ON CONFLICT DO NOTHING;
"""
RESULT_WAIT_LIMIT = 30.0
"""The longest a request may wait for a job's result: a client that needs longer polls."""


def shop_jobs(database_url: str | None = None) -> sqljobs.App:
    """The shop's queue and its tasks. A separate ``sqljobs worker`` would import the same
    App from a module of its own (``jobs = shop_jobs()``)."""
    jobs = sqljobs.App(database_url or os.environ.get("SHOP_DATABASE_URL", "sqlite:///shop.db"))

    @jobs.task(queue="mail")
    def send_receipt(order_id: int) -> str:
        return f"receipt for order {order_id} sent"

    @jobs.task(queue="reports")
    def build_report(tenant: str) -> dict[str, Any]:
        return {"tenant": tenant, "orders": 0}

    return jobs


class Order(BaseModel):
    item: str = Field(min_length=1, max_length=100)
    quantity: int = Field(gt=0)


class ReportRequest(BaseModel):
    tenant: str = Field(min_length=1, max_length=100)


class ShopState(TypedDict):
    """What the lifespan opens for the requests (``request.state``)."""

    pool: AsyncConnectionPool[AsyncConnection[Any]] | None


async def connection(request: Request) -> AsyncIterator[AsyncConnection[Any]]:
    """The request's database connection, lent from the pool (PostgreSQL only)."""
    pool: AsyncConnectionPool[AsyncConnection[Any]] | None = request.state.pool
    if pool is None:
        raise HTTPException(
            501,
            "orders need PostgreSQL: SQLite has no async connection to share with the "
            "enqueue (docs/fastapi.md shows the SQLite way, in a thread)",
        )
    async with pool.connection() as conn:
        yield conn


Connection = Annotated[AsyncConnection[Any], Depends(connection)]


def create_shop(jobs: sqljobs.App, *, dashboard_token: str | None = None) -> FastAPI:
    """The shop's ASGI application over ``jobs`` (see :func:`shop_jobs`)."""
    send_receipt, build_report = jobs.tasks["send_receipt"], jobs.tasks["build_report"]
    on_postgres = jobs.url.startswith("postgres")

    @asynccontextmanager
    async def lifespan(_api: FastAPI) -> AsyncIterator[ShopState]:
        await asyncio.to_thread(jobs.migrate)  # before the first request enqueues
        pool = None
        if on_postgres:
            pool = AsyncConnectionPool(jobs.url, min_size=1, max_size=4, open=False)
            await pool.open()
            async with pool.connection() as conn:
                await conn.execute(SHOP_TABLES)
        try:
            async with background_worker(jobs, concurrency=4):
                yield {"pool": pool}
        finally:  # the worker has drained: nothing uses the pool any more
            if pool is not None:
                await pool.close()

    api = FastAPI(title="sqljobs shop", lifespan=lifespan)

    @api.post("/orders", status_code=201)
    async def place_order(order: Order, conn: Connection) -> dict[str, int]:
        async with conn.transaction():  # commits before the response: the job is there
            cursor = await conn.execute(
                "INSERT INTO shop_orders (item, quantity) VALUES (%s, %s) RETURNING id",
                (order.item, order.quantity),
            )
            row = await cursor.fetchone()
            assert row is not None
            order_id = int(row[0])
            receipt = await send_receipt.with_options(connection=conn).enqueue_async(order_id)
            taken = await conn.execute(
                "UPDATE shop_stock SET available = available - %s"
                " WHERE item = %s AND available >= %s",
                (order.quantity, order.item, order.quantity),
            )
            if taken.rowcount != 1:  # raising rolls back the order and its receipt job
                raise HTTPException(409, f"not enough {order.item!r} in stock")
        return {"order_id": order_id, "receipt_job": receipt.id}

    @api.post("/reports", status_code=202)
    async def request_report(report: ReportRequest) -> dict[str, int]:
        handle = await build_report.enqueue_async(report.tenant)
        return {"job_id": handle.id}

    @api.get("/jobs/{job_id}/result")
    async def job_result(
        job_id: int, timeout: Annotated[float, Query(ge=0, le=RESULT_WAIT_LIMIT)] = 5.0
    ) -> JSONResponse:
        """200 with the job's end (done with its result, dead or cancelled with why);
        202 while it has not ended within ``timeout`` seconds; 404 for no such job. (A
        real service checks first that the caller may see this job.)"""
        try:
            value = await jobs.job(job_id).result_async(timeout=timeout)
        except sqljobs.ResultTimeout:
            return JSONResponse({"job_id": job_id, "state": "not ended"}, status_code=202)
        except sqljobs.JobNotFound:
            raise HTTPException(404, f"no job {job_id}") from None
        except sqljobs.JobFailed as failed:
            return JSONResponse({"job_id": job_id, "state": "dead", "error": failed.error})
        except sqljobs.JobCancelled:
            return JSONResponse({"job_id": job_id, "state": "cancelled"})
        return JSONResponse({"job_id": job_id, "state": "done", "result": value})

    # the dashboard keeps its own security: loopback only, unless it has a token
    dashboard = create_dashboard(jobs, token=dashboard_token, exposed=dashboard_token is not None)
    api.mount("/jobs-admin", dashboard)
    return api


def make_app() -> FastAPI:
    """For ``uvicorn --factory examples.fastapi_shop:make_app``."""
    return create_shop(shop_jobs(), dashboard_token=os.environ.get("SHOP_DASHBOARD_TOKEN"))
