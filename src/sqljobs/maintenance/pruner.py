"""The pruner: deletes done and cancelled jobs older than the retention, and idempotency
markers whose ttl ran out, in bounded batches.

Dead jobs are never pruned: they wait for a person. Small batches keep each delete's
lock short so claims are never stalled behind it.
"""

from __future__ import annotations

from ..backends.base import Backend


class Pruner:
    def __init__(self, backend: Backend, retention: float, batch: int = 1000) -> None:
        self.backend = backend
        self.retention = retention
        self.batch = batch

    def run_once(self, max_batches: int = 10) -> int:
        """Delete up to ``max_batches`` batches; return how many jobs were deleted."""
        self.backend.prune_idempotency(self.backend.now(), self.batch)
        if self.retention <= 0:
            return 0
        before = self.backend.now() - self.retention
        total = 0
        for _ in range(max_batches):
            n = self.backend.prune_finished(before, self.batch)
            total += n
            if n < self.batch:
                break
        return total
