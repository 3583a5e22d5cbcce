"""A business key outlives its job's row by a period of its own (guarantee 4), and
retention keeps dead jobs as long as it says (guarantee 5): on every engine, with the test
clock standing in for days."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest

import sqljobs
import sqljobs.enqueue
from sqljobs import App, ConfigurationError, JobNotFound, Retention
from sqljobs.enqueue import schedule_job
from sqljobs.maintenance import Pruner
from sqljobs.schedules import define_schedule
from sqljobs.testing import Clock

from .conftest import db_execute, is_pg, wait_until

DAY = 86400.0


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def app(url: str, clock: Clock) -> Iterator[App]:
    application = App(url, clock=clock)
    yield application
    application.close()


def _end(app: App, job_id: int, clock: Clock, state: str = "done") -> None:
    """End a job as a worker would have, at the clock's time."""
    db_execute(
        app,
        "UPDATE sqljobs_jobs SET state = ?, finished_at = ? WHERE id = ?",
        "UPDATE sqljobs_jobs SET state = ?, finished_at = to_timestamp(?) WHERE id = ?",
        (state, clock(), job_id),
    )


def _prune(app: App) -> int:
    return Pruner(app.backend, app.retention).run_once()


def _spent_keys(app: App) -> list[str]:
    return [k for (k,) in db_execute(app, "SELECT key FROM sqljobs_spent_keys ORDER BY key")]


def test_a_key_refuses_a_duplicate_for_a_week_after_its_job_was_pruned(
    app: App, clock: Clock
) -> None:
    @app.task
    def pay(order: str) -> None: ...

    first = pay.with_options(key="order-1001:pay").enqueue("1001")
    _end(app, first.id, clock)
    clock.advance(timedelta(hours=25))
    assert _prune(app) == 1 and app.get_job(first.id) is None
    again = pay.with_options(key="order-1001:pay").enqueue("1001")
    assert (again.id, again.created) == (first.id, False)
    clock.advance(timedelta(days=7) - timedelta(seconds=1))
    _prune(app)
    assert not pay.with_options(key="order-1001:pay").enqueue("1001").created
    clock.advance(2)
    _prune(app)
    assert _spent_keys(app) == []
    later = pay.with_options(key="order-1001:pay").enqueue("1001")
    assert later.created and later.id != first.id


def test_a_handle_of_a_pruned_job_says_it_was_pruned_and_its_key_is_kept(
    app: App, clock: Clock
) -> None:
    @app.task
    def pay(order: str) -> int:
        return 1

    first = pay.with_options(key="order-7:pay").enqueue("7")
    _end(app, first.id, clock, "dead")
    clock.advance(timedelta(days=8))
    _prune(app)
    again = pay.with_options(key="order-7:pay").enqueue("7")
    assert not again.created
    with pytest.raises(JobNotFound, match=r"ended dead and was pruned at .*'order-7:pay'"):
        again.refresh()
    with pytest.raises(JobNotFound, match="its result and history went with its row"):
        again.result(timeout=1)
    with pytest.raises(JobNotFound, match="never created, or pruned"):
        app.job(first.id + 1000).refresh()


def test_each_task_and_enqueue_sets_how_long_its_keys_outlive_their_jobs(
    app: App, clock: Clock
) -> None:
    @app.task(key_retention=timedelta(days=30))
    def invoice(n: int) -> None: ...

    @app.task(key_retention=0)
    def ping(n: int) -> None: ...

    month = invoice.with_options(key="inv-1").enqueue(1)
    ever = invoice.with_options(key="inv-2", key_retention=None).enqueue(2)
    brief = ping.with_options(key="ping-1").enqueue(1)
    named = app.enqueue("invoice", [3], key="inv-3", key_retention=3600)
    for handle in (month, ever, brief, named):
        _end(app, handle.id, clock)
    clock.advance(timedelta(days=2))
    assert _prune(app) == 4
    assert _spent_keys(app) == ["inv-1", "inv-2", "inv-3"]  # ping's key ended with its row
    assert ping.with_options(key="ping-1").enqueue(1).created
    clock.advance(3601)
    assert app.enqueue("invoice", [3], key="inv-3").created
    clock.advance(timedelta(days=29))
    _prune(app)
    assert not invoice.with_options(key="inv-1").enqueue(1).created
    clock.advance(timedelta(days=1))
    assert invoice.with_options(key="inv-1").enqueue(1).created
    clock.advance(timedelta(days=3650))
    _prune(app)
    again = invoice.with_options(key="inv-2").enqueue(2)
    assert (again.id, again.created) == (ever.id, False)


