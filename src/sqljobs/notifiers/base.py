"""The notifier protocol, and the subscriber list its implementations share.

A notifier carries one kind of news, "there may be new work", from whoever committed it
to whoever sleeps waiting for it. It says nothing about *which* jobs: a woken worker asks
the database with a claim, so a lost or extra wake-up costs latency or one query, never a
job. That is why every implementation may drop, merge or repeat announcements freely.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection
from typing import Protocol

Callback = Callable[[], None]

EVERY_QUEUE = "*"
"""The announcement that concerns every subscriber (a schedule that is new or resumed, a
reconnection that may have missed news). Not a valid queue name, so it cannot clash."""


class Notifier(Protocol):
    """Announces commits that may have made work, and wakes those waiting for it."""

    @property
    def pushes(self) -> bool:
        """True if subscribers are called for every announcement, from any process, so
        those waiting need not poll :meth:`change_marker`."""

    def subscribe(self, callback: Callback, queues: Collection[str] | None = None) -> None:
        """Have ``callback`` called (from any thread; it must be quick, e.g. an Event's
        ``set``) when work may have arrived in one of ``queues`` (None: any queue)."""

    def unsubscribe(self, callback: Callback) -> None:
        """Stop calling ``callback``; unknown callbacks are ignored."""

    def announce(self, queues: Collection[str] | None = None) -> None:
        """Tell subscribers that a commit may have made work in ``queues`` (None: in any).
        Call it after the commit: a wake-up before it finds nothing and sleeps again."""

    def change_marker(self) -> int | None:
        """A number that changes when another connection commits, if there is a cheap one
        to read (None: there is not, rely on :meth:`subscribe`)."""

    def close(self) -> None:
        """Release threads and connections; the notifier may be used again afterwards."""


class Subscribers:
    """Callbacks with the queues each wants, woken by queue. Thread-safe: subscribing
    and waking happen on different threads (a worker, a listener, an enqueuer)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: list[tuple[Callback, frozenset[str] | None]] = []

    def add(self, callback: Callback, queues: Collection[str] | None = None) -> None:
        wanted = None if queues is None else frozenset(queues)
        with self._lock:
            self._entries = [*self._entries, (callback, wanted)]

    def remove(self, callback: Callback) -> None:
        with self._lock:
            self._entries = [(c, q) for c, q in self._entries if c != callback]

    def wake(self, queues: Collection[str] | None = None) -> None:
        """Call the callbacks that want any of ``queues``; None or :data:`EVERY_QUEUE`
        among them wakes all. Runs on a snapshot, so a callback may (un)subscribe."""
        everyone = queues is None or EVERY_QUEUE in queues
        for callback, wanted in self._entries:
            if everyone or wanted is None or not wanted.isdisjoint(queues or ()):
                callback()

    def __len__(self) -> int:
        return len(self._entries)
