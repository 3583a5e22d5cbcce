"""Debounce: enqueues with one key while its job is pending fold into that job, the last
write winning, and a claimed job lets the next enqueue open a new window; on every
engine, under concurrent enqueues too."""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from sqljobs import App, ConfigurationError, Job
from sqljobs.testing import Clock
from sqljobs.url import url_options

from .conftest import db_execute, is_pg


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def app(url: str, clock: Clock) -> Iterator[App]:
    application = App(url, clock=clock)
    yield application
    application.close()


def _job(app: App, job_id: int) -> Job:
    job = app.get_job(job_id)
    assert job is not None
    return job


def _jobs(app: App, key_like: str = "%") -> list[tuple[Any, ...]]:
    return db_execute(
        app,
        "SELECT id, state, payload FROM sqljobs_jobs WHERE coalesce(key, released_key) "
        "LIKE ? ORDER BY id",
        None,
        (key_like,),
    )


def test_enqueues_while_pending_move_the_start_and_replace_the_arguments(
    app: App, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="sqljobs")
    ran: list[int] = []

    @app.task
    def reindex(n: int) -> None:
        ran.append(n)

    app.migrate()
    debounced = reindex.with_options(key="reindex:42", debounce=30)
    first = debounced.enqueue(1)
    assert first.created
    start = clock()
    assert _job(app, first.id).run_at == pytest.approx(start + 30)

    clock.advance(10)
    second = debounced.enqueue(2)
    assert (second.id, second.created) == (first.id, False)
    job = _job(app, first.id)
    assert job.args == [2]
    assert job.run_at == pytest.approx(start + 40)

    clock.advance(timedelta(seconds=25))  # 35 s after the first call: not yet due
    third = reindex.with_options(key="reindex:42", debounce=timedelta(seconds=30)).enqueue(3)
    assert third.id == first.id
    assert _job(app, first.id).run_at == pytest.approx(start + 65)
    assert len(_jobs(app)) == 1
    assert _job(app, first.id).debounced == 2
    said = [r.getMessage() for r in caplog.records if "debounced by key" in r.getMessage()]
    assert said == [
        f"job {first.id} (reindex) enqueued, debounced by key 'reindex:42': starts 30 s after "
        "the latest enqueue with its key",
        f"job {first.id} (reindex) debounced by key 'reindex:42': new arguments, starts in 30 s",
        f"job {first.id} (reindex) debounced by key 'reindex:42': new arguments, starts in 30 s",
    ]

    app.run_until_empty()
    assert ran == [3]
    assert _job(app, first.id).state == "done"


def test_an_enqueue_after_the_job_was_claimed_opens_a_new_window(app: App) -> None:
    ran: list[str] = []

    @app.task
    def refresh(what: str) -> None:
        ran.append(what)
        if what == "first":  # this job is claimed (running): the key makes a new job
            again = refresh.with_options(key="refresh", debounce=5).enqueue("second")
            assert again.created

    app.migrate()
    first = refresh.with_options(key="refresh", debounce=5).enqueue("first")
    app.run_until_empty()
    assert ran == ["first", "second"]
    rows = _jobs(app)
    assert rows[0][0] == first.id
    assert [r[1] for r in rows] == ["done", "done"]


def test_a_debounced_enqueue_by_name_and_async(app: App) -> None:
    @app.task
    def note(text: str) -> None: ...

    app.migrate()
    one = app.enqueue("note", ["a"], key="note", debounce=1)
    two = app.enqueue("note", ["b"], key="note", debounce=1)
    assert (two.id, two.created) == (one.id, False)

    import asyncio

    three = asyncio.run(note.with_options(key="note", debounce=1).enqueue_async("c"))
    assert three.id == one.id
    assert _job(app, one.id).args == ["c"]


def test_debounce_refuses_what_it_cannot_mean(app: App) -> None:
    @app.task
    def t(x: int = 0) -> None: ...

    with pytest.raises(ConfigurationError, match="needs a key"):
        t.with_options(debounce=30)
    with pytest.raises(ConfigurationError, match="debounce"):
        t.with_options(key="k", debounce=-1)
    with pytest.raises(ConfigurationError, match="leave out delay and run_at"):
        t.with_options(key="k", debounce=5, delay=3)
    with pytest.raises(ConfigurationError, match="after="):
        t.with_options(key="k", debounce=5, after=[1])
    with pytest.raises(ConfigurationError, match="cannot be debounced"):
        app.group([t.with_options(key="k", debounce=5).s(1)])


def _raw_connection(app: App) -> Any:
    """A connection of the caller's own, in manual-commit mode."""
    if is_pg(app):
        import psycopg

        return psycopg.connect(url_options(app.url)[0])
    return sqlite3.connect(
        app.url.removeprefix("sqlite:///"), isolation_level="IMMEDIATE", timeout=30,
        check_same_thread=False,
    )  # fmt: skip


