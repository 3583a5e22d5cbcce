"""The fresh schema and the replayed migrations must describe the same database, and
migrations started together apply each one once."""

from __future__ import annotations

import sqlite3
import threading
from importlib import resources
from pathlib import Path

import sqljobs
from sqljobs.backends.base import JobListing
from sqljobs.backends.sqlfile import load_migrations
from sqljobs.backends.sqlite import MIGRATIONS, SqliteBackend, split_script
from sqljobs.testing import assert_uses_index, explain

from ..conftest import db_execute, is_pg
from .conftest import new_job

COVERS = {"migrate", "close"}


def _describe(conn: sqlite3.Connection) -> dict[str, object]:
    """Tables by their columns (in any order) and indexes by their SQL: what a schema
    means, not how ALTER TABLE happened to spell it."""
    tables = [
        r[0]
        for r in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' "
            "AND name != 'sqljobs_migrations' ORDER BY name"
        )
    ]
    columns = {
        t: sorted(conn.execute(f"PRAGMA table_info({t})").fetchall(), key=lambda c: c[1])
        for t in tables
    }
    columns = {t: [c[1:] for c in cols] for t, cols in columns.items()}
    indexes = conn.execute(
        "SELECT name, sql FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL ORDER BY name"
    ).fetchall()
    return {"columns": columns, "indexes": [(n, " ".join(s.split())) for n, s in indexes]}


def test_fresh_schema_equals_replayed_migrations(tmp_path: Path) -> None:
    fresh = sqlite3.connect(tmp_path / "fresh.db")
    schema = resources.files("sqljobs.backends.sqlite.sql").joinpath("schema.sql").read_text()
    for statement in split_script(schema):
        fresh.execute(statement)
    migrated = SqliteBackend(str(tmp_path / "migrated.db"))
    applied = migrated.migrate()
    assert applied == [f"{v:04d}_{n}" for v, n, _ in MIGRATIONS]
    assert _describe(fresh) == _describe(migrated._conn())


def test_migrate_is_idempotent_and_concurrent_safe(url: str) -> None:
    """Runners that start together on an empty database (a new SQLite file; a new
    PostgreSQL schema) apply each migration exactly once: one applies them all, the
    others wait for it and find nothing left to do; a later run applies nothing."""
    dialect = "postgres" if is_pg(url) else "sqlite"
    migrations = load_migrations(f"sqljobs.backends.{dialect}.sql.migrations")
    everything = [f"{v:04d}_{n}" for v, n, _ in migrations]
    runners = 4
    for round_ in range(5):  # runners interleave differently each time
        if is_pg(url):
            where, options = url, {"schema": f"fresh{round_}"}
        else:
            where, options = url.replace("jobs.db", f"fresh{round_}.db"), {}
        applied = _migrate_together(where, options, runners)
        assert sorted(applied, key=len) == [[]] * (runners - 1) + [everything], applied
        again = sqljobs.App(where, migrate=False, backend_options=options)
        assert again.migrate() == []
        table = f"{options['schema']}.sqljobs_migrations" if is_pg(url) else "sqljobs_migrations"
        versions = [v for (v,) in db_execute(again, f"SELECT version FROM {table} ORDER BY 1")]
        assert versions == [v for v, _, _ in migrations], "each migration recorded once"


