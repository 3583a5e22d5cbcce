"""An order as a durable workflow: a week of waiting, written as one function.

``process_order`` charges the card, reserves the stock, waits a day, then waits for a
manager's approval (reminding them every week it does not come), ships the parcel and
resizes the order's photos. While it waits the workflow is parked: no thread, worker slot
or query is spent on it until its time or its event comes. A worker that dies mid-way
leaves it to another, which replays the function from the top: what was checkpointed
comes back from the database instead of running again.

- ``wf.step``: runs once and checkpoints its result. A crash after the call but before
  the checkpoint runs it again, so the payment provider is given an idempotency key.
- ``wf.transaction``: the reservation and its checkpoint commit together: exactly once.
- ``wf.sleep``, ``wf.wait_for``: durable waits; ``orders.emit(...)`` is the approval.
- ``wf.run``, ``wf.gather``: child jobs, one, or many side by side.

Run a worker on it from a module of your own (``orders = order_app()``), with the
``reservations`` table (``RESERVATIONS``) created by your migrations::

    sqljobs --app myshop.jobs:orders worker

and approve from anywhere: ``orders.emit("approved:A-1001", {"by": "ada"})``.
tests/test_order_process.py runs the whole week in milliseconds with a test clock.
"""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Any

import sqljobs
from sqljobs import Workflow

RESERVATIONS = (
    "CREATE TABLE IF NOT EXISTS reservations "
    "(order_id TEXT PRIMARY KEY, sku TEXT NOT NULL, quantity INTEGER NOT NULL)"
)


def charge_card(order_id: str, cents: int) -> str:
    """Stand-in for the payment provider's API, called with ``order_id`` as its
    idempotency key: a second call for one order charges nothing more."""
    return f"ch_{order_id}_{cents}"


def send_reminder(order_id: str) -> str:
    """Stand-in for the e-mail that reminds the approver."""
    return f"reminder about order {order_id} sent"


def order_app(database_url: str | None = None, **options: Any) -> sqljobs.App:
    """The order queue and its tasks; ``options`` go to ``sqljobs.App`` (a test clock)."""
    url = database_url or os.environ.get("ORDERS_DATABASE_URL", "sqlite:///orders.db")
    orders = sqljobs.App(url, **options)
    mark = "%s" if orders.url.startswith("postgres") else "?"  # psycopg's, sqlite3's

    @orders.task(queue="shipping")
    def ship(order_id: str, sku: str) -> str:
        return f"parcel for order {order_id} (1 x {sku}) shipped"

    @orders.task(queue="photos")
    def resize(photo: str) -> str:
        return photo.removesuffix(".jpg") + "-800w.jpg"

    @orders.workflow(queue="orders")
    def process_order(
        wf: Workflow, order_id: str, sku: str, cents: int, photos: list[str]
    ) -> dict[str, Any]:
        charge = wf.step("charge", charge_card, order_id, cents)
        with wf.transaction("reserve") as tx:
            tx.execute(f"INSERT INTO reservations VALUES ({mark}, {mark}, 1)", (order_id, sku))
        wf.sleep(timedelta(days=1))  # a day's grace before the order goes for approval
        week = timedelta(days=7)
        approval = wf.wait_for(f"approved:{order_id}", timeout=week)
        while approval is None:  # a week without an answer: remind, and wait again
            wf.step("remind", send_reminder, order_id)
            approval = wf.wait_for(f"approved:{order_id}", timeout=week)
        parcel = wf.run(ship.s(order_id, sku))
        thumbnails = wf.gather([resize.s(photo) for photo in photos])
        return {"charge": charge, "approved_by": approval["by"], "parcel": parcel,
                "photos": thumbnails}  # fmt: skip

    return orders
