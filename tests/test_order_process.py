"""The order workflow of examples/order_process.py, a week and more of it in
milliseconds: a test clock that the drain moves to each wake-up, on every engine.
Approved in time, the order ships and its photos are resized; left unanswered, it reminds
the approver each week until the approval comes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from examples.order_process import RESERVATIONS, order_app
from sqljobs import App, JobHandle, JobState
from sqljobs.testing import Clock

from .conftest import db_execute

MONDAY = datetime(2027, 3, 1, 9, 0, tzinfo=UTC)
ORDER = "A-1001"


def place_order(url: str) -> tuple[App, Clock, JobHandle[Any]]:
    clock = Clock(MONDAY)
    orders = order_app(url, clock=clock)
    db_execute(orders, RESERVATIONS)
    handle = orders.tasks["process_order"].enqueue(ORDER, "mug", 1250, ["front.jpg", "back.jpg"])
    return orders, clock, handle


def steps(orders: App, handle: JobHandle[Any]) -> list[tuple[str, str, str]]:
    return [(s.kind, s.name, s.state) for s in orders.workflow_history(handle.id)]


def waiting_for(orders: App, handle: JobHandle[Any]) -> str:
    job = handle.job()
    assert job is not None and job.state is JobState.WAITING
    return orders.waiting_reason(job) or ""


def test_an_approved_order_ships_once_approved_and_reserves_once(url: str) -> None:
    orders, clock, handle = place_order(url)
    orders.run_until_empty(clock=clock, until=MONDAY + timedelta(days=2))
    assert f"waits for event 'approved:{ORDER}'" in waiting_for(orders, handle)
    orders.emit(f"approved:{ORDER}", {"by": "ada"})
    orders.run_until_empty(clock=clock)
    assert handle.result(timeout=1) == {
        "charge": "ch_A-1001_1250",
        "approved_by": "ada",
        "parcel": "parcel for order A-1001 (1 x mug) shipped",
        "photos": ["front-800w.jpg", "back-800w.jpg"],
    }
    assert clock.as_datetime() == MONDAY + timedelta(days=2), "no wait beyond the approval"
    assert steps(orders, handle) == [
        ("step", "charge", "done"),
        ("transaction", "reserve", "done"),
        ("sleep", "sleep", "done"),
        ("wait", f"approved:{ORDER}", "done"),
        ("run", "run:ship", "done"),
        ("gather", "gather:resize", "done"),
    ]
    assert db_execute(orders, "SELECT order_id, sku, quantity FROM reservations") == [
        (ORDER, "mug", 1)
    ]


def test_an_unanswered_order_reminds_the_approver_every_week_until_approved(
    url: str,
) -> None:
    orders, clock, handle = place_order(url)
    two_weeks_later = MONDAY + timedelta(days=1 + 7 + 7, hours=1)
    report = orders.run_until_empty(clock=clock, until=two_weeks_later)
    assert report.dead == 0 and clock.as_datetime() == two_weeks_later
    assert "waits for event" in waiting_for(orders, handle)
    history = orders.workflow_history(handle.id)
    reminders = [s for s in history if s.name == "remind"]
    assert [s.value for s in reminders] == [f"reminder about order {ORDER} sent"] * 2
    assert [s.detail.get("timed_out") for s in history if s.kind == "wait"] == [True, True, None]

    orders.emit(f"approved:{ORDER}", {"by": "grace"})
    orders.run_until_empty(clock=clock)
    assert handle.result(timeout=1)["approved_by"] == "grace"
    assert steps(orders, handle)[2:] == [
        ("sleep", "sleep", "done"),
        ("wait", f"approved:{ORDER}", "done"),
        ("step", "remind", "done"),
        ("wait", f"approved:{ORDER}", "done"),
        ("step", "remind", "done"),
        ("wait", f"approved:{ORDER}", "done"),
        ("run", "run:ship", "done"),
        ("gather", "gather:resize", "done"),
    ]
    assert db_execute(orders, "SELECT count(*) FROM reservations") == [(1,)]
