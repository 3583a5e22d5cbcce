"""Pruning, in batches: finished jobs (a keyed job's key kept as a spent key, in the same
transaction), spent keys, rate-limit starts, idempotency markers and old minutes of the
metrics rollup."""

from __future__ import annotations

from ...jobs import SpentKey
from ..executor import Executor
from ..records import PruneFinished


def prune_finished(ex: Executor, prune: PruneFinished) -> int:
    """Up to ``limit`` in all, queue by queue (the one index on ended jobs is by state,
    queue and age), each queue a statement of its own."""
    queues = ex.query("ended_queues", {"state": prune.state}).pick("queue")
    deleted = 0
    for (queue,) in queues:
        params = {
            "before": prune.before,
            "limit": prune.limit - deleted,
            "state": prune.state,
            "queue": queue,
            "now": ex.now(),
            "key_retention": prune.key_retention,
        }
        deleted += ex._prune_batch(params)
        if deleted >= prune.limit:
            break
    return deleted


def prune_spent_keys(ex: Executor, before: float, limit: int = 1000) -> int:
    return ex.change("prune_spent_keys", {"before": before, "limit": limit}).rowcount


def spent_key_of_job(ex: Executor, job_id: int) -> SpentKey | None:
    found = ex.query("spent_key_of_job", {"id": job_id})
    row = found.first("key", "task", "state", "spent_at", "expires_at")
    if row is None:
        return None
    key, task, state, spent_at, expires_at = row
    return SpentKey(key, job_id, task, state, float(spent_at), float(expires_at))


def prune_starts(ex: Executor, before: float, limit: int = 1000) -> int:
    return ex.change("prune_starts", {"before": before, "limit": limit}).rowcount


def prune_idempotency(ex: Executor, before: float, limit: int = 1000) -> int:
    return ex.change("prune_idempotency", {"before": before, "limit": limit}).rowcount


def prune_metric_minutes(ex: Executor, before: float, limit: int = 1000) -> int:
    params = {"before": before, "limit": limit}
    return ex.change("prune_metric_minutes", params).rowcount
