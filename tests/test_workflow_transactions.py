"""``wf.transaction_step``, on both backends: the writes, the value the function returns
and the checkpoint commit together, and a replay returns the first run's value where the
block of a ``wf.transaction`` computes its value afresh from what committed since."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime
from typing import Any

from sqljobs import App, Retry, Workflow
from sqljobs.testing import Clock
from sqljobs.url import url_options

from .conftest import is_pg


def _connect(url: str) -> Any:
    """A connection of the test's own on the queue's database."""
    if is_pg(url):
        import psycopg

        return psycopg.connect(url_options(url)[0])
    return sqlite3.connect(url.removeprefix("sqlite:///"))


def test_a_transaction_step_s_value_is_the_first_run_s_on_every_replay(url: str) -> None:
    clock = Clock(datetime(2026, 12, 1, 9, 0, tzinfo=UTC))
    app = App(url, clock=clock)
    mark = "%s" if is_pg(url) else "?"
    with _connect(url) as own:
        own.execute("CREATE TABLE orders (ref TEXT)")
    calls: list[str] = []
    interrupted: list[bool] = []

    def insert(tx: Any, ref: str) -> int:
        tx.execute(f"INSERT INTO orders VALUES ({mark})", (ref,))
        calls.append(ref)
        if len(calls) == 1:
            raise RuntimeError("after the insert, before the commit")
        (n,) = tx.execute("SELECT count(*) FROM orders").fetchone()
        return int(n)

    @app.workflow(retry=Retry(max_attempts=3, base=0))
    def book(wf: Workflow) -> list[int]:
        n = wf.transaction_step("insert", insert, "o-1")
        with wf.transaction("count") as tx:
            (recounted,) = tx.execute("SELECT count(*) FROM orders").fetchone()
        if not interrupted:
            interrupted.append(True)
            with _connect(url) as other:  # another process commits between two attempts
                other.execute("INSERT INTO orders VALUES ('o-2')")
            raise RuntimeError("after both steps")
        return [n, int(recounted)]

    handle = book.enqueue()
    app.run_until_empty(clock=clock)
    assert handle.result(timeout=1) == [1, 2], "the step's value replays; the block's is new"
    assert calls == ["o-1", "o-1"], "called again after its rollback, never on a replay"
    with _connect(url) as own:
        rows = own.execute("SELECT ref FROM orders ORDER BY ref").fetchall()
    assert [r[0] for r in rows] == ["o-1", "o-2"], "the failed call's insert rolled back"
    steps = app.workflow_history(handle.id)
    assert [(s.name, s.kind, s.value) for s in steps] == [
        ("insert", "transaction", 1),
        ("count", "transaction", None),
    ]
