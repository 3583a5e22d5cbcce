"""The pruner: deletes finished jobs once older than the retention for their state (see
:class:`sqljobs.Retention`), keeping each one's business key apart for its own period
(guarantee 4), and deletes those keys once their period is over, idempotency markers
whose ttl ran out, rate-limit starts older than any window, and minutes of the metrics
rollup older than a day, in bounded batches.

Small batches keep each delete's lock short, so claims are never stalled behind it; a
run stops after ``max_batches`` per state and the next run (every ``prune_interval``)
goes on where it left off.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

from ..backends.base import Backend, PruneFinished
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
        self.behind = False
        """Whether the last run left rows it could have deleted (see :meth:`run_once`)."""

    def run_once(self, max_batches: int = 10) -> int:
        """Delete up to ``max_batches`` batches of each kind (idempotency markers, rate
        starts, spent keys, the jobs of each ended state); return how many jobs went.
        ``behind`` says whether a kind had more than that: its owner runs the pruner again
        soon, so a steady stream of more than ``max_batches`` x ``batch`` rows an interval
        is kept up with, a short delete at a time."""
        now = self.backend.now()
        self.behind = False
        self._batches(lambda: self.backend.prune_idempotency(now, self.batch), max_batches)
        self._batches(lambda: self.backend.prune_starts(now - STARTS_KEPT, self.batch), max_batches)
        self._batches(lambda: self.backend.prune_spent_keys(now, self.batch), max_batches)
        self.backend.prune_metric_minutes(now - MINUTES_KEPT, ROLLUP_MINUTES_PER_RUN)
        kept = self.retention.event_seconds()
        if kept is not None:
            before = now - kept
            self._batches(lambda: self.backend.prune_events(before, self.batch), max_batches)
        total = 0
        keys = self.retention.key_seconds()
        for state, age in self.retention.ages().items():

            def prune_state(before: float = now - age, state: str = state) -> int:
                return self.backend.prune_finished(PruneFinished(before, self.batch, state, keys))

            total += self._batches(prune_state, max_batches)
        return total

    def _batches(self, delete: Callable[[], int], max_batches: int) -> int:
        total = 0
        for _ in range(max_batches):
            n = delete()
            total += n
            if n < self.batch:
                return total
        self.behind = True  # every batch came back full: there is more
        return total