def test_the_apps_retention_sets_the_keys_period_for_tasks_that_do_not(
    url: str, clock: Clock
) -> None:
    app = App(url, clock=clock, retention=Retention(keys=timedelta(days=2)))

    @app.task
    def t() -> None: ...

    first = t.with_options(key="k").enqueue()
    _end(app, first.id, clock)
    clock.advance(timedelta(days=2))
    _prune(app)
    assert not t.with_options(key="k").enqueue().created
    clock.advance(timedelta(days=2))
    assert t.with_options(key="k").enqueue().created


def test_a_key_scope_duration_is_kept_whole_when_the_row_goes_first(app: App, clock: Clock) -> None:
    @app.task
    def digest(day: str) -> None: ...

    held = digest.with_options(key="digest:1", key_scope=timedelta(days=30)).enqueue("1")
    active = digest.with_options(key="digest:2", key_scope="active").enqueue("2")
    for handle in (held, active):
        _end(app, handle.id, clock)
    clock.advance(timedelta(days=2))
    assert _prune(app) == 2
    assert _spent_keys(app) == ["digest:1"]
    assert not digest.with_options(key="digest:1").enqueue("1").created
    assert digest.with_options(key="digest:2").enqueue("2").created
    clock.advance(timedelta(days=28))
    assert digest.with_options(key="digest:1").enqueue("1").created


def test_batches_transactions_and_dependent_jobs_honour_kept_keys(app: App, clock: Clock) -> None:
    @app.task
    def t(n: int) -> None: ...

    old = [t.with_options(key=f"k{i}").enqueue(i) for i in range(4)]
    for handle in old:
        _end(app, handle.id, clock)
    clock.advance(timedelta(days=2))
    _prune(app)
    live = t.with_options(key="live").enqueue(9)

    # one batch: a kept key, a new key, a key of a live job, and the same new key twice
    now = app.clock()
    sigs = [t.with_options(key=k).s(0) for k in ("k0", "new", "live", "new")]
    got = sqljobs.enqueue.insert(app, [s.new_job(now) for s in sigs])
    assert [(h.id, h.created) for h in got[:1]] == [(old[0].id, False)]
    assert got[1].created and (got[2].id, got[2].created) == (live.id, False)
    assert (got[3].id, got[3].created) == (got[1].id, False)

    parent = t.enqueue(5)
    child = t.with_options(key="k1", after=[parent]).enqueue(1)
    assert (child.id, child.created) == (old[1].id, False)

    if is_pg(app):
        import psycopg

        with psycopg.connect(app.url) as conn:
            handle = t.with_options(key="k2", connection=conn).enqueue(2)

        async def on_async_connection() -> sqljobs.JobHandle:
            async with await psycopg.AsyncConnection.connect(app.url) as conn:
                return await t.with_options(key="k3", connection=conn).enqueue_async(3)

        in_async = asyncio.run(on_async_connection())
        assert (in_async.id, in_async.created) == (old[3].id, False)
    else:
        lite = sqlite3.connect(app.url.removeprefix("sqlite:///"))
        with lite:
            handle = t.with_options(key="k2", connection=lite).enqueue(2)
        lite.close()
    assert (handle.id, handle.created) == (old[2].id, False)


