"""Enqueue from SQL: ``sqljobs.enqueue(...)`` on PostgreSQL (a trigger, a producer with no
sqljobs) and the documented ``INSERT INTO sqljobs_enqueue`` on SQLite, each run by a real
worker, woken by the engine's change signal, with bad input refused clearly."""

from __future__ import annotations

import os
import socket
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from sqljobs import App, JobState, Worker
from sqljobs.url import url_options

from .conftest import ROOT, wait_until, worker_thread

DOCS = Path(ROOT) / "docs" / "sql-enqueue.md"

SQLITE_ENQUEUE = """\
INSERT INTO sqljobs_enqueue (task, args, kwargs, key, run_at, queue, priority)
VALUES (:task, :args, :kwargs, :key, :run_at, :queue, :priority)"""
"""The statement docs/sql-enqueue.md gives SQLite producers, as written there."""

SQLITE_WAKE_FOLDER = "{database}-wake"


@pytest.fixture
def app(url: str) -> Iterator[App]:
    application = App(url)
    yield application
    application.close()


def _pg(app: App) -> psycopg.Connection[tuple[object, ...]]:
    return psycopg.connect(url_options(app.url)[0])


def _idle_and_listening(app: App, worker: Worker) -> None:
    """Past the worker's first claim and poll, with its LISTEN in place: from now on only
    a notification (or its poll a minute later) starts a job."""
    wait_until(lambda: worker.counters["due_checks"] >= 1, what="the worker's first poll")
    assert app.backend.notifier.wait_listening(10), "the worker never listened"


@pytest.mark.parametrize("url", ["postgres"], indirect=True)
def test_a_trigger_enqueues_on_insert_and_a_worker_runs_it(app: App) -> None:
    welcomed: list[int] = []
    seen = threading.Event()

    @app.task(queue="mail")
    def welcome(user_id: int) -> None:
        welcomed.append(user_id)
        if len(welcomed) == 2:
            seen.set()

    app.migrate()
    with _pg(app) as conn:
        conn.execute("CREATE TABLE users (id int PRIMARY KEY, email text)")
        conn.execute("""
            CREATE FUNCTION welcome_user() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                PERFORM sqljobs.enqueue('welcome', jsonb_build_array(NEW.id),
                                        key => 'welcome:' || NEW.id, queue => 'mail');
                RETURN NEW;
            END $$""")
        conn.execute(
            "CREATE TRIGGER users_welcome AFTER INSERT ON users "
            "FOR EACH ROW EXECUTE FUNCTION welcome_user()"
        )
        conn.commit()
        with conn.transaction():  # rolled back: neither the user nor the job exists
            conn.execute("INSERT INTO users VALUES (0, 'gone@example.com')")
            raise psycopg.Rollback
    # a worker that polls once a minute: the NOTIFY sent at commit is what wakes it
    with worker_thread(app, queues=["mail"], poll_interval=60.0) as worker:
        _idle_and_listening(app, worker)
        with _pg(app) as conn:
            conn.execute("INSERT INTO users VALUES (1, 'a@example.com'), (2, 'b@example.com')")
            conn.commit()
        assert seen.wait(10), "the worker was not woken by the trigger's enqueue"
    assert sorted(welcomed) == [1, 2]
    keys = {j.key for j in app.list_jobs()}
    assert keys == {"welcome:1", "welcome:2"}


@pytest.mark.parametrize("url", ["postgres"], indirect=True)
def test_a_producer_without_sqljobs_enqueues_with_keys_and_defaults(app: App) -> None:
    ran: list[tuple[str, str]] = []

    @app.task(queue="reports", priority=3, lease=12)
    def send_report(tenant: str, day: str = "today") -> None:
        ran.append((tenant, day))

    app.migrate()
    with worker_thread(app, queues=["reports"], poll_interval=60.0) as worker:
        _idle_and_listening(app, worker)
        # the worker recorded the task in the catalogue: the function reads its defaults
        wait_until(lambda: app.backend.task_info("send_report") is not None)
        with psycopg.connect(url_options(app.url)[0], autocommit=True) as raw:
            (first,) = raw.execute(
                """SELECT sqljobs.enqueue('send_report', '["acme"]'::jsonb,
                                          kwargs => '{"day": "2026-12-01"}'::jsonb,
                                          key => 'report:acme')"""
            ).fetchone() or (None,)
            (again,) = raw.execute(
                "SELECT sqljobs.enqueue('send_report', '[\"other\"]'::jsonb, key => 'report:acme')"
            ).fetchone() or (None,)
        assert isinstance(first, int) and again == first
        wait_until(lambda: ran == [("acme", "2026-12-01")], what="the worker runs it")
    job = app.get_job(first)
    assert job is not None and job.state is JobState.DONE
    assert (job.queue, job.priority, job.lease) == ("reports", 3, 12.0)
    assert len(app.list_jobs()) == 1


