"""The notifier protocol, and the subscriber list its implementations share.

A notifier carries two kinds of news from whoever committed it to whoever sleeps waiting
for it: "there may be new work" (by queue), and "this job ended" or "this job was
cancelled" (job events, for callers waiting on a result and workers holding the job).
Either is only a hint to look: a woken worker asks the database with a claim or a
heartbeat, a woken waiter reads the job, so a lost or extra wake-up costs latency or one
query, never a job. That is why every implementation may drop, merge or repeat
announcements freely, and why waiters still look once a second on their own.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Collection
from typing import Protocol

log = logging.getLogger("sqljobs")

Callback = Callable[[], None]
JobEventCallback = Callable[[str, "int | None"], None]
"""Called with a job event's kind (``"end"``, ``"cancel"``) and the job id, or None when
any job may have changed (a reconnection, a bulk cancel)."""

JOB_EVENT_PREFIX = "#"
"""Marks a job event on a channel that also carries queue names (``#end:12``,
``#cancel:*``): ``#`` is not allowed in a queue name, so the two cannot clash."""

EVERY_QUEUE = "*"
"""The announcement that concerns every subscriber (a schedule that is new or resumed, a
reconnection that may have missed news). Not a valid queue name, so it cannot clash."""


class Notifier(Protocol):
    """Announces commits that may have made work, and wakes those waiting for it."""

    @property
    def pushes(self) -> bool:
        """True if subscribers are called for every announcement, from any process, so
        those waiting need not poll :meth:`change_marker`."""

    @property
    def pushes_job_events(self) -> bool:
        """True if :meth:`watch_jobs` callbacks are called for job events from any
        process, so those waiting on a job need not poll :meth:`change_marker`."""

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

    def commit_counter(self) -> int | None:
        """A number that moves whenever another connection commits anything, if there is
        a cheap one (None: there is not): what those waiting on a job's end watch where
        job events are not pushed."""

    def watch_jobs(self, callback: JobEventCallback) -> None:
        """Have ``callback`` called (from any thread, quickly) on job events, where the
        notifier can push them; a notifier that cannot never calls it."""

    def unwatch_jobs(self, callback: JobEventCallback) -> None:
        """Stop calling ``callback``; unknown callbacks are ignored."""

    def wait_listening(self, timeout: float) -> bool:
        """Wait until an announcement made from now on would reach this process's
        subscribers (True); False if the notifier does not push."""

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


class JobWatchers:
    """The callbacks that want job events. Thread-safe like :class:`Subscribers`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._callbacks: list[JobEventCallback] = []

    def add(self, callback: JobEventCallback) -> None:
        with self._lock:
            self._callbacks = [*self._callbacks, callback]

    def remove(self, callback: JobEventCallback) -> None:
        with self._lock:
            self._callbacks = [c for c in self._callbacks if c != callback]

    def emit(self, kind: str, job_id: int | None) -> None:
        for callback in self._callbacks:
            try:
                callback(kind, job_id)
            except Exception:  # one bad callback must not end the listener for everyone
                log.exception("a job event callback raised on %s %s", kind, job_id)

    def emit_text(self, text: str) -> None:
        """Emit the event a NOTIFY payload such as ``#end:12`` or ``#cancel:*`` names."""
        kind, _, target = text[len(JOB_EVENT_PREFIX) :].partition(":")
        job_id = int(target) if target.isdigit() else None
        self.emit(kind, job_id)

    def __len__(self) -> int:
        return len(self._callbacks)