def test_a_schedules_tick_keys_end_with_their_jobs(app: App) -> None:
    """A tick runs once because its claim moves the schedule row on; keeping every tick's
    key for a week would be a row per tick."""

    @app.task
    def refresh() -> None: ...

    schedule = define_schedule("refresh", task=refresh, every=0.2)
    job = schedule_job(app, schedule, "schedule:refresh:t", app.clock())
    assert job.key_retention == 0


def test_key_retention_is_checked_where_it_is_given(app: App) -> None:
    @app.task
    def t() -> None: ...

    for bad in (-1, "forever", float("nan"), True):
        with pytest.raises(ConfigurationError, match=r"with_options\(key_retention=\.\.\.\)"):
            t.with_options(key="k", key_retention=bad)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match=r"@app.task\(key_retention=\.\.\.\)"):
        app.task(key_retention=-5)
    with pytest.raises(ConfigurationError, match="use None to keep the key for ever"):
        t.with_options(key="k", key_retention=1e300)
    with pytest.raises(ConfigurationError, match="applies to keys with key_scope='retained'"):
        t.with_options(key="k", key_scope="active", key_retention=60)
    with pytest.raises(ConfigurationError, match=r"Retention\(keys=\.\.\.\)"):
        Retention(keys=-1)


# -- how long dead jobs are kept (guarantee 5) ------------------------------------------


@pytest.mark.parametrize("retention", [0, timedelta(days=30)])
def test_dead_jobs_are_kept_as_long_as_the_retention_says(
    url: str, clock: Clock, retention: float | timedelta
) -> None:
    app = App(url, clock=clock, retention=retention)
    ids = [app.enqueue("t", known=False).id for _ in range(3)]
    for job_id, state in zip(ids, ("dead", "cancelled", "done"), strict=True):
        _end(app, job_id, clock, state)
    clock.advance(timedelta(days=8))
    assert _prune(app) == 0
    assert [app.get_job(i) is not None for i in ids] == [True, True, True]
    if retention:
        clock.advance(timedelta(days=23))
        assert _prune(app) == 3


def test_the_retention_as_described_says_how_long_dead_jobs_and_keys_are_kept(
    url: str,
) -> None:
    assert App(url, retention=0).retention.describe() == (
        "done forever, cancelled forever, dead forever, keys forever, events forever"
    )
    assert (
        App(url, retention=None).retention.describe() == App(url, retention=0).retention.describe()
    )
    assert App(url, retention=timedelta(days=30)).retention.describe() == (
        "done 30 d, cancelled 30 d, dead 30 d, keys 7 d past their jobs, events 7 d"
    )
    assert App(url, retention=3600).retention.describe() == (
        "done 1 h, cancelled 1 h, dead 7 d, keys 7 d past their jobs, events 7 d"
    )
    assert App(url).retention.describe() == (
        "done 1 d, cancelled 7 d, dead 7 d, keys 7 d past their jobs, events 7 d"
    )


# -- an enqueue racing the prune of its key's job (PostgreSQL) ---------------------------


def _prune_held(app: App, conn: Any, job_id: int, clock: Clock) -> None:
    """Run the pruner's statement for ``job_id`` in ``conn``'s transaction, left open: the
    row is deleted and its key kept, neither committed."""
    found = app.get_job(job_id)
    assert found is not None
    params = {
        "before": clock(),
        "limit": 1000,
        "state": "done",
        "queue": found.queue,
        "now": clock(),
        "key_retention": 7 * DAY,
    }
    (n,) = conn.execute(app.backend.sql["prune_finished"], params).fetchone()  # type: ignore[attr-defined]
    assert n == 1


def _blocked_by(app: App, holder: Any) -> Callable[[], list[int]]:
    import psycopg

    def blocked() -> list[int]:
        with psycopg.connect(app.url, autocommit=True) as admin:
            return [pid for (pid,) in admin.execute(
                "SELECT pid FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))",
                (holder.info.backend_pid,),
            ).fetchall()]  # fmt: skip

    return blocked