@pytest.mark.parametrize("url", ["postgres"], indirect=True)
def test_sql_enqueue_takes_run_at_queue_and_priority(app: App) -> None:
    app.migrate()
    with _pg(app) as conn:
        (job_id,) = conn.execute(
            """SELECT sqljobs.enqueue('later', run_at => now() + interval '1 hour',
                                      queue => 'slow', priority => -2)"""
        ).fetchone() or (None,)
        (now,) = conn.execute("SELECT extract(epoch FROM now())::float8").fetchone() or (None,)
        conn.commit()
    assert isinstance(job_id, int) and isinstance(now, float)
    job = app.get_job(job_id)
    assert job is not None
    assert (job.task, job.queue, job.priority, job.args) == ("later", "slow", -2, [])
    assert job.run_at == pytest.approx(now + 3600, abs=1)


@pytest.mark.parametrize("url", ["postgres"], indirect=True)
@pytest.mark.parametrize(
    ("call", "message"),
    [
        ("sqljobs.enqueue('t', '{\"a\": 1}'::jsonb)", "args must be a JSON array"),
        ("sqljobs.enqueue('t', kwargs => '[1]'::jsonb)", "kwargs must be a JSON object"),
        ("sqljobs.enqueue('')", "task must be a name of 1 to 500 characters"),
        ("sqljobs.enqueue('t', queue => 'no spaces')", "queue name 'no spaces'"),
        ("sqljobs.enqueue('t', key => '')", "key must be NULL or 1 to 500"),
        ("sqljobs.enqueue('t', run_at => '10000-01-01')", "outside the years 1 to 9999"),
        ("sqljobs.enqueue('t', priority => 3000000000)", "function sqljobs.enqueue"),
    ],
)
def test_sql_enqueue_refuses_bad_input(app: App, call: str, message: str) -> None:
    app.migrate()
    with _pg(app) as conn:
        with pytest.raises(psycopg.Error, match=message):
            conn.execute(f"SELECT {call}")
        conn.rollback()
        (n,) = conn.execute("SELECT count(*) FROM sqljobs_jobs").fetchone() or (None,)
    assert n == 0


@pytest.mark.parametrize("url", ["postgres"], indirect=True)
def test_a_task_limited_per_key_is_refused_and_a_limited_one_counted(app: App) -> None:
    @app.task(concurrency=1, concurrency_key=lambda tenant: tenant)
    def per_tenant(tenant: str) -> None: ...

    @app.task(concurrency=2)
    def capped() -> None: ...

    app.migrate()
    with worker_thread(app, poll_interval=60.0):
        wait_until(lambda: app.backend.task_info("capped") is not None)
    with _pg(app) as conn:
        with pytest.raises(psycopg.Error, match="concurrency_key"):
            conn.execute("SELECT sqljobs.enqueue('per_tenant', '[\"acme\"]')")
        conn.rollback()
        (job_id,) = conn.execute("SELECT sqljobs.enqueue('capped')").fetchone() or (None,)
        conn.commit()
    assert isinstance(job_id, int)
    job = app.get_job(job_id)
    assert job is not None and (job.limit_key, job.limit_max) == ("capped", 2)