def _migrate_together(url: str, options: dict[str, str], runners: int) -> list[list[str]]:
    """What ``migrate()`` returned in each of ``runners`` threads released together."""
    start = threading.Barrier(runners)
    applied: list[list[str]] = []
    errors: list[BaseException] = []

    def migrate() -> None:
        app = sqljobs.App(url, migrate=False, backend_options=options)
        try:
            start.wait(timeout=10)
            applied.append(app.migrate())
        except BaseException as exc:  # collected: a thread's failure must fail the test
            errors.append(exc)
        finally:
            app.close()

    threads = [threading.Thread(target=migrate) for _ in range(runners)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert errors == []
    return applied


def test_claims_use_the_pending_indexes(tmp_path: Path) -> None:
    backend = SqliteBackend(str(tmp_path / "jobs.db"))
    backend.migrate()
    params = {"worker": "w", "now": 0.0, "limit": 10, "leases": "{}", "start_now": 10}
    for queues, index in ((["default"], "sqljobs_jobs_claim"), (None, "sqljobs_jobs_claim_any")):
        sql, extra = backend.filtered("claim", queues, None)
        plan = explain(backend, sql, {**params, **extra})
        assert_uses_index(plan, index, table="sqljobs_jobs")


def test_connections_opening_a_new_file_together_all_get_wal(tmp_path: Path) -> None:
    """On a new file one connection may be creating the schema while another asks for WAL,
    which SQLite refuses at once ("database is locked"): the second must wait, not fail."""
    errors: list[BaseException] = []
    for round_ in range(30):
        path = str(tmp_path / f"new{round_}.db")
        start = threading.Barrier(3)

        def open_and_migrate(path: str = path, start: threading.Barrier = start) -> None:
            start.wait()
            try:
                backend = SqliteBackend(path)
                backend.migrate()
                backend.close()
            except BaseException as exc:  # collected: a thread's failure must fail the test
                errors.append(exc)

        threads = [threading.Thread(target=open_and_migrate) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=30)
    assert errors == []


OLD_SQLITE_NUMBERS = {
    "initial": 1,
    "schedules": 2,
    "effects": 3,
    "task_catalogue": 4,
    "control": 5,
    "limits": 6,
    "dependencies": 7,
    "queue_limits": 8,
    "metrics": 9,
    "dependent_index": 11,
    "level_scans": 12,
    "spent_keys": 13,
    "held_slots": 14,
}
"""How SQLite numbered its migrations before both engines shared PostgreSQL's numbers."""


def _recorded(path: Path) -> list[tuple[int, str]]:
    with sqlite3.connect(path) as conn:
        return conn.execute("SELECT version, name FROM sqljobs_migrations ORDER BY 1").fetchall()


def _as_numbered_before(path: Path, up_to: str) -> None:
    """A database as the old numbering left it: migrated up to ``up_to`` and recorded under
    the old numbers."""
    last = next(v for v, n, _ in MIGRATIONS if n == up_to)
    backend = SqliteBackend(str(path))
    backend.migrations = [m for m in MIGRATIONS if m[0] <= last]
    backend.migrate()
    backend.close()
    with sqlite3.connect(path) as conn:
        rows = conn.execute("SELECT version, name FROM sqljobs_migrations").fetchall()
        conn.execute("DELETE FROM sqljobs_migrations")
        conn.executemany(
            "INSERT INTO sqljobs_migrations VALUES (?, ?, 0)",
            [(OLD_SQLITE_NUMBERS[name], name) for _, name in rows],
        )


def test_both_engines_number_each_migration_alike() -> None:
    postgres = {n: v for v, n, _ in load_migrations("sqljobs.backends.postgres.sql.migrations")}
    sqlite = {n: v for v, n, _ in MIGRATIONS}
    assert sqlite.keys() <= postgres.keys()
    assert {n: postgres[n] for n in sqlite} == sqlite
    renumbered = set(OLD_SQLITE_NUMBERS)
    assert renumbered <= set(sqlite), "every migration SQLite ever recorded"
    since = set(sqlite) - renumbered  # added after the renumbering: numbered after them all
    assert all(sqlite[n] > max(sqlite[o] for o in renumbered) for n in since)


def test_a_database_numbered_the_old_way_opens_and_migrates(tmp_path: Path) -> None:
    """A SQLite database recorded under the old numbers is renumbered by name in the
    migration's transaction: a complete one applies nothing again, and one that lacks
    the later migrations gets exactly those, under the shared numbers."""
    everything = [(v, n) for v, n, _ in MIGRATIONS]
    since = [f"{v:04d}_{n}" for v, n, _ in MIGRATIONS if n not in OLD_SQLITE_NUMBERS]
    complete = tmp_path / "complete.db"
    _as_numbered_before(complete, "held_slots")
    assert _recorded(complete) != everything
    assert SqliteBackend(str(complete)).migrate() == since, "renumbered, the later ones applied"
    app = sqljobs.App(f"sqlite:///{complete}")
    assert app.migrate() == []
    assert _recorded(complete) == everything
    assert app.migrate() == []

    @app.task
    def ping() -> str:
        return "pong"

    assert ping.enqueue().id == 1
    app.close()

    partial = tmp_path / "partial.db"
    _as_numbered_before(partial, "metrics")
    backend = SqliteBackend(str(partial))
    later = ["0013_dependent_index", "0014_level_scans", "0016_spent_keys", "0017_held_slots"]
    later += since
    assert backend.migrate() == later
    backend.close()
    assert _recorded(partial) == everything


def test_a_closed_backend_lets_go_and_another_opens_the_database(url: str) -> None:
    app = sqljobs.App(url)
    first = app._open_backend()
    assert first.migrate() == []
    first.enqueue_jobs([new_job(first, "t", 1)])
    first.close()
    second = app._open_backend()
    assert [j.args for j in second.list_jobs(JobListing())] == [[1]]
    second.close()
    app.close()
