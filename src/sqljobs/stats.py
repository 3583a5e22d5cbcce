"""Backlog health in one call: counts by queue and state, and the age of the oldest due job."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .jobs import JobState


@dataclass(frozen=True)
class Stats:
    """A snapshot of the queue.

    ``oldest_pending_age`` is how long the oldest *due* pending job has waited, in
    seconds (None when nothing is waiting). It is the number to alert on: a count says
    how much work there is, the age says whether workers keep up.
    """

    counts: dict[str, dict[str, int]]
    oldest_pending_age: float | None
    oldest_pending_age_by_queue: dict[str, float] = field(default_factory=dict)
    workers: int = 0
    unserved: dict[str, int] = field(default_factory=dict)
    """Pending jobs by task, for tasks no live worker has registered: they wait until a
    worker that runs the task starts (a worker claims only the tasks it has)."""
    paused: list[str] = field(default_factory=list)
    """Queues paused with ``app.pause_queue``: workers claim none of their jobs."""

    def total(self, state: JobState | str) -> int:
        """Jobs in ``state`` across all queues."""
        key = str(state)
        return sum(by_state.get(key, 0) for by_state in self.counts.values())

    def to_dict(self) -> dict[str, Any]:
        return {
            "counts": {q: dict(s) for q, s in self.counts.items()},
            "oldest_pending_age": self.oldest_pending_age,
            "oldest_pending_age_by_queue": dict(self.oldest_pending_age_by_queue),
            "workers": self.workers,
            "unserved": dict(self.unserved),
            "paused": list(self.paused),
        }


def unserved_tasks(
    pending_by_task: Iterable[Sequence[Any]], live_worker_tasks: Iterable[Iterable[str]]
) -> dict[str, int]:
    """Pending counts of the tasks that no live worker runs."""
    served = {name for tasks in live_worker_tasks for name in tasks}
    return {task: int(n) for task, n in pending_by_task if task not in served}
