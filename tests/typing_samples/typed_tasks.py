"""Typed tasks as a type checker sees them. tests/test_typing.py runs mypy on this file:
a line whose comment starts with E and a colon must get an error containing the rest of
the comment, one with N a note (``reveal_type``), and no other line an error. Never
imported, never run."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, reveal_type

from pydantic import BaseModel

import sqljobs
from sqljobs import JobContext, JobHandle

app = sqljobs.App("sqlite:///:memory:")


class Order(BaseModel):
    sku: str
    qty: int


@dataclass
class Address:
    city: str


@app.task
def send_report(tenant: str, day: int = 1) -> list[str]:
    return [tenant]


@app.task(lease=30)
def pay(ctx: JobContext, order_id: str) -> None: ...


@app.task
async def fetch(url: str, *, retries: int = 0) -> bytes:
    return b""


@app.task(queue="mail")
async def notify(ctx: JobContext, address: Address) -> Order:
    return Order(sku="x", qty=1)


@app.task
def ship(order: Order, to: Address | None = None) -> None: ...


@app.periodic(every=60)
def nightly() -> int:
    return 0


@app.task
def loose(first: Any, *rest: Any) -> str:
    return ""


# -- calls that type-check ---------------------------------------------------------------

reveal_type(send_report)  # N: Task[[tenant: str, day: int =], list[str]]"
reveal_type(pay)  # N: Task[[order_id: str], None]"
reveal_type(loose.enqueue(1, "two", [3]).result())  # N: Revealed type is "str"
handle = send_report.enqueue("acme", day=3)
reveal_type(handle.result())  # N: Revealed type is "list[str]"
reveal_type(fetch.enqueue("https://x.test", retries=2).result())  # N: Revealed type is "bytes"
reveal_type(notify.enqueue(Address("Oslo")).result(timeout=5))  # N: typed_tasks.Order"
reveal_type(pay.with_options(key="order-1:pay").enqueue("order-1"))  # N: JobHandle[None]"
reveal_type(nightly.enqueue().result())  # N: Revealed type is "int"
ship.enqueue(Order(sku="book", qty=1))
ship.enqueue(Order(sku="book", qty=1), to=Address("Oslo"))
loose.enqueue(1, "two", [3])
send_report.enqueue_many([("acme",), {"tenant": "globex", "day": 2}])
app.group([send_report.s("acme"), fetch.s("u")], then=loose.s())
handles: list[JobHandle[object]] = [send_report.enqueue("a"), pay.enqueue("b")]
untyped_handle: JobHandle = app.job(1)


async def waits() -> None:
    reveal_type(await fetch.enqueue("u").result_async())  # N: Revealed type is "bytes"
    reveal_type(await fetch.enqueue_async("u"))  # N: "sqljobs.handles.JobHandle[bytes]"


# -- mistakes a type checker catches -----------------------------------------------------

send_report.enqueue(42)  # E: Argument 1 to "enqueue" of "Task" has incompatible type "int"
send_report.enqueue()  # E: Missing positional argument "tenant" in call to "enqueue"
send_report.enqueue("acme", dya=2)  # E: Unexpected keyword argument "dya" for "enqueue"
pay.enqueue()  # E: Missing positional argument "order_id" in call to "enqueue" of "Task"
pay.with_options(priority=5).enqueue(1001)  # E: incompatible type "int"; expected "str"
fetch.enqueue("u", 3)  # E: Too many positional arguments for "enqueue" of "Task"
ship.enqueue({"sku": "book"})  # E: incompatible type "dict[str, str]"; expected "Order"
ship.enqueue(Order(sku="book", qty=1), to="Oslo")  # E: expected "Address | None"
wrong: str = send_report.enqueue("acme").result()  # E: expression has type "list[str]"
