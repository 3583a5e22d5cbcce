"""The enqueue API: handles, keys, options, payload checks, URLs, transactions."""

from __future__ import annotations

import datetime as dt
import multiprocessing
import sqlite3
from pathlib import Path

import pytest

import sqljobs
from sqljobs import App, ConfigurationError, PayloadError


def test_enqueue_returns_a_handle_and_stores_the_call(app: App) -> None:
    @app.task(queue="reports", lease=30, priority=2)
    def send_report(tenant: str, day: str) -> None: ...

    handle = send_report.enqueue("acme", day="2026-12-01")
    assert handle.created and handle.id > 0
    job = handle.job()
    assert job is not None
    assert (job.task, job.queue, job.priority, job.state) == (
        "send_report",
        "reports",
        2,
        "pending",
    )
    assert (job.args, job.kwargs) == (["acme"], {"day": "2026-12-01"})


def test_a_second_enqueue_with_the_same_key_returns_the_existing_job(app: App) -> None:
    @app.task
    def pay(order_id: str) -> None: ...

    first = pay.with_options(key="order-1001:pay").enqueue("1001")
    second = pay.with_options(key="order-1001:pay").enqueue("1001")
    by_name = app.enqueue("pay", args=["1001"], key="order-1001:pay", known=False)
    assert first.created and not second.created and not by_name.created
    assert first.id == second.id == by_name.id
    assert app.stats().total("pending") == 1


def _enqueue_same_key(url: str, start: multiprocessing.synchronize.Event) -> int:
    app = App(url)
    start.wait()
    return app.enqueue("pay", args=["1001"], key="order-1001:pay", known=False).id


@pytest.mark.processes
def test_concurrent_enqueues_of_one_key_from_processes_create_one_job(url: str) -> None:
    App(url).migrate()
    ctx = multiprocessing.get_context("spawn")
    start = ctx.Manager().Event()
    with ctx.Pool(6) as pool:
        results = [pool.apply_async(_enqueue_same_key, (url, start)) for _ in range(12)]
        start.set()
        ids = {r.get(timeout=60) for r in results}
    assert len(ids) == 1
    assert App(url).stats().total("pending") == 1


def test_options_delay_run_at_priority_queue(app: App) -> None:
    @app.task
    def t() -> None: ...

    before = app.clock()
    delayed = t.with_options(delay=60).enqueue().job()
    assert delayed is not None and delayed.run_at >= before + 60
    at = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)
    scheduled = t.with_options(run_at=at, priority=9, queue="q2").enqueue().job()
    assert scheduled is not None
    assert (scheduled.run_at, scheduled.priority, scheduled.queue) == (at.timestamp(), 9, "q2")
    with pytest.raises(ConfigurationError, match="either delay or run_at"):
        t.with_options(delay=1, run_at=at)
    with pytest.raises(ConfigurationError, match="aware"):
        t.with_options(run_at=dt.datetime(2030, 1, 1))


def test_enqueue_many_is_one_call_with_tuples_and_dicts(app: App) -> None:
    @app.task
    def send_report(tenant: str, day: str) -> None: ...

    handles = send_report.enqueue_many(
        [("acme", "2026-12-01"), {"tenant": "globex", "day": "2026-12-01"}]
    )
    assert [h.created for h in handles] == [True, True]
    jobs = [h.job() for h in handles]
    assert [(j.args, j.kwargs) for j in jobs if j] == [
        (["acme", "2026-12-01"], {}),
        ([], {"tenant": "globex", "day": "2026-12-01"}),
    ]
    with pytest.raises(PayloadError, match="call 0"):
        send_report.enqueue_many(["acme"])


def test_non_json_arguments_fail_at_enqueue_naming_the_argument(app: App) -> None:
    @app.task
    def send_report(tenant: str, day: object) -> None: ...

    with pytest.raises(PayloadError, match=r"argument 'day' of task 'send_report'"):
        send_report.enqueue("acme", dt.date(2026, 12, 1))
    with pytest.raises(PayloadError, match=r"argument 'day'"):
        send_report.enqueue("acme", day={1, 2})
    with pytest.raises(PayloadError, match="do not match"):
        send_report.enqueue("acme")  # type: ignore[call-arg]  # refused at run time too
    assert app.stats().total("pending") == 0


def test_a_big_enqueue_many_stores_all_in_order_or_nothing(app: App) -> None:
    """Past one statement's worth (PostgreSQL pipelines chunks of 1,000 while it builds the
    next), the batch is still one transaction: every job in call order, or none at all."""

    @app.task
    def t(i: object) -> None: ...

    calls: list[tuple[object]] = [(i,) for i in range(2500)]
    calls[2200] = (dt.date(2026, 12, 1),)  # fails when chunk 3 is built, after 2 were sent
    with pytest.raises(PayloadError, match=r"argument 'i' of task"):
        t.enqueue_many(calls)
    assert app.stats().total("pending") == 0, "a failed batch left jobs behind"
    handles = t.enqueue_many([(i,) for i in range(2500)])
    ids = [h.id for h in handles]
    assert len(set(ids)) == 2500 and ids == sorted(ids) and all(h.created for h in handles)
    assert app.stats().total("pending") == 2500
    last = handles[-1].job()
    assert last is not None and last.args == [2499]


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ("mysql://root@localhost/db", "unsupported database URL scheme 'mysql'"),
        ("sqlite://jobs.db", "three slashes"),
        ("sqlite:///:memory:", "names no file"),
        ("jobs.db", "malformed database URL"),
        ("postgresql://", "names no host or database"),
    ],
)
def test_a_malformed_url_fails_at_definition(bad: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        App(bad)


def test_default_url_comes_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("SQLJOBS_URL", f"sqlite:///{tmp_path / 'env.db'}")
    assert App().url.endswith("env.db")
    monkeypatch.delenv("SQLJOBS_URL")
    assert App().url == "sqlite:///sqljobs.db"


def test_bad_task_options_fail_at_definition(app: App) -> None:
    with pytest.raises(ConfigurationError, match="lease"):
        app.task(lease=-1)(lambda: None)
    with pytest.raises(ConfigurationError, match="max_attempts"):
        sqljobs.Retry(max_attempts=0)

    @app.task
    def once() -> None: ...

    with pytest.raises(ConfigurationError, match="already registered"):
        app.task(name="once")(lambda: None)


@pytest.mark.parametrize("url", ["sqlite"], indirect=True)  # PostgreSQL: test_postgres.py
def test_transactional_enqueue_is_visible_only_after_the_caller_commits(app: App) -> None:

    @app.task
    def t() -> None: ...

    app.migrate()
    conn = sqlite3.connect(app.url.removeprefix("sqlite:///"), isolation_level=None)
    conn.execute("BEGIN")
    handle = t.with_options(connection=conn).enqueue()
    assert app.get_job(handle.id) is None
    conn.execute("ROLLBACK")
    assert app.get_job(handle.id) is None
    conn.execute("BEGIN")
    handle = t.with_options(connection=conn).enqueue()
    conn.execute("COMMIT")
    assert app.get_job(handle.id) is not None
