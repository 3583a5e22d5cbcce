"""PostgreSQL's named statements (its ``.sql`` files) and numbered migrations, written
for a schema that :func:`statements` and :func:`migrations` fill in."""

from __future__ import annotations

from ...migrations import Migration
from ...sqlfile import load_migrations, load_statements

_FILES = (
    "queries.sql",
    "schedules.sql",
    "migrate.sql",
    "session.sql",
    "notify.sql",
    "limits.sql",
    "dependencies.sql",
    "browse.sql",
    "rollup.sql",
    "workflows.sql",
)


def statements(schema: str) -> dict[str, str]:
    """The named statements with ``schema`` and their column-list fragments filled in."""
    raw = load_statements(__name__, *_FILES)
    fragments = {"{columns}": raw["schedule_columns"], "{job_columns}": raw["job_columns"]}
    out = {}
    for name, sql in raw.items():
        for marker, fragment in fragments.items():
            sql = sql.replace(marker, fragment)
        out[name] = sql.replace("{schema}", schema)
    return out


def migrations(schema: str) -> list[Migration]:
    """The numbered migrations, for ``schema``."""
    return [
        (version, name, script.replace("{schema}", schema))
        for version, name, script in load_migrations(__name__ + ".migrations")
    ]
