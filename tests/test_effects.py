"""Effectively-once effects: every row of the article's E4, on both backends.

One charge of 100 is delivered five times; the balance starts at 10000. The broken
variants are written here on purpose, to show the failure each rule prevents.
"""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

import pytest

import sqljobs
from sqljobs import App, JobState, Retry
from sqljobs.testing import stepped_worker

from .conftest import db_execute, is_pg, placeholder

DELIVERIES = 5


@pytest.fixture
def bank(app: App) -> App:
    db_execute(app, "CREATE TABLE accounts (id TEXT PRIMARY KEY, balance INTEGER)")
    db_execute(app, "INSERT INTO accounts VALUES ('acme', 10000)")
    db_execute(app, "CREATE TABLE charges (n INTEGER)")
    db_execute(app, "CREATE TABLE loose_markers (key TEXT)")  # no UNIQUE: the broken way
    return app


def balance(app: App) -> int:
    return int(db_execute(app, "SELECT balance FROM accounts")[0][0])


def charges(app: App) -> int:
    return int(db_execute(app, "SELECT count(*) FROM charges")[0][0])


def charge_in(tx: object, app: App) -> None:
    p = placeholder(app)
    tx.execute(f"UPDATE accounts SET balance = balance - 100 WHERE id = {p}", ("acme",))  # type: ignore[attr-defined]
    tx.execute("INSERT INTO charges VALUES (1)")  # type: ignore[attr-defined]


def run_all(app: App, ids: list[int], **options: Any) -> None:
    with stepped_worker(app, **options) as worker:
        worker.until(
            lambda: all(
                app.get_job(i).state in (JobState.DONE, JobState.DEAD)  # type: ignore[union-attr]
                for i in ids
            ),
            timeout=20,
        )


def test_c1_no_key_charges_five_times(bank: App) -> None:
    @bank.task
    def pay(ctx: sqljobs.JobContext) -> None:
        with ctx.transaction() as tx:
            charge_in(tx, bank)

    run_all(bank, [pay.enqueue().id for _ in range(DELIVERIES)])
    assert (charges(bank), balance(bank)) == (5, 9500)


def test_c2_a_fresh_uuid_per_delivery_protects_nothing(bank: App) -> None:
    @bank.task
    def pay(ctx: sqljobs.JobContext) -> None:
        with ctx.transaction() as tx:
            charge_in(tx, bank)

    handles = [pay.with_options(key=str(uuid.uuid4())).enqueue() for _ in range(DELIVERIES)]
    assert all(h.created for h in handles), "every delivery looked new"
    run_all(bank, [h.id for h in handles])
    assert (charges(bank), balance(bank)) == (5, 9500)


@pytest.mark.parametrize("url", ["postgres"], indirect=True)
def test_c3_check_then_insert_lets_concurrent_deliveries_through(bank: App) -> None:
    racers = 10
    checked = threading.Barrier(racers)  # every delivery checks before any inserts
    p = placeholder(bank)

    @bank.task(lease=30)
    def pay(ctx: sqljobs.JobContext) -> None:
        with ctx.transaction() as tx:
            seen = tx.execute(
                f"SELECT count(*) FROM loose_markers WHERE key = {p}", ("order-1001:pay",)
            ).fetchone()[0]
            checked.wait(10)
            if not seen:  # the broken rule: an if instead of a constraint
                tx.execute(f"INSERT INTO loose_markers VALUES ({p})", ("order-1001:pay",))
                charge_in(tx, bank)

    ids = [pay.enqueue().id for _ in range(racers)]
    run_all(bank, ids, concurrency=racers)
    assert charges(bank) > 1, "check-then-insert overcharged"


@pytest.mark.parametrize("url", ["sqlite"], indirect=True)
def test_c3_on_sqlite_the_race_is_staged_with_separate_checks(bank: App) -> None:
    """SQLite serialises write transactions, so the race happens between a check made in
    one transaction and an insert made in the next, as naive code does."""
    racers = 10
    checked = threading.Barrier(racers)
    p = placeholder(bank)

    @bank.task(lease=30)
    def pay(ctx: sqljobs.JobContext) -> None:
        seen = db_execute(
            bank, f"SELECT count(*) FROM loose_markers WHERE key = {p}", params=("order-1001:pay",)
        )[0][0]
        checked.wait(10)
        if not seen:
            with ctx.transaction() as tx:
                tx.execute(f"INSERT INTO loose_markers VALUES ({p})", ("order-1001:pay",))
                charge_in(tx, bank)

    ids = [pay.enqueue().id for _ in range(racers)]
    run_all(bank, ids, concurrency=racers)
    assert charges(bank) > 1, "check-then-insert overcharged"


def test_c4_a_unique_marker_charges_once(bank: App) -> None:
    @bank.task
    def pay(ctx: sqljobs.JobContext) -> None:
        with ctx.transaction() as tx:
            if sqljobs.idempotent(tx, "order-1001:pay"):
                charge_in(tx, bank)

    run_all(bank, [pay.enqueue().id for _ in range(DELIVERIES)], concurrency=DELIVERIES)
    assert (charges(bank), balance(bank)) == (1, 9900)
    assert db_execute(bank, "SELECT count(*) FROM sqljobs_idempotency")[0][0] == 1


