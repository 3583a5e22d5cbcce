"""SQLite change detection: ``PRAGMA data_version`` instead of a push.

SQLite has no channel between processes, but each connection can read, from the
database's shared memory and without touching a table, a counter that moves whenever
*another* connection commits. A worker reads it every few milliseconds and spends a claim
only when it moved: near-instant pick-up at the cost of a memory read. The commit is the
announcement, so there is nothing to send; an App still wakes its own process's workers
through :mod:`.local`.
"""

from __future__ import annotations

from collections.abc import Callable, Collection

from .base import Callback, JobEventCallback


class SqliteNotifier:
    """``change_marker`` reads ``data_version`` on the calling thread's connection (the
    backend's ``read_version``); nothing is pushed, so subscribers are never called."""

    pushes = False

    def __init__(self, read_version: Callable[[], int]) -> None:
        self._read_version = read_version

    def subscribe(self, callback: Callback, queues: Collection[str] | None = None) -> None:
        """Nothing to subscribe to: waiting workers watch :meth:`change_marker`."""

    def unsubscribe(self, callback: Callback) -> None:
        """Nothing was subscribed."""

    def announce(self, queues: Collection[str] | None = None) -> None:
        """Nothing to send: the commit itself moves every other connection's
        ``data_version``."""

    def change_marker(self) -> int | None:
        return self._read_version()

    def watch_jobs(self, callback: JobEventCallback) -> None:
        """Nothing is pushed: those waiting on a job watch :meth:`change_marker` and look."""

    def unwatch_jobs(self, callback: JobEventCallback) -> None:
        """Nothing was watched."""

    def wait_listening(self, timeout: float) -> bool:
        return False

    def close(self) -> None:
        """Nothing to release: the backend owns the connections."""
