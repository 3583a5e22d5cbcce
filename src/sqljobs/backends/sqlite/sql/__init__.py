"""SQLite's named statements (its ``.sql`` files) and numbered migrations."""

from __future__ import annotations

from ...sqlfile import load_migrations, load_statements

Q = load_statements(
    __name__,
    "queries.sql",
    "schedules.sql",
    "migrate.sql",
    "session.sql",
    "limits.sql",
    "dependencies.sql",
    "browse.sql",
    "rollup.sql",
    "workflows.sql",
)
MIGRATIONS = load_migrations(__name__ + ".migrations")