def test_c4_the_enqueue_key_itself_keeps_one_job(bank: App) -> None:
    @bank.task
    def pay(ctx: sqljobs.JobContext) -> None:
        with ctx.transaction() as tx:
            charge_in(tx, bank)

    handles = [pay.with_options(key="order-1001:pay").enqueue() for _ in range(DELIVERIES)]
    assert len({h.id for h in handles}) == 1 and [h.created for h in handles][1:] == [False] * 4
    run_all(bank, [handles[0].id])
    assert (charges(bank), balance(bank)) == (1, 9900)


def test_c5_a_marker_committed_before_the_charge_loses_the_job(bank: App) -> None:
    attempts: list[int] = []

    @bank.task(retry=Retry(max_attempts=3, base=0))
    def pay(ctx: sqljobs.JobContext) -> None:
        attempts.append(ctx.attempt)
        fresh = db_execute(bank, "SELECT count(*) FROM sqljobs_idempotency")[0][0] == 0
        if fresh:  # the broken order: the marker commits on its own, first
            with bank.backend.job_transaction() as tx:
                sqljobs.idempotent(tx, "order-1001:pay")
            raise ConnectionError("gateway down")  # the charge fails after the marker
        # the retry sees the marker and skips: "already done"

    job = pay.enqueue()
    run_all(bank, [job.id])
    final = bank.get_job(job.id)
    assert final is not None and final.state is JobState.DONE and attempts == [1, 2]
    assert (charges(bank), balance(bank)) == (0, 10000), "job done, money never moved: lost"


def test_c6_marker_and_charge_in_one_transaction_charge_exactly_once(bank: App) -> None:
    attempts: list[int] = []

    @bank.task(retry=Retry(max_attempts=5, base=0))
    def pay(ctx: sqljobs.JobContext) -> None:
        attempts.append(ctx.attempt)
        with ctx.transaction() as tx:
            if sqljobs.idempotent(tx, "order-1001:pay"):
                charge_in(tx, bank)
                if ctx.attempt == 1:
                    raise ConnectionError("gateway down")  # rolls back marker and charge

    ids = [pay.enqueue().id for _ in range(DELIVERIES)]
    run_all(bank, ids)
    assert (charges(bank), balance(bank)) == (1, 9900)
    assert all(bank.get_job(i).state is JobState.DONE for i in ids)  # type: ignore[union-attr]


def test_idempotent_works_outside_jobs_and_its_keys_expire(app: App) -> None:
    with app.backend.job_transaction() as tx:  # e.g. an HTTP handler's Idempotency-Key
        assert sqljobs.idempotent(tx, "request-42", ttl=0.0)
        assert not sqljobs.idempotent(tx, "request-42")
        assert sqljobs.idempotent(tx, "request-43")
    from sqljobs.maintenance import Pruner

    Pruner(app.backend, retention=0).run_once()
    keys = [r[0] for r in db_execute(app, "SELECT key FROM sqljobs_idempotency ORDER BY key")]
    assert keys == ["request-43"], "the expired key was pruned, the one without ttl kept"


def test_a_marker_in_a_job_transaction_is_stamped_by_the_apps_clock(url: str) -> None:
    """The pruner compares ``ttl`` with the App's clock, so the marker is stamped by it."""
    then = 1_900_000_000.0
    app = App(url, clock=lambda: then)
    with app.backend.job_transaction() as tx:
        assert sqljobs.idempotent(tx, "request-44", ttl=60)
    (created, expires) = db_execute(
        app,
        "SELECT created_at, expires_at FROM sqljobs_idempotency",
        "SELECT extract(epoch FROM created_at)::float8, extract(epoch FROM expires_at)::float8 "
        "FROM sqljobs_idempotency",
    )[0]
    assert (created, expires) == (then, then + 60)


def test_a_marker_on_a_connection_the_user_opened_uses_its_drivers_dialect(url: str) -> None:
    """No App in sight: the driver says which statement, the wall clock stamps it."""
    App(url).migrate()
    if is_pg(url):
        import psycopg

        conn: Any = psycopg.connect(url)
    else:
        import sqlite3

        conn = sqlite3.connect(url.removeprefix("sqlite:///"))
    try:
        before = time.time()
        assert sqljobs.idempotent(conn, "request-45")
        assert not sqljobs.idempotent(conn, "request-45")
        conn.commit()
    finally:
        conn.close()
    (created,) = db_execute(
        App(url),
        "SELECT created_at FROM sqljobs_idempotency",
        "SELECT extract(epoch FROM created_at)::float8 FROM sqljobs_idempotency",
    )[0]
    assert before <= created <= time.time()


# -- key scopes ------------------------------------------------------------------------


def _finish(app: App, job_id: int) -> None:
    with stepped_worker(app) as worker:
        worker.until(lambda: app.get_job(job_id).state is JobState.DONE)  # type: ignore[union-attr]


