"""Business idempotency markers, written inside the caller's transaction."""

from __future__ import annotations

import sqlite3
import time
from typing import Any


def idempotent(tx: Any, key: str, ttl: float | None = None) -> bool:
    """Record ``key`` in the caller's transaction; True the first time it is seen.

    Uniqueness comes from the table's primary key (insert-or-ignore judged by the row
    count), never from a check-then-insert, so concurrent deliveries cannot both pass.
    Commit the marker together with the effect it guards (``ctx.transaction()``): if the
    effect rolls back, so does the marker. ``ttl`` seconds lets the pruner forget the key.

    Without ``ttl`` a marker is never pruned: the table grows by one row per key for as
    long as the database lives, because forgetting a key is what would let a late
    duplicate through. Bound it with ``ttl=`` set longer than any duplicate can arrive
    (the longest retry deadline plus the time a delivery may be late), e.g.
    ``idempotent(tx, key, ttl=30 * 24 * 3600)``; keep ``ttl=None`` only for keys whose
    number is itself bounded.
    """
    if not key:
        raise ValueError("an idempotency key must be a non-empty string")
    now = time.time()
    expires = None if ttl is None else now + ttl
    if isinstance(tx, sqlite3.Connection):
        cur = tx.execute(
            "INSERT INTO sqljobs_idempotency (key, created_at, expires_at) VALUES (?, ?, ?) "
            "ON CONFLICT (key) DO NOTHING",
            (key, now, expires),
        )
        return cur.rowcount == 1
    cur = tx.execute(
        "INSERT INTO sqljobs_idempotency (key, created_at, expires_at) "
        "VALUES (%s, to_timestamp(%s), to_timestamp(%s)) ON CONFLICT (key) DO NOTHING",
        (key, now, expires),
    )
    return bool(cur.rowcount == 1)
