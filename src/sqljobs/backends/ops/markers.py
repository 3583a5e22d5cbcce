"""Idempotency markers and external effects: a marker inserted in the caller's
transaction (found by the connection a backend lent out), and an effect's intent and
outcome, each committed durably whatever the backend's own commit setting."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict
from typing import Any

from ..base import EffectRecord
from ..executor import Executor
from ..records import EffectEnd, EffectIntent
from ..rows import effect_record, result

_LENT: dict[int, Executor] = {}


@contextmanager
def lending(connection: Any, backend: Executor) -> Iterator[None]:
    """While a ``job_transaction()`` block runs, its connection is known to be this
    backend's, so ``sqljobs.idempotent(tx, ...)``, given only the connection, finds the
    backend (its statements, schema and clock)."""
    _LENT[id(connection)] = backend
    try:
        yield
    finally:
        _LENT.pop(id(connection), None)


def lender_of(connection: Any) -> Executor | None:
    """The backend whose ``job_transaction()`` handed out ``connection``, if one did."""
    return _LENT.get(id(connection))


def mark_idempotent(
    connection: Any, statement: str, key: str, ttl: float | None, now: float
) -> bool:
    """Insert the marker ``key`` with ``statement`` (the dialect's ``mark_idempotent``)
    in the caller's transaction; True if this call inserted it."""
    expires = None if ttl is None else now + ttl
    cursor = connection.execute(statement, {"key": key, "now": now, "expires": expires})
    return bool(cursor.rowcount == 1)


def mark_in_transaction(ex: Executor, connection: Any, key: str, ttl: float | None = None) -> bool:
    return mark_idempotent(connection, ex.sql["mark_idempotent"], key, ttl, ex.now())


def effect_begin(ex: Executor, intent: EffectIntent) -> EffectRecord:
    params = {**asdict(intent), "now": ex.now()}
    sql = ex.sql["effect_begin"]
    found = ex.durable(lambda conn: result(conn.execute(sql, params)))
    return effect_record(intent.key, found.names, found.rows[0])


def effect_set(ex: Executor, end: EffectEnd) -> None:
    durable_change(ex, "effect_set", {**asdict(end), "now": ex.now()})


def effect_forget(ex: Executor, key: str, holder: str) -> None:
    durable_change(ex, "effect_forget", {"key": key, "holder": holder})


def durable_change(ex: Executor, name: str, params: Mapping[str, Any]) -> None:
    sql = ex.sql[name]
    ex.durable(lambda conn: conn.execute(sql, params))