def test_concurrent_enqueues_leave_one_job_holding_the_last_commit(app: App) -> None:
    ran: list[tuple[int, int]] = []

    @app.task
    def rebuild(thread: int, n: int) -> None:
        ran.append((thread, n))

    app.migrate()
    threads, each = 8, 50
    ids: set[int] = set()
    committed: list[tuple[int, int]] = []
    commit_lock = threading.Lock()  # the order of commits, read exactly
    start = threading.Barrier(threads)
    errors: list[BaseException] = []

    def enqueue(thread: int) -> None:
        conn = _raw_connection(app)
        try:
            start.wait()
            for n in range(each):
                handle = rebuild.with_options(key="rebuild", debounce=60, connection=conn)
                got = handle.enqueue(thread, n).id
                with commit_lock:
                    conn.commit()
                    committed.append((thread, n))
                    ids.add(got)
        except BaseException as exc:
            errors.append(exc)
        finally:
            conn.close()

    workers = [threading.Thread(target=enqueue, args=(i,)) for i in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert not errors, errors
    assert len(committed) == threads * each
    (only,) = ids
    rows = _jobs(app)
    assert [(r[0], r[1]) for r in rows] == [(only, "pending")]
    job = _job(app, only)
    assert job.args == list(committed[-1])
    assert job.debounced == threads * each - 1

    app.run_until_empty()
    assert ran == [committed[-1]]
    assert [r[1] for r in _jobs(app)] == ["done"]
    assert app.stats().counts["default"]["pending"] == 0


def test_concurrent_enqueues_in_their_own_transactions_fold_into_one_job(app: App) -> None:
    @app.task
    def rebuild(thread: int, n: int) -> None: ...

    app.migrate()
    threads, each = 8, 50
    ids: list[int] = []
    start = threading.Barrier(threads)
    errors: list[BaseException] = []

    def enqueue(thread: int) -> None:
        try:
            start.wait()
            for n in range(each):
                ids.append(rebuild.with_options(key="own", debounce=60).enqueue(thread, n).id)
        except BaseException as exc:
            errors.append(exc)

    workers = [threading.Thread(target=enqueue, args=(i,)) for i in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert not errors, errors
    assert len(ids) == threads * each
    (only,) = set(ids)
    assert [(r[0], r[1]) for r in _jobs(app)] == [(only, "pending")]
    # the last commit of all is some thread's last enqueue: its arguments are kept
    job = _job(app, only)
    assert job.args[1] == each - 1
    assert job.debounced == threads * each - 1


def test_the_cli_enqueues_debounced(url: str) -> None:
    from .test_cli import sqljobs_cli

    sqljobs_cli(url, "migrate")
    base = ("enqueue", "reindex", "--remote", "--key", "reindex:7", "--debounce", "30")
    first = json.loads(sqljobs_cli(url, *base, "--args", "[1]").stdout)
    again = json.loads(sqljobs_cli(url, *base, "--args", "[2]").stdout)
    assert first["created"] and (again["id"], again["created"]) == (first["id"], False)
    shown = json.loads(sqljobs_cli(url, "jobs", "show", str(first["id"]), "--json").stdout)
    assert shown["args"] == [2] and shown["debounced"] == 1
    assert "1 time (arguments replaced" in sqljobs_cli(url, "jobs", "show", str(first["id"])).stdout
    refused = sqljobs_cli(url, "enqueue", "reindex", "--remote", "--debounce", "30", check=False)
    assert refused.returncode != 0 and "needs a key" in refused.stderr


@pytest.mark.parametrize("url", ["postgres"], indirect=True)
def test_a_debounced_enqueue_on_an_async_connection_joins_its_transaction(app: App) -> None:
    import asyncio

    import psycopg

    @app.task
    def note(text: str) -> None: ...

    app.migrate()

    async def enqueue_twice() -> tuple[int, int]:
        async with await psycopg.AsyncConnection.connect(url_options(app.url)[0]) as conn:
            bound = note.with_options(key="async", debounce=5, connection=conn)
            first = await bound.enqueue_async("a")
            second = await bound.enqueue_async("b")
            assert _jobs(app) == []  # not committed yet
            await conn.commit()
            assert first.created and not second.created
            return first.id, second.id

    first, second = asyncio.run(enqueue_twice())
    assert first == second
    job = _job(app, first)
    assert job.args == ["b"] and job.debounced == 1


def test_the_dashboard_shows_how_often_a_job_was_debounced(app: App) -> None:
    from starlette.testclient import TestClient

    from sqljobs.dashboard import create_app

    @app.task
    def reindex(n: int) -> None: ...

    app.migrate()
    debounced = reindex.with_options(key="page", debounce=60)
    job_id = debounced.enqueue(1).id
    for n in (2, 3):
        debounced.enqueue(n)
    client = TestClient(create_app(app), base_url="http://127.0.0.1")
    page = client.get(f"/jobs/{job_id}")
    assert page.status_code == 200
    assert "<dt>debounced</dt><dd>2 times (arguments replaced, start moved)</dd>" in page.text
