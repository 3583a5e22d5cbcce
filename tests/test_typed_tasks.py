"""Models and dataclasses as task arguments and results, on both backends: dumped to JSON
at enqueue, validated back into their classes in a real worker, refused clearly at enqueue
when the wrong thing is given, and a failed attempt naming task, argument and field when a
stored payload no longer fits."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import pytest
from pydantic import BaseModel, Field

import sqljobs
from sqljobs import App, JobContext, PayloadError
from sqljobs.model_args import Shape
from sqljobs.testing import stepped_worker
from tests.conftest import child_pythonpath


class Order(BaseModel):
    sku: str
    qty: int = Field(gt=0)
    placed: datetime


class Receipt(BaseModel):
    sku: str
    total: float


@dataclass
class Address:
    city: str
    zip_code: str
    floor: int | None = None
    tags: list[str] = field(default_factory=list)


@dataclass
class Parcel:
    to: Address
    weight: float


@dataclass
class Box:
    side: float
    volume: float = field(init=False)

    def __post_init__(self) -> None:
        self.volume = self.side**3


@dataclass
class Stamp:
    when: datetime


ORDER = Order(sku="book", qty=2, placed=datetime(2026, 12, 3, 9, 30))


def test_models_and_dataclasses_arrive_as_instances_and_results_come_back(app: App) -> None:
    seen: list[object] = []

    @app.task
    def ship(ctx: JobContext, order: Order, parcel: Parcel, *, note: Address | None) -> Receipt:
        seen.extend([order, parcel, note])
        return Receipt(sku=order.sku, total=order.qty * parcel.weight)

    @app.task
    async def weigh(parcel: Parcel) -> Parcel:
        return Parcel(parcel.to, parcel.weight * 2)

    parcel = Parcel(Address("Oslo", "0150", tags=["fragile"]), 1.5)
    shipped = ship.enqueue(ORDER, parcel, note=None)
    # a dict of fields (untyped callers) is validated at enqueue, stored as the model would be
    order_fields: Any = {"sku": "pen", "qty": "3", "placed": "2026-12-03T10:00:00"}
    parcel_fields: Any = {"to": {"city": "Bergen", "zip_code": "5003"}, "weight": 2}
    by_dict = ship.enqueue(order_fields, parcel_fields, note=Address("Bergen", "5003", floor=2))
    weighed = weigh.enqueue(parcel)
    stored = app.get_job(shipped.id)
    assert stored is not None
    assert stored.args == [
        {"sku": "book", "qty": 2, "placed": "2026-12-03T09:30:00"},
        {"to": {"city": "Oslo", "zip_code": "0150", "floor": None, "tags": ["fragile"]},
         "weight": 1.5},
    ]  # fmt: skip
    with stepped_worker(app) as worker:
        assert worker.result(shipped) == Receipt(sku="book", total=3.0)
        assert worker.result(by_dict) == Receipt(sku="pen", total=6.0)
        assert worker.result(weighed) == Parcel(Address("Oslo", "0150", tags=["fragile"]), 3.0)
    assert seen[:3] == [ORDER, parcel, None]
    assert seen[3:] == [
        Order(sku="pen", qty=3, placed=datetime(2026, 12, 3, 10)),
        Parcel(Address("Bergen", "5003"), 2.0),
        Address("Bergen", "5003", floor=2),
    ]
    assert all(type(v) in (Order, Parcel, Address) for v in seen if v is not None)
    assert isinstance(app.job(shipped.id).result(timeout=1), Receipt)  # any handle, by task


def test_wrong_values_are_refused_at_enqueue_naming_task_and_argument(app: App) -> None:
    @app.task
    def ship(order: Order, parcel: Parcel) -> None: ...

    parcel = Parcel(Address("Oslo", "0150"), 1.0)
    with pytest.raises(PayloadError, match=r"argument 'order' of task 'ship' takes Order "
                       r"\(pydantic model\) or a dict of its fields, got str"):  # fmt: skip
        ship.enqueue("book", parcel)  # type: ignore[arg-type]
    with pytest.raises(PayloadError, match=r"argument 'order' of task 'ship' does not fit Order "
                       r"\(pydantic model\): qty: Input should be greater than 0"):  # fmt: skip
        ship.enqueue({"sku": "x", "qty": 0, "placed": "2026-12-03T09:30:00"}, parcel)  # type: ignore[arg-type]
    with pytest.raises(PayloadError, match=r"argument 'parcel' of task 'ship' does not fit "
                       r"Parcel \(dataclass\): field 'to': "
                       r"field 'zip_code' is missing"):  # fmt: skip
        ship.enqueue(ORDER, parcel={"to": {"city": "Oslo"}, "weight": 1})  # type: ignore[arg-type]
    with pytest.raises(PayloadError, match=r"enqueue_many call 1: argument 'parcel'.* got list"):
        ship.enqueue_many([(ORDER, parcel), (ORDER, [1])])

    @app.task
    def stamp(at: Stamp) -> None: ...

    with pytest.raises(PayloadError, match=r"argument 'at' of task 'stamp' is not JSON-"):
        stamp.enqueue(Stamp(ORDER.placed))  # a dataclass's fields must be JSON themselves
    assert app.stats().total("pending") == 0


def test_a_stored_payload_that_no_longer_fits_fails_its_attempt_clearly(app: App) -> None:
    @app.task
    def ship(order: Order, parcel: Parcel) -> None:
        raise AssertionError("never called with arguments that do not fit")

    # another service, which does not register the task, enqueues by name (one attempt:
    # a payload that does not fit is retried as any failure is, for a rolling deployment)
    other = App(app.url, default_retry=sqljobs.Retry(max_attempts=1))
    good_parcel = {"to": {"city": "Oslo", "zip_code": "0150"}, "weight": 1}
    missing = other.enqueue("ship", args=[{"sku": "book", "qty": 2}, good_parcel], known=False)
    mistyped = other.enqueue(
        "ship",
        args=[ORDER.model_dump(mode="json")],
        kwargs={"parcel": {"to": {"city": "Oslo", "zip_code": 150}, "weight": 1}},
        known=False,
    )
    with stepped_worker(app) as worker:
        with pytest.raises(sqljobs.JobFailed) as failed:
            worker.result(missing)
        assert "PayloadError: argument 'order' of task 'ship' does not fit Order " in str(
            failed.value
        )
        assert "placed: Field required" in str(failed.value)
        with pytest.raises(sqljobs.JobFailed, match=r"argument 'parcel' of task 'ship' does not "
                           r"fit Parcel \(dataclass\): field 'to': field 'zip_code': expected "
                           r"str, got int"):  # fmt: skip
            worker.result(mistyped)


def test_a_group_callback_gets_results_first_and_its_model_arguments_as_models(app: App) -> None:
    @app.task
    def price(sku: str) -> float:
        return {"book": 12.5, "pen": 2.0}[sku]

    @app.task
    def total(prices: list[float], parcel: Parcel) -> Receipt:
        return Receipt(sku=parcel.to.city, total=sum(prices) + parcel.weight)

    group = app.group(
        [price.s("book"), price.s("pen")], then=total.s(Parcel(Address("Oslo", "0150"), 0.5))
    )
    with stepped_worker(app) as worker:
        assert worker.result(group) == Receipt(sku="Oslo", total=15.0)


def test_a_stored_result_that_no_longer_fits_is_a_clear_error(app: App) -> None:
    @app.task
    def quote(sku: str) -> dict[str, str]:
        return {"sku": sku}  # an older version, before it returned a Receipt

    with stepped_worker(app) as worker:
        job_id = quote.enqueue("book").id
        assert worker.result(app.job(job_id)) == {"sku": "book"}
    newer = App(app.url)

    @newer.task(name="quote")
    def quote_now(sku: str) -> Receipt:
        return Receipt(sku=sku, total=1.0)

    with pytest.raises(PayloadError, match=r"the stored result of task 'quote' does not fit "
                       r"Receipt \(pydantic model\): total: Field required"):  # fmt: skip
        newer.job(job_id).result(timeout=1)


def test_importing_sqljobs_does_not_import_pydantic() -> None:
    code = "import sys, sqljobs, sqljobs.model_args; print('pydantic' in sys.modules)"
    found = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "PYTHONPATH": child_pythonpath()},
        capture_output=True,
        text=True,
        check=True,
    )
    assert found.stdout.strip() == "False"


def test_a_concurrency_key_function_sees_the_model_as_the_handler_will(app: App) -> None:
    @app.task(concurrency=1, concurrency_key=lambda order, **_: order.sku)
    def pack(order: Order) -> None: ...

    by_model = pack.enqueue(ORDER)
    by_fields = pack.enqueue({"sku": "pen", "qty": 1, "placed": "2026-12-03T09:30:00"})  # type: ignore[arg-type]
    keys = [job.limit_key for job in map(app.get_job, [by_model.id, by_fields.id]) if job]
    assert keys == ["pack:book", "pack:pen"]


def test_a_task_without_models_has_nothing_to_convert(app: App) -> None:
    @app.task
    def plain(ctx: JobContext, tenant: str, day: str = "today") -> dict[str, str]:
        return {"tenant": tenant}

    assert plain.model_args is None and plain.result_model is None


def test_dataclass_fields_are_checked_by_name_and_simple_type() -> None:
    parcel = Shape(Parcel)
    assert parcel.load({"to": {"city": "A", "zip_code": "1", "floor": 3}, "weight": 2}) == Parcel(
        Address("A", "1", floor=3), 2.0
    )
    bad = {
        "unknown field(s) 'colour'": {"to": {"city": "A", "zip_code": "1"}, "weight": 1,
                                      "colour": "red"},
        "field 'weight' is missing": {"to": {"city": "A", "zip_code": "1"}},
        "field 'weight': expected float, got str": {"to": {"city": "A", "zip_code": "1"},
                                                    "weight": "1"},
        "field 'to': field 'floor': expected int, got bool": {
            "to": {"city": "A", "zip_code": "1", "floor": True}, "weight": 1},
        "field 'to': expected an object of its fields, got str": {"to": "Oslo", "weight": 1},
        "expected an object of its fields, got list": [1, 2],
    }  # fmt: skip
    box = Shape(Box)  # a field the class computes is written by asdict and not passed back
    assert box.load(box.dump(Box(2))) == Box(2)
    for message, data in bad.items():
        with pytest.raises(ValueError) as refused:
            parcel.load(data)
        assert str(refused.value) == message
