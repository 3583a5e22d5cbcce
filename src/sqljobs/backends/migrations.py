"""The migration runner both backends use.

Migrations are the numbered ``NNNN_name.sql`` files beside each dialect's statements
(:func:`sqljobs.backends.sqlfile.load_migrations`); ``sqljobs_migrations`` records each
one applied. The whole run is one transaction that first takes the dialect's lock
(``prepare_migrations``: SQLite's write lock, a PostgreSQL advisory lock), so runners that
start together apply each migration exactly once, and a runner that fails half-way leaves
nothing half-applied.

Both engines number a migration alike (the same name has the same version on each; an
engine that needs no step of the other's leaves its number unused). A database whose
record names a migration under another number (SQLite's, numbered on its own before) is
renumbered by name at the start of the run, in its transaction.

A database that has every migration already is left alone: :func:`up_to_date` reads the
record first, so opening it takes no lock and runs no DDL, and a role that may only read
and write the tables (docs/security.md) can open an App with ``migrate=True``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..errors import BackendError
from .rows import result

Migration = tuple[int, str, str]
"""(version, name, script)"""


def up_to_date(
    read: Callable[[Callable[[Any], set[int]]], set[int]],
    sql: Mapping[str, str],
    migrations: Sequence[Migration],
) -> bool:
    """Whether every one of ``migrations`` is recorded as applied. A database without the
    record (never migrated), or one this role may not read, is not up to date: the full
    run decides, and says why if it fails."""

    def applied(conn: Any) -> set[int]:
        return {v for (v,) in result(conn.execute(sql["applied_migrations"])).pick("version")}

    try:
        done = read(applied)
    except BackendError:
        return False
    return {version for version, _, _ in migrations} <= done


def apply_migrations(
    transaction: Callable[[Callable[[Any], list[str]]], list[str]],
    run_script: Callable[[Any, str], None],
    sql: Mapping[str, str],
    migrations: Sequence[Migration],
    now: Callable[[], float],
) -> list[str]:
    """Apply the migrations not yet recorded, in order, in one ``transaction``; return
    their names (``0003_effects``). ``run_script`` runs a script of several statements
    on a connection, as the dialect can; ``sql`` holds the runner's three statements."""

    def work(conn: Any) -> list[str]:
        run_script(conn, sql["prepare_migrations"])
        recorded = result(conn.execute(sql["applied_migrations"])).pick("version", "name")
        done = renumber(conn, sql["renumber_migration"], recorded, migrations)
        applied = []
        for version, name, script in migrations:
            if version in done:
                continue
            run_script(conn, script)
            params = {"version": version, "name": name, "now": now()}
            conn.execute(sql["record_migration"], params)
            applied.append(f"{version:04d}_{name}")
        return applied

    return transaction(work)


def renumber(
    conn: Any, statement: str, recorded: Sequence[tuple[int, str]], migrations: Sequence[Migration]
) -> set[int]:
    """Give each recorded migration the version its name has now, by ``statement`` (the
    dialect's ``renumber_migration``), in the caller's transaction; return the versions
    then recorded. Moves go through negative versions first, so no two rows ever hold one
    version on the way (the old 5 becoming 6 while the old 6 becomes 7)."""
    now = {name: version for version, name, _ in migrations}
    moves = [(old, now[name]) for old, name in recorded if now.get(name, old) != old]
    for old, new in moves:
        conn.execute(statement, {"old": old, "new": -new})
    for _, new in moves:
        conn.execute(statement, {"old": -new, "new": new})
    moved = dict(moves)
    return {moved.get(old, old) for old, _ in recorded}