@pytest.mark.parametrize("url", ["postgres"], indirect=True)
@pytest.mark.parametrize("path", ["own", "connection", "async", "after", "after-parent"])
def test_an_enqueue_that_waited_on_the_prune_of_its_keys_job_is_answered_by_the_kept_key(
    app: App, clock: Clock, path: str
) -> None:
    """The keyed enqueue's statement takes its snapshot before the prune commits, so it
    cannot see the key the prune keeps; its insert meets the row being deleted, waits for
    the prune and, the row gone, would insert a second job. Here the prune is held open
    by the test until the enqueue is seen waiting on it (on the row, or, for ``after``
    enqueues, on a parent's row lock taken between their spent-key check and insert)."""
    import psycopg

    @app.task
    def pay(order: str) -> None: ...

    parent = pay.enqueue("parent")
    first = pay.with_options(key="order-9:pay").enqueue("9")
    _end(app, first.id, clock)
    clock.advance(timedelta(hours=25))
    opts: dict[str, Any] = {"key": "order-9:pay"}
    if path.startswith("after"):
        opts["after"] = [parent]

    def enqueue() -> sqljobs.JobHandle:
        if path == "connection":
            with psycopg.connect(app.url) as conn:
                return pay.with_options(**opts, connection=conn).enqueue("9")
        if path == "async":

            async def on_async_connection() -> sqljobs.JobHandle:
                async with await psycopg.AsyncConnection.connect(app.url) as conn:
                    return await pay.with_options(**opts, connection=conn).enqueue_async("9")

            return asyncio.run(on_async_connection())
        return pay.with_options(**opts).enqueue("9")

    got: list[sqljobs.JobHandle] = []
    errors: list[BaseException] = []

    def target() -> None:
        try:
            got.append(enqueue())
        except BaseException as exc:  # asserted below
            errors.append(exc)

    with psycopg.connect(app.url) as pruning:
        _prune_held(app, pruning, first.id, clock)
        if path == "after-parent":  # the enqueue checks spent keys, then waits here
            pruning.execute("SELECT 1 FROM sqljobs_jobs WHERE id = %s FOR UPDATE", (parent.id,))
        thread = threading.Thread(target=target)
        thread.start()
        wait_until(_blocked_by(app, pruning), what="the enqueue waiting on the prune")
        pruning.commit()
    thread.join(timeout=10)
    assert not thread.is_alive() and not errors, errors
    (again,) = got
    assert (again.id, again.created) == (first.id, False)
    assert (
        db_execute(app, "SELECT id FROM sqljobs_jobs WHERE key = ?", params=("order-9:pay",)) == []
    )
    assert _spent_keys(app) == ["order-9:pay"]


@pytest.mark.parametrize("url", ["postgres"], indirect=True)
def test_a_repeatable_read_transaction_that_missed_a_kept_key_is_refused(
    app: App, clock: Clock
) -> None:
    """A transaction at REPEATABLE READ reads one snapshot throughout: a key the pruner
    kept after it began is invisible to it for good. Its enqueue cannot be answered
    with the kept key, so it fails as PostgreSQL fails a conflict at that level, to be
    run again, rather than insert a second job."""
    import psycopg

    @app.task
    def pay(order: str) -> None: ...

    first = pay.with_options(key="order-5:pay").enqueue("5")
    _end(app, first.id, clock)
    clock.advance(timedelta(hours=25))
    with psycopg.connect(app.url) as conn:
        conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        conn.execute("SELECT 1 FROM sqljobs_jobs LIMIT 1")  # the snapshot is taken
        assert _prune(app) == 1
        with pytest.raises(sqljobs.BackendError, match=r"repeatable read.*run the transaction"):
            pay.with_options(key="order-5:pay", connection=conn).enqueue("5")
        conn.rollback()
        again = pay.with_options(key="order-5:pay", connection=conn).enqueue("5")
        conn.commit()
    assert (again.id, again.created) == (first.id, False)
    assert (
        db_execute(app, "SELECT id FROM sqljobs_jobs WHERE key = ?", params=("order-5:pay",)) == []
    )
