"""Waiting on jobs: what lets ``handle.result()`` sleep until its job ends.

A waiter registers a callback for its job id with the App's :class:`JobWatcher` and then
reads the job; the callback says "look again". Where the notifier pushes (PostgreSQL), a
job a caller waits on is flagged (``watch_job``) and its end sends a NOTIFY that the
listener turns into the callback, within a millisecond or so. Where it does not
(SQLite), one thread per App reads the database's change counter every few milliseconds
while anyone waits, and on a change asks, in one query for all waiters, which of their
jobs ended. Either way each waiter also looks on its own once a second, so a lost
announcement costs a second, never a result.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .backends.base import Backend

log = logging.getLogger("sqljobs")

Wake = Callable[[], None]

FALLBACK_LOOK = 1.0
"""Seconds between a waiter's own looks at its job while no announcement comes."""

CHANGE_CHECK = 0.002
"""How often the watcher thread reads a non-pushing backend's change counter."""

NO_MARKER_LOOK = 0.1
"""Without push and without a change counter (PostgreSQL in poll-only mode, for PgBouncer
in transaction mode), how often the watcher asks which waited-on jobs ended."""


class JobWatcher:
    """Wakes callers waiting on jobs of one backend (one watcher per App)."""

    def __init__(self, backend: Backend, change_check: float = CHANGE_CHECK) -> None:
        self._backend = backend
        self._change_check = change_check
        self._lock = threading.Lock()
        self._waiting: dict[int, list[Wake]] = {}
        self._thread: threading.Thread | None = None
        self._closing = threading.Event()
        self._pushes = backend.notifier.pushes_job_events
        if self._pushes:
            backend.notifier.watch_jobs(self._on_event)

    def add(self, job_id: int, wake: Wake) -> None:
        """Call ``wake`` when job ``job_id`` may have ended. Once this returns, an end
        committed from now on is not missed (the listener is listening, or the change
        thread is watching)."""
        self.register(job_id, wake)
        self.prepare(job_id)

    def register(self, job_id: int, wake: Wake) -> None:
        """The quick half of :meth:`add` (no I/O): safe to call on an event loop."""
        with self._lock:
            self._waiting.setdefault(job_id, []).append(wake)
            start = not self._pushes and self._thread is None
            if start:
                self._thread = threading.Thread(
                    target=self._watch_changes, name="sqljobs-job-watcher", daemon=True
                )
                self._thread.start()

    def prepare(self, job_id: int) -> None:
        """The slow half of :meth:`add`: make sure the job's end will be pushed (wait for
        the LISTEN, flag the job) where the backend pushes."""
        if self._pushes:
            self._backend.notifier.wait_listening(FALLBACK_LOOK)
            self._backend.watch_job(job_id)

    def remove(self, job_id: int, wake: Wake) -> None:
        with self._lock:
            wakes = [w for w in self._waiting.get(job_id, []) if w is not wake]
            if wakes:
                self._waiting[job_id] = wakes
            else:
                self._waiting.pop(job_id, None)

    def close(self) -> None:
        if self._pushes:
            self._backend.notifier.unwatch_jobs(self._on_event)
        self._closing.set()
        thread = self._thread
        if thread is not None:
            thread.join(timeout=1)

    def _wake(self, job_ids: set[int] | None) -> None:
        with self._lock:
            chosen = [
                wake
                for job_id, wakes in self._waiting.items()
                if job_ids is None or job_id in job_ids
                for wake in wakes
            ]
        for wake in chosen:
            wake()

    def _on_event(self, _kind: str, job_id: int | None) -> None:
        """A job ended or was cancelled (None: any may have)."""
        self._wake(None if job_id is None else {job_id})

    def _watch_changes(self) -> None:
        """While anyone waits: on each change of the database, one query for the jobs of
        all waiters that ended."""
        marker: int | None = None
        looked = 0.0
        try:
            while not self._closing.wait(self._change_check):
                current = self._backend.notifier.commit_counter()  # before the snapshot: an end
                with self._lock:  # between the two is then seen as a change next time
                    watched = set(self._waiting)
                    if not watched:
                        self._thread = None  # the next waiter starts a new one
                        return
                now = time.monotonic()
                if current is None:  # no change counter (PostgreSQL without LISTEN)
                    if now - looked < NO_MARKER_LOOK:
                        continue
                elif current == marker:
                    continue
                marker, looked = current, now
                ended = self._backend.ended_among(watched)
                if ended:
                    self._wake(ended)
        except Exception:  # waiters still look once a second on their own
            log.exception("the job watcher stopped; waiters fall back to looking every second")
            with self._lock:
                self._thread = None
