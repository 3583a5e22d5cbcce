"""Backends by URL scheme. Each implements :class:`sqljobs.backends.base.Backend`.

Module map: ``base`` (the protocol) and ``records`` (its parameters records),
``executor`` (what each engine supplies), ``shared`` and ``ops/`` (what is the same on
both, written once over an executor, one module per group of methods), ``rows`` (rows to
records, by column name), ``migrations`` (the one runner), ``sqlfile`` (named
statements), then the engines as packages, ``sqlite`` and ``postgres``, each with its SQL
in ``sql/``.
"""

from __future__ import annotations

import sqlite3
import time
from functools import cache
from typing import Any

from ..errors import ConfigurationError
from ..humanize import redact_url
from ..url import parse_url, url_options
from .base import Backend, WorkerInfo
from .ops.markers import lender_of, mark_in_transaction
from .ops.markers import mark_idempotent as _mark
from .sqlfile import load_queries

__all__ = ["Backend", "WorkerInfo", "mark_idempotent", "open_backend", "worker_options"]


def open_backend(url: str, **options: Any) -> Backend:
    """Open the backend a URL names. Options go to the backend's constructor, with those
    the URL carries (``?listen=false``); given both ways, they must agree."""
    parsed = parse_url(url)
    for name, value in url_options(url)[1].items():
        if options.setdefault(name, value) != value:
            raise ConfigurationError(
                f"the URL says {name}={str(value).lower()} but backend_options says "
                f"{name}={options[name]!r}: give it one way"
            )
    if parsed.scheme == "sqlite":
        from .sqlite import SqliteBackend

        return SqliteBackend(parsed.path, url=url, **options)
    try:
        from .postgres import PostgresBackend  # type: ignore[import-not-found,unused-ignore]
    except ImportError as exc:
        if not (exc.name or "").startswith("psycopg"):
            raise  # a broken install of sqljobs itself: installing psycopg would not help
        raise ConfigurationError(
            f"{redact_url(url)!r} needs the PostgreSQL backend: "
            f"pip install 'sqljobs[postgres]' ({exc})"
        ) from exc
    backend: Backend = PostgresBackend(url, **options)
    return backend


def worker_options(url: str, concurrency: int, synchronous: str) -> dict[str, Any]:
    """The backend options a worker of ``concurrency`` threads opens its database with.

    SQLite: the worker's own writes use ``synchronous`` (NORMAL by default). PostgreSQL: a
    pool for the coordinator, the claim lanes, the maintenance services and one
    ``ctx.transaction()`` per thread; and, like SQLite's NORMAL, its own claims and outcomes
    need not wait for the WAL flush (a lost one only re-runs a job, fenced)."""
    if parse_url(url).scheme == "sqlite":
        return {"synchronous": synchronous}
    return {
        "pool_size": max(10, concurrency + 4),
        "synchronous_commit": synchronous.upper() in ("FULL", "EXTRA"),
    }


def mark_idempotent(connection: Any, key: str, ttl: float | None = None) -> bool:
    """Insert an idempotency marker on a DB-API connection; True if it was new.

    A connection a backend handed out (``ctx.transaction()``, ``job_transaction()``) is
    that backend's: its statement, its schema and its clock, the App's. Any other
    connection has no App in sight, so it is told apart by its driver: a
    ``sqlite3.Connection`` gets SQLite's statement, anything else PostgreSQL's (psycopg, or
    a wrapper that speaks ``%s``) on the table its ``search_path`` finds; and the marker is
    timed by this machine's wall clock, ``time.time()``.
    """
    lender = lender_of(connection)
    if lender is not None:
        return mark_in_transaction(lender, connection, key, ttl)
    return _mark(connection, _plain_statement(_dialect_of(connection)), key, ttl, time.time())


def _dialect_of(connection: Any) -> str:
    return "sqlite" if isinstance(connection, sqlite3.Connection) else "postgres"


@cache
def _plain_statement(dialect: str) -> str:
    """The dialect's marker statement for a connection no backend handed out."""
    statement = load_queries(f"sqljobs.backends.{dialect}.sql", "queries.sql")["mark_idempotent"]
    return statement.replace("{schema}.", "")