@pytest.mark.parametrize("url", ["postgres"], indirect=True)
def test_another_schema_has_its_own_function(url: str) -> None:
    app = App(url, backend_options={"schema": "jobs"})
    app.migrate()
    with psycopg.connect(url_options(url)[0]) as conn:
        (job_id,) = conn.execute(
            "SELECT jobs.sqljobs_enqueue('t', '[1]'::jsonb, key => 'k')"
        ).fetchone() or (None,)
        conn.commit()
    job = app.get_job(int(str(job_id)))
    assert job is not None and job.args == [1]
    app.close()


def _send_wake(database: str, queue: str) -> int:
    """What the docs tell a SQLite producer in another language to do: one datagram naming
    the queue to each socket in the folder beside the database."""
    folder = SQLITE_WAKE_FOLDER.format(database=database)
    sent = 0
    if not os.path.isdir(folder):  # no process listens yet
        return 0
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        for name in os.listdir(folder):
            if name.endswith(".sock"):
                try:
                    sock.sendto(queue.encode(), os.path.join(folder, name))
                    sent += 1
                except OSError:  # a socket left by a process that is gone
                    pass
    return sent


@pytest.mark.parametrize("url", ["sqlite"], indirect=True)
def test_sqlite_producer_with_the_documented_statement(app: App) -> None:
    assert SQLITE_ENQUEUE in DOCS.read_text(encoding="utf-8")
    ran: list[str] = []
    seen = threading.Event()

    @app.task(queue="reports")
    def send_report(tenant: str) -> None:
        ran.append(tenant)
        seen.set()

    app.migrate()
    database = app.url.removeprefix("sqlite:///")
    row = {"task": "send_report", "args": '["acme"]', "kwargs": None, "key": "report:acme",
           "run_at": None, "queue": "reports", "priority": None}  # fmt: skip
    with worker_thread(app, queues=["reports"], poll_interval=60.0):
        wait_until(lambda: _send_wake(database, "nothing") > 0, what="a listening worker")
        conn = sqlite3.connect(database)
        try:
            with conn:
                conn.execute(SQLITE_ENQUEUE, row)
                conn.execute(SQLITE_ENQUEUE, {**row, "args": '["again"]'})  # the key holds
            (job_id,) = conn.execute(
                "SELECT id FROM sqljobs_jobs WHERE key = ?", ("report:acme",)
            ).fetchone()
        finally:
            conn.close()
        assert _send_wake(database, "reports") > 0
        assert seen.wait(10), "the datagram did not wake the worker"
    assert ran == ["acme"]
    job = app.get_job(job_id)
    assert job is not None and job.state is JobState.DONE and job.queue == "reports"
    assert len(app.list_jobs()) == 1


@pytest.mark.parametrize("url", ["sqlite"], indirect=True)
def test_sqlite_statement_refuses_bad_input(app: App) -> None:
    app.migrate()
    conn = sqlite3.connect(app.url.removeprefix("sqlite:///"))
    base: dict[str, object] = {"task": "t", "args": "[]", "kwargs": "{}", "key": None,
                               "run_at": None, "queue": None, "priority": None}  # fmt: skip
    try:
        changes: list[tuple[dict[str, object], str]] = [
            ({"args": '{"a": 1}'}, "args must be a JSON array"),
            ({"args": "not json"}, "args must be a JSON array"),
            ({"kwargs": "[]"}, "kwargs must be a JSON object"),
            ({"task": ""}, "task must be a name"),
            ({"queue": "no spaces"}, "queue name is not valid"),
            ({"priority": 1.5}, "priority must be an integer"),
            ({"run_at": "tomorrow"}, "run_at must be Unix seconds"),
        ]
        for change, message in changes:
            with pytest.raises(sqlite3.IntegrityError, match=message):
                conn.execute(SQLITE_ENQUEUE, {**base, **change})
        conn.rollback()
        with conn:
            conn.execute(SQLITE_ENQUEUE, {**base, "run_at": 4102444800, "priority": 7})
            (seq,) = conn.execute(
                "SELECT seq FROM sqlite_sequence WHERE name = 'sqljobs_jobs'"
            ).fetchone()
    finally:
        conn.close()
    job = app.get_job(seq)
    assert job is not None and (job.run_at, job.priority, job.queue) == (4102444800, 7, "default")
