"""Least-privilege PostgreSQL roles: the GRANTs each kind of process needs, and no more.

One role owns the tables (it runs ``sqljobs migrate``); the others are granted rights on
them by :func:`grants` (``sqljobs grants --role ROLE NAME`` prints the same):

- ``producer``: enqueues (with keys, dependencies and groups) and reads its jobs back
  (``handle.result()``). It may insert jobs and read them, and update four columns of
  them: ``children`` (a child counted on its parent), ``waited`` (a caller waits on the
  result), ``key`` and ``released_key`` (an ended job's key given up to a new enqueue),
  and it reads the keys kept after their jobs were pruned (``sqljobs_spent_keys``). It
  emits workflow events (``app.emit``: it inserts the event, and a SECURITY DEFINER
  function makes the waiting workflows due) and reads workflow histories. It may call
  ``sqljobs.enqueue(...)`` (enqueue from SQL) and the SECURITY DEFINER function of a
  debounced enqueue, which changes the payload and start of its key's pending job only. It cannot
  claim, complete, retry, cancel or delete a job, nor touch schedules.
- ``worker``: claims, completes, heartbeats, fires schedules, keeps the metrics rollup
  and prunes. It reads and writes every sqljobs table: a worker is trusted with the
  queue.
- ``dashboard``: the dashboard with its actions (retry, cancel, delete, pause, resume,
  run a schedule now): it reads everything, and writes jobs, their dependency edges,
  queues and schedules.
- ``reader``: reads everything and writes nothing: ``sqljobs dashboard --read-only``,
  ``sqljobs stats``, ``jobs list|show`` and ``/metrics`` scrapers.

LISTEN, NOTIFY and advisory locks need no grant. Every role reads
``sqljobs_migrations``, so an App opened with ``migrate=True`` (the default) finds the
schema up to date and runs no DDL. The tables come from the schema this version creates,
so grants written after an upgrade's ``sqljobs migrate`` cover any new table: run them
again then.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources

from .errors import ConfigurationError

__all__ = ["ROLES", "grants", "tables"]

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")  # fullmatch: "$" would let "\n" by
_ROLE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_$-]{0,62}$")
_TABLE = re.compile(r"^CREATE TABLE \{schema\}\.(\w+)", re.MULTILINE)

ALL = ("SELECT", "INSERT", "UPDATE", "DELETE")
READ = ("SELECT",)
JOBS_SEQUENCE = "sqljobs_jobs_id_seq"
WAKE_WAITERS = "sqljobs_wake_waiters(text, text)"
ENQUEUE_ARGS = "(text, jsonb, jsonb, text, timestamptz, text, integer)"
ENQUEUES = ("sqljobs_debounce(jsonb)", f"sqljobs_enqueue{ENQUEUE_ARGS}")
"""The functions an enqueue may call: a debounced one, and enqueue from SQL."""
ALIAS_SCHEMAS = ("public", "sqljobs")
"""The schemas whose tables ``sqljobs.enqueue(...)`` serves (the migration makes it)."""
EVENTS_SEQUENCE = "sqljobs_events_id_seq"
MIGRATIONS = "sqljobs_migrations"


@dataclass(frozen=True)
class Role:
    """What one kind of process may do: privileges by table (a table left out: none; an
    entry ``UPDATE (a, b)``: only those columns), and whether it takes new job ids."""

    about: str
    tables: dict[str, tuple[str, ...]]
    default: tuple[str, ...] = ()
    """The privileges on every table not named in ``tables``."""
    new_ids: bool = False
    emits: bool = False
    """It may emit workflow events (EXECUTE on the function that wakes their waiters)."""
    enqueues: bool = False
    """It may call the enqueue functions (debounce, ``sqljobs.enqueue`` from SQL)."""


ROLES: dict[str, Role] = {
    "producer": Role(
        "enqueue jobs (keys, dependencies, groups) and read them back",
        {
            "sqljobs_jobs": (
                "SELECT",
                "INSERT",
                "UPDATE (children, waited, key, released_key)",
            ),
            "sqljobs_deps": ("SELECT", "INSERT"),
            "sqljobs_tasks": READ,
            "sqljobs_queues": READ,  # a queue's limits, which sqljobs.enqueue() applies
            "sqljobs_spent_keys": READ,  # a key kept after its job was pruned answers
            "sqljobs_events": ("SELECT", "INSERT"),  # app.emit (waiters woken by a function)
            "sqljobs_workflow_steps": READ,  # app.workflow_history
            MIGRATIONS: READ,
        },
        new_ids=True,
        emits=True,
        enqueues=True,
    ),
    "worker": Role(
        "claim, run and end jobs, heartbeat, fire schedules, record metrics, prune",
        {MIGRATIONS: READ},
        default=ALL,
        new_ids=True,
        emits=True,
        enqueues=True,
    ),
    "dashboard": Role(
        "read everything; retry, cancel and delete jobs, pause and resume queues and "
        "schedules, run a schedule now",
        {
            "sqljobs_jobs": ALL,
            "sqljobs_deps": ALL,
            "sqljobs_queues": ("SELECT", "INSERT", "UPDATE"),
            "sqljobs_schedules": ("SELECT", "INSERT", "UPDATE"),
        },
        default=READ,
        new_ids=True,
    ),
    "reader": Role(
        "read everything, write nothing (dashboard --read-only, stats, jobs list, /metrics)",
        {},
        default=READ,
    ),
}
"""The roles :func:`grants` knows, by name."""


def tables() -> list[str]:
    """Every sqljobs table of this version's PostgreSQL schema, the migration record
    included, in the order the schema creates them."""
    schema = resources.files("sqljobs.backends.postgres.sql").joinpath("schema.sql")
    return [*_TABLE.findall(schema.read_text(encoding="utf-8")), MIGRATIONS]


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def grants(role: str, name: str, *, schema: str = "public") -> str:
    """The SQL that gives the existing PostgreSQL role ``name`` the rights of ``role``
    (one of :data:`ROLES`) on the sqljobs tables in ``schema``. Run it as the tables'
    owner, after ``sqljobs migrate``; running it again changes nothing."""
    if role not in ROLES:
        raise ConfigurationError(f"unknown role {role!r}: choose one of {', '.join(ROLES)}")
    if not _IDENTIFIER.fullmatch(schema):
        raise ConfigurationError(f"schema {schema!r} is not a plain SQL identifier")
    if not _ROLE_NAME.match(name):
        raise ConfigurationError(
            f"role name {name!r}: use letters, digits, '_', '$' or '-' (at most 63), "
            "starting with a letter or '_'"
        )
    spec, who = ROLES[role], _quoted(name)
    lines = [
        f"-- sqljobs {role}: {spec.about}",
        f"GRANT USAGE ON SCHEMA {schema} TO {who};",
    ]
    for table in tables():
        privileges = spec.tables.get(table, spec.default)
        if privileges:
            lines.append(f"GRANT {', '.join(privileges)} ON {schema}.{table} TO {who};")
    if spec.new_ids:
        for sequence in (JOBS_SEQUENCE, EVENTS_SEQUENCE):
            lines.append(f"GRANT USAGE ON SEQUENCE {schema}.{sequence} TO {who};")
    if spec.emits:
        lines.append(f"GRANT EXECUTE ON FUNCTION {schema}.{WAKE_WAITERS} TO {who};")
    if spec.enqueues:
        for function in ENQUEUES:
            lines.append(f"GRANT EXECUTE ON FUNCTION {schema}.{function} TO {who};")
        if schema in ALIAS_SCHEMAS:  # sqljobs.enqueue(...), if the migration could make it
            lines.append(
                "DO $$ BEGIN IF to_regproc('sqljobs.enqueue') IS NOT NULL THEN "
                f"GRANT USAGE ON SCHEMA sqljobs TO {who}; GRANT EXECUTE ON FUNCTION "
                f"sqljobs.enqueue{ENQUEUE_ARGS} TO {who}; END IF; END $$;"
            )
    return "\n".join(lines) + "\n"
