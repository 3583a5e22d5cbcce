"""The pruner: deletes finished jobs once older than the retention for their state (see
:class:`sqljobs.Retention`), idempotency markers whose ttl ran out, rate-limit starts
older than any window, and minutes of the metrics rollup older than a day, in bounded
batches.

Small batches keep each delete's lock short, so claims are never stalled behind it; a
run stops after ``max_batches`` per state and the next run (every ``prune_interval``)
goes on where it left off.
"""

from __future__ import annotations

from datetime import timedelta

from ..backends.base import Backend
from ..retention import Retention
from ..rollup import MINUTES_KEPT

STARTS_KEPT = 3600.0
"""Rate-limit starts older than this (the longest window a rate has, ``/h``) count for no
window: the pruner deletes them."""

ROLLUP_MINUTES_PER_RUN = 60
"""Minutes of the metrics rollup older than :data:`~sqljobs.rollup.MINUTES_KEPT` deleted
per run, at most (a few rows per task and outcome each): a run a minute keeps up."""


class Pruner:
    def __init__(
        self, backend: Backend, retention: Retention | float | timedelta | None, batch: int = 1000
    ) -> None:
        self.backend = backend
        self.retention = Retention.of(retention)
        self.batch = batch

    def run_once(self, max_batches: int = 10) -> int:
        """Delete up to ``max_batches`` batches per state; return how many jobs went."""
        now = self.backend.now()
        self.backend.prune_idempotency(now, self.batch)
        self.backend.prune_starts(now - STARTS_KEPT, self.batch)
        self.backend.prune_metric_minutes(now - MINUTES_KEPT, ROLLUP_MINUTES_PER_RUN)
        total = 0
        for state, age in self.retention.ages().items():
            for _ in range(max_batches):
                n = self.backend.prune_finished(now - age, self.batch, state)
                total += n
                if n < self.batch:
                    break
        return total
