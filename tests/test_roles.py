"""Least-privilege PostgreSQL roles, for real: a database owned by a role that is not a
superuser, migrated by it, and four login roles given exactly what ``sqljobs.roles.grants``
prints. Each one does its whole job through sqljobs (the producer enqueues, a real worker
runs everything, the dashboard pages and actions answer) and is refused, by the server,
what it must not do. The roles' names are new per test and dropped at the end: other
runs share this server."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner
from starlette.testclient import TestClient

import sqljobs
from sqljobs import App, BackendError, JobContext, JobState, idempotent
from sqljobs.backends.base import Claim
from sqljobs.cli import cli
from sqljobs.dashboard import create_app
from sqljobs.maintenance import Pruner, Reaper
from sqljobs.roles import ROLES, grants, tables
from sqljobs.testing import stepped_worker

from .conftest import PG_ADMIN_URL, wait_until, worker_thread

pytestmark = pytest.mark.postgres
LOOPBACK = "http://127.0.0.1"
PAGES = ("/", "/jobs", "/queues", "/schedules", "/workers", "/metrics", "/api/stats")


@dataclass
class Database:
    """A database owned by ``owner``, with one login role per kind of process."""

    urls: dict[str, str]  # "owner", "producer", "worker", "dashboard", "reader"
    schema: str

    def app(self, role: str, **options: Any) -> App:
        backend = {"schema": self.schema} if self.schema != "public" else {}
        application = App(self.urls[role], backend_options=backend, **options)
        define_tasks(application)
        return application

    def refused(self, role: str, sql: str) -> None:
        """Assert that ``role`` may not run ``sql``: the server says permission denied."""
        with psycopg.connect(self.urls[role], autocommit=True) as conn:
            conn.execute(f"SET search_path = {self.schema}")
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(sql)


def define_tasks(app: App) -> None:
    @app.task(name="add")
    def add(a: int, b: int) -> int:
        return a + b

    @app.task(name="total")
    def total(parts: list[int]) -> int:
        return sum(parts)

    @app.task(name="pay")
    def pay(ctx: JobContext, order: str) -> None:
        with ctx.transaction() as tx:  # the job ends in this transaction, with no result
            assert idempotent(tx, f"order-{order}:pay")

    @app.periodic(every=3600, name="hourly")
    def hourly() -> None:
        pass

    @app.workflow(name="approval")
    def approval(wf: sqljobs.Workflow, order: str) -> object:
        return wf.wait_for(f"approved:{order}")


def _admin(sql: str, database: str = "test") -> None:
    with psycopg.connect(PG_ADMIN_URL.rsplit("/", 1)[0] + "/" + database, autocommit=True) as c:
        c.execute(sql)


@contextlib.contextmanager
def _database(schema: str) -> Iterator[Database]:
    tag = uuid.uuid4().hex[:10]
    name = f"sqljobs_roles_{tag}"
    roles = {kind: f"sqljobs_{tag}_{kind}" for kind in ("owner", *ROLES)}
    server = PG_ADMIN_URL.rsplit("/", 1)[0].split("://", 1)[1].split("@")[-1]
    # a password in every URL: the server trusts these roles, and nothing may show it
    urls = {kind: f"postgresql://{role}:pw-{tag}@{server}/{name}" for kind, role in roles.items()}
    for role in roles.values():
        _admin(f"CREATE ROLE {role} LOGIN")
    try:
        _admin(f"CREATE DATABASE {name} OWNER {roles['owner']}")
        try:
            _admin(f"REVOKE ALL ON DATABASE {name} FROM PUBLIC", name)
            _admin("REVOKE ALL ON SCHEMA public FROM PUBLIC", name)
            for role in roles.values():
                _admin(f"GRANT CONNECT ON DATABASE {name} TO {role}", name)
            database = Database(urls, schema)
            owner = database.app("owner", migrate=False)
            owner.migrate()
            owner.close()
            with psycopg.connect(urls["owner"], autocommit=True) as conn:
                for kind in ROLES:
                    conn.execute(grants(kind, roles[kind], schema=schema))
            yield database
        finally:
            _admin(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    finally:
        for role in roles.values():
            _admin(f"DROP ROLE IF EXISTS {role}")


@pytest.fixture(params=["public", "queue_x"])
def db(request: pytest.FixtureRequest, pg_template: str) -> Iterator[Database]:
    with _database(request.param) as database:
        yield database


def _client(app: App, **options: Any) -> TestClient:
    client = TestClient(create_app(app, **options), base_url=LOOPBACK)
    client.headers["X-CSRF-Token"] = client.get("/api/csrf").json()["csrf"]
    return client


def _state(app: App, job_id: int) -> JobState:
    job = app.get_job(job_id)
    assert job is not None
    return job.state


# -- the grants themselves -------------------------------------------------------------


def test_every_table_of_the_schema_is_decided_for_every_role() -> None:
    names = tables()
    assert names[0] == "sqljobs_jobs" and "sqljobs_migrations" in names
    for role in ROLES.values():
        assert set(role.tables) <= set(names), "a role names a table the schema lacks"
    sql = grants("reader", "ops", schema="jobs")
    assert sql.count("GRANT SELECT ON jobs.") == len(names)
    assert "INSERT" not in sql and "UPDATE" not in sql and "DELETE" not in sql
    assert 'TO "ops";' in sql and "GRANT USAGE ON SCHEMA jobs" in sql


def test_names_that_could_change_the_statement_are_refused() -> None:
    from sqljobs import ConfigurationError

    with pytest.raises(ConfigurationError, match="unknown role 'admin'"):
        grants("admin", "x")
    with pytest.raises(ConfigurationError, match="not a plain SQL identifier"):
        grants("worker", "x", schema="public; DROP TABLE x")
    with pytest.raises(ConfigurationError, match="role name"):
        grants("worker", 'x"; DROP ROLE postgres; --')


def test_the_cli_prints_the_grants() -> None:
    out = CliRunner().invoke(cli, ["grants", "--role", "producer", "--schema", "jobs", "app_in"])
    assert out.exit_code == 0, out.output
    assert out.output == grants("producer", "app_in", schema="jobs")
    bad = CliRunner().invoke(cli, ["grants", "--role", "root", "x"])
    assert bad.exit_code != 0 and "root" in bad.output


# -- each role at work, and refused the rest ---------------------------------------------


def test_the_producer_enqueues_and_may_not_run_or_change_jobs(db: Database) -> None:
    producer = db.app("producer")  # migrate=True: an up-to-date schema needs no DDL
    add = producer.tasks["add"]
    first = add.enqueue(1, 2)
    keyed = add.with_options(key="k1").enqueue(2, 3)
    assert keyed.created and not add.with_options(key="k1").enqueue(9, 9).created
    child = add.with_options(after=[first]).enqueue(3, 4)
    group = producer.group([add.s(1, 1), add.s(2, 2)], then=producer.tasks["total"].s())
    by_name = producer.enqueue("pay", args=["o-1"])
    approval = producer.tasks["approval"].enqueue("o-1")
    assert _state(producer, child.id) is JobState.WAITING
    with pytest.raises(BackendError, match="permission denied"):
        producer.cancel(first.id)
    with pytest.raises(BackendError, match="permission denied"):
        producer.schedule("nightly", task="add", every=60, kwargs={"a": 1, "b": 2})
    with pytest.raises(BackendError, match="permission denied"):
        producer.backend.claim_jobs(Claim("thief", None, 10))
    for sql in (
        "UPDATE sqljobs_jobs SET state = 'done'",
        "UPDATE sqljobs_jobs SET payload = '[]'",
        "DELETE FROM sqljobs_jobs",
        "TRUNCATE sqljobs_jobs",
        "UPDATE sqljobs_schedules SET paused = true",
        "DELETE FROM sqljobs_workers",
        "CREATE TABLE sqljobs_x (id int)",
    ):
        db.refused("producer", sql)
    worker = db.app("worker")
    with worker_thread(worker, concurrency=2):
        assert first.result(timeout=10) == 3  # the producer waits on its job (`waited`)
        assert group.result(timeout=10) == 6
        assert by_name.result(timeout=10) is None
        assert child.result(timeout=10) == 7
        wait_until(lambda: _state(producer, approval.id) is JobState.WAITING, what="the park")
        producer.emit("approved:o-1", {"by": "ada"})  # a producer emits: the waiter runs
        assert approval.result(timeout=10) == {"by": "ada"}
    assert [s.name for s in producer.workflow_history(approval.id)] == ["approved:o-1"]
    producer.close()
    worker.close()


def test_a_real_worker_runs_everything_and_may_not_change_the_schema(db: Database) -> None:
    producer = db.app("producer")
    handles = [producer.tasks["add"].enqueue(i, i) for i in range(5)]
    paid = producer.tasks["pay"].enqueue("o-7")
    worker = db.app("worker", retention=0.001)
    with stepped_worker(worker, concurrency=2) as running:
        assert [running.result(h) for h in handles] == [0, 2, 4, 6, 8]
        assert running.result(paid) is None and _state(worker, paid.id) is JobState.DONE
        running.until(lambda: worker.get_schedule("hourly"), what="the schedule synced")
        assert running.result(worker.run_schedule_now("hourly")) is None
        assert running.id in {w.id for w in worker.workers()}
    backend = worker._open_backend()
    assert Reaper(backend).run_once() == []
    assert Pruner(backend, 0.001).run_once() >= 6
    backend.close()
    for sql in (
        "DROP TABLE sqljobs_jobs",
        "ALTER TABLE sqljobs_jobs ADD COLUMN x int",
        "TRUNCATE sqljobs_jobs",
        "CREATE TABLE sqljobs_x (id int)",
        "INSERT INTO sqljobs_migrations (version, name) VALUES (999, 'x')",
    ):
        db.refused("worker", sql)
    producer.close()
    worker.close()


def test_the_dashboard_role_reads_and_acts_but_does_not_run_jobs(db: Database) -> None:
    producer = db.app("producer")
    later = producer.tasks["add"].with_options(delay=3600).enqueue(1, 1)
    dashboard = db.app("dashboard")
    client = _client(dashboard)
    for page in (*PAGES, f"/jobs/{later.id}", f"/api/jobs/{later.id}"):
        assert client.get(page).status_code == 200, page
    assert client.post(f"/api/jobs/{later.id}/cancel").json()["ok"] is True
    assert client.post(f"/api/jobs/{later.id}/retry").json()["ok"] is True
    assert client.post("/api/queues/default/pause").json()["ok"] is True
    assert client.post("/api/queues/default/resume").json()["ok"] is True
    assert client.post("/api/schedules/hourly/pause").json()["ok"] is True
    assert client.post("/api/schedules/hourly/run").json()["ok"] is True
    assert client.post(f"/api/jobs/{later.id}/cancel").json()["ok"] is True
    assert client.post(f"/api/jobs/{later.id}/delete").json()["ok"] is True
    assert dashboard.get_job(later.id) is None
    for sql in (
        "UPDATE sqljobs_workers SET last_seen = now()",
        "DELETE FROM sqljobs_tasks",
        "DELETE FROM sqljobs_idempotency",
        "DELETE FROM sqljobs_schedules",
        "INSERT INTO sqljobs_metric_totals VALUES ('q', 't', 'done', 'attempts', 1, 1)",
        "TRUNCATE sqljobs_jobs",
    ):
        db.refused("dashboard", sql)
    producer.close()
    dashboard.close()


def test_the_reader_sees_every_page_and_the_server_refuses_its_actions(db: Database) -> None:
    producer = db.app("producer")
    later = producer.tasks["add"].with_options(delay=3600).enqueue(1, 1)
    owner = db.app("owner", migrate=False)
    owner.sync_schedules()  # a worker's start writes @app.periodic rows; a reader cannot
    reader = db.app("reader")
    for client in (_client(reader, read_only=True), _client(reader)):
        for page in (*PAGES, f"/jobs/{later.id}", f"/api/jobs/{later.id}"):
            assert client.get(page).status_code == 200, page
    # even a dashboard started without --read-only changes nothing as this role
    answer = _client(reader).post(f"/api/jobs/{later.id}/cancel")
    assert answer.status_code == 500
    assert "the database refused this action" in answer.json()["error"]
    assert "permission denied for table sqljobs_jobs" in answer.json()["error"]
    assert _state(reader, later.id) is JobState.PENDING
    for sql in (
        "UPDATE sqljobs_jobs SET state = 'cancelled'",
        "DELETE FROM sqljobs_jobs",
        "INSERT INTO sqljobs_queues (name, paused, updated_at) VALUES ('q', true, now())",
        "UPDATE sqljobs_schedules SET paused = true",
    ):
        db.refused("reader", sql)
    for app in (producer, owner, reader):
        app.close()


def test_the_producer_debounces_and_enqueues_from_sql(db: Database) -> None:
    producer = db.app("producer")
    add = producer.tasks["add"].with_options(key="sum", debounce=60)
    first = add.enqueue(1, 1)
    again = add.enqueue(2, 2)  # a pending job moved by a function, not a payload grant
    assert (again.id, again.created) == (first.id, False)
    job = producer.get_job(first.id)
    assert job is not None and job.args == [2, 2]
    call = "sqljobs.enqueue" if db.schema == "public" else f"{db.schema}.sqljobs_enqueue"
    with psycopg.connect(db.urls["producer"], autocommit=True) as conn:
        row = conn.execute(f"SELECT {call}('add', '[3, 4]'::jsonb, key => 'k')").fetchone()
        assert row is not None
        same = conn.execute(f"SELECT {call}('add', '[5, 6]'::jsonb, key => 'k')").fetchone()
    assert same == row
    made = producer.get_job(int(row[0]))
    assert made is not None and made.args == [3, 4]
    db.refused("producer", "UPDATE sqljobs_jobs SET payload = '[]'")
    producer.close()
