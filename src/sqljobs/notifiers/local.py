"""In-process wake-ups: an enqueue wakes the workers of its own process at once.

No database is involved, so this is the fastest path and works the same on every backend:
an App announces after its enqueue commits, and the workers it runs (threads of this
process) are woken without waiting for a NOTIFY or a change check.
"""

from __future__ import annotations

import itertools
from collections.abc import Collection

from .base import Callback, JobEventCallback, JobWatchers, Subscribers


class LocalNotifier:
    """Subscribers in this process, called synchronously by :meth:`announce`."""

    pushes = True
    pushes_job_events = True

    def __init__(self) -> None:
        self._subscribers = Subscribers()
        self._job_watchers = JobWatchers()
        self._announced = itertools.count(1)
        self._marker = 0

    def subscribe(self, callback: Callback, queues: Collection[str] | None = None) -> None:
        self._subscribers.add(callback, queues)

    def unsubscribe(self, callback: Callback) -> None:
        self._subscribers.remove(callback)

    def announce(self, queues: Collection[str] | None = None) -> None:
        self._marker = next(self._announced)
        self._subscribers.wake(queues)

    def change_marker(self) -> int | None:
        """How many announcements this process has made."""
        return self._marker

    def commit_counter(self) -> int | None:
        return self._marker

    def watch_jobs(self, callback: JobEventCallback) -> None:
        self._job_watchers.add(callback)

    def unwatch_jobs(self, callback: JobEventCallback) -> None:
        self._job_watchers.remove(callback)

    def emit(self, kind: str, job_id: int | None) -> None:
        """A job event of this process (an App's own cancel), to its own workers."""
        self._job_watchers.emit(kind, job_id)

    def wait_listening(self, timeout: float) -> bool:
        return True  # announcements are calls in this process

    def close(self) -> None:
        """Nothing to release: subscribers stay until they unsubscribe."""
