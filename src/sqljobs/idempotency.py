"""Business idempotency markers, written inside the caller's transaction."""

from __future__ import annotations

from typing import Any

from .backends import mark_idempotent
from .errors import ConfigurationError


def idempotent(tx: Any, key: str, ttl: float | None = None) -> bool:
    """Record ``key`` in the caller's transaction; True the first time it is seen.

    Uniqueness comes from the table's primary key (insert-or-ignore judged by the row
    count), never from a check-then-insert, so concurrent deliveries cannot both pass.
    Commit the marker together with the effect it guards (``ctx.transaction()``): if the
    effect rolls back, so does the marker. ``ttl`` seconds lets the pruner forget the key.

    Which clock stamps the marker: on the connection of ``ctx.transaction()`` (or a
    backend's ``job_transaction()``) it is the App's clock, the one the pruner compares
    ``ttl`` with. On a connection you opened yourself nothing says which App it belongs
    to, so the marker is stamped with this machine's wall clock (``time.time()``), and the
    statement is chosen by the driver: SQLite's for a ``sqlite3.Connection``, PostgreSQL's
    (the table its ``search_path`` finds) for anything else. With an App whose clock is
    not the wall clock, use its connections.

    Without ``ttl`` a marker is never pruned: the table grows by one row per key for as
    long as the database lives, because forgetting a key is what would let a late
    duplicate through. Bound it with ``ttl=`` set longer than any duplicate can arrive
    (the longest retry deadline plus the time a delivery may be late), e.g.
    ``idempotent(tx, key, ttl=30 * 24 * 3600)``; keep ``ttl=None`` only for keys whose
    number is itself bounded.
    """
    if not key:
        raise ConfigurationError(f"an idempotency key must be a non-empty string, got {key!r}")
    return mark_idempotent(tx, key, ttl)