def test_a_retained_key_refuses_a_late_duplicate_after_completion(app: App) -> None:
    @app.task
    def t() -> None: ...

    first = t.with_options(key="report:acme").enqueue()
    _finish(app, first.id)
    late = t.with_options(key="report:acme").enqueue()
    assert not late.created and late.id == first.id


def test_an_active_key_only_covers_pending_and_running_jobs(app: App) -> None:
    @app.task
    def t() -> None: ...

    first = t.with_options(key="sync:acme", key_scope="active").enqueue()
    again = t.with_options(key="sync:acme", key_scope="active").enqueue()
    assert not again.created and again.id == first.id
    _finish(app, first.id)
    later = t.with_options(key="sync:acme", key_scope="active").enqueue()
    assert later.created and later.id != first.id
    old = app.get_job(first.id)
    assert old is not None and old.key is None
    assert db_execute(
        app, "SELECT released_key FROM sqljobs_jobs WHERE id = ?", params=(first.id,)
    ) == [("sync:acme",)]


def test_a_key_held_for_a_window_after_completion(app: App) -> None:
    @app.task
    def t() -> None: ...

    first = t.with_options(key="digest:acme", key_scope=3600).enqueue()
    _finish(app, first.id)
    assert not t.with_options(key="digest:acme", key_scope=3600).enqueue().created
    db_execute(
        app,
        "UPDATE sqljobs_jobs SET finished_at = finished_at - 7200",
        "UPDATE sqljobs_jobs SET finished_at = finished_at - interval '2 hours'",
    )
    assert t.with_options(key="digest:acme", key_scope=3600).enqueue().created
    with pytest.raises(sqljobs.ConfigurationError, match="key_scope"):
        t.with_options(key="x", key_scope="forever")  # type: ignore[arg-type]


# -- external effects ------------------------------------------------------------------


class Gateway:
    """A payment gateway that honours idempotency keys, and can time out after charging."""

    def __init__(self) -> None:
        self.charged: dict[str, int] = {}
        self.time_out_after_charging = 0

    def charge(self, key: str, amount: int) -> dict[str, object]:
        self.charged.setdefault(key, amount)
        if self.time_out_after_charging:
            self.time_out_after_charging -= 1
            raise TimeoutError("gateway did not answer")
        return {"charge": key, "amount": amount}

    def find(self, key: str) -> dict[str, object] | None:
        return {"charge": key, "amount": self.charged[key]} if key in self.charged else None


def test_an_external_effect_survives_a_timeout_via_reconciliation(app: App) -> None:
    gateway = Gateway()
    gateway.time_out_after_charging = 1
    calls: list[str] = []

    @app.task(retry=Retry(max_attempts=50, base=0))
    def charge(ctx: sqljobs.JobContext, order: str) -> None:
        def call(key: str) -> dict[str, object]:
            calls.append(key)
            return gateway.charge(key, 100)

        sqljobs.perform_once(
            ctx, f"order-{order}:charge", call, reconcile=gateway.find, retry_after=0.05
        )

    ids = [charge.enqueue("1001").id for _ in range(3)]  # three deliveries
    run_all(app, ids)
    assert calls == ["order-1001:charge"], "called once; the retry reconciled instead"
    assert gateway.charged == {"order-1001:charge": 100}
    assert all(app.get_job(i).state is JobState.DONE for i in ids)  # type: ignore[union-attr]
    assert db_execute(app, "SELECT state FROM sqljobs_effects") == [("done",)]


def test_an_uncertain_effect_without_reconciliation_is_not_retried_blindly(app: App) -> None:
    gateway = Gateway()
    gateway.time_out_after_charging = 1
    calls: list[str] = []

    def call(key: str) -> dict[str, object]:
        calls.append(key)
        return gateway.charge(key, 100)

    @app.task(retry=Retry(max_attempts=5, base=0))
    def charge(ctx: sqljobs.JobContext) -> None:
        sqljobs.perform_once(ctx, "order-7:charge", call)

    job_id = charge.enqueue().id
    run_all(app, [job_id])
    job = app.get_job(job_id)
    assert job is not None and job.state is JobState.DEAD and len(calls) == 1
    assert "may have happened" in (job.last_error or "")
    assert db_execute(app, "SELECT state FROM sqljobs_effects") == [("unknown",)]


def test_a_definite_failure_is_retried_and_then_charges_once(app: App) -> None:
    outcomes = iter([ValueError("card declined, try again"), None])
    gateway = Gateway()

    def call(key: str) -> dict[str, object]:
        error = next(outcomes)
        if error:
            raise error
        return gateway.charge(key, 100)

    @app.task(retry=Retry(max_attempts=3, base=0))
    def charge(ctx: sqljobs.JobContext) -> None:
        sqljobs.perform_once(ctx, "order-9:charge", call)

    job_id = charge.enqueue().id
    run_all(app, [job_id])
    job = app.get_job(job_id)
    assert job is not None and job.state is JobState.DONE and job.attempts == 2
    assert gateway.charged == {"order-9:charge": 100}
