"""SQLite wake-ups: a datagram from the process that committed.

The processes sharing a SQLite file share a host, so the one that committed an enqueue
tells the others itself: one datagram to each waiting process's socket in the folder
beside the database (:mod:`.datagram`), after the commit. A waiting worker blocks until
then, and so does the listener: an idle worker costs nothing.

An enqueue inside the caller's own ``sqlite3`` transaction commits when the caller
decides: it sends "a commit is coming" instead, and the listeners read ``PRAGMA
data_version`` (a counter in shared memory that moves when another connection commits)
every 2 ms for the next two seconds, waking their subscribers when it moves. What no
sqljobs call made (another program inserting jobs, a transaction held open longer than
that) is found by the workers' fallback poll. Where no socket can be bound (no Unix
sockets, a folder that cannot be written) or with ``listen=False``, nothing is pushed to
this process and its workers read that counter every few milliseconds instead, as before.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Collection

from ..errors import BackendError
from . import datagram
from .base import (
    EVERY_QUEUE,
    JOB_EVENT_PREFIX,
    Callback,
    JobEventCallback,
    JobWatchers,
    Subscribers,
)

log = logging.getLogger("sqljobs")

EVENTS_NAMED = 50
"""Up to this many job events go by id in one datagram; more go as one for any job."""

COMING_WATCH = 2.0
"""After an enqueue in a caller's transaction says a commit is coming, how long the
listener reads ``data_version`` every :data:`COMING_CHECK` seconds."""

COMING_CHECK = 0.002

COMING_PREFIX = "?"
"""Marks "a commit is coming" for the queues named after it (``?mail``): not allowed in
a queue name, so it cannot clash."""


class SqliteNotifier:
    """Datagrams between the processes of the database's host; ``change_marker`` is
    ``data_version`` on the calling thread's connection (the backend's ``read_version``).
    Job events (ends, cancels) are not pushed: waiters read the change marker."""

    pushes_job_events = False

    def __init__(
        self,
        read_version: Callable[[], int],
        database: str,
        *,
        push: bool = True,
    ) -> None:
        self._read_version = read_version
        self.folder = datagram.folder_for(database)
        self._can_send = datagram.usable(self.folder)
        self._can_push = push and self._can_send  # (listen=False: send, never bind)
        self._sender = datagram.Sender(self.folder)
        self._subscribers = Subscribers()
        self._job_watchers = JobWatchers()
        self._lock = threading.Lock()
        self._listener: datagram.Listener | None = None
        self._listener_pid = 0
        self._version: int | None = None  # data_version at the listener's last look
        self._watch_until = 0.0  # monotonic time until which a commit may be coming
        self._heard = 0
        self._wakes = 0  # wake-ups delivered: datagrams, and commits a watch found
        self.looks = 0
        """How many times the listener has read ``data_version`` (its idle cost)."""

    @property
    def pushes(self) -> bool:
        """True while this process listens: subscribers are then called for every
        announcement."""
        with self._lock:
            return self._listener is not None and self._listener_pid == os.getpid()

    def subscribe(self, callback: Callback, queues: Collection[str] | None = None) -> None:
        self._subscribers.add(callback, queues)
        self._ensure_listener()

    def unsubscribe(self, callback: Callback) -> None:
        self._subscribers.remove(callback)
        if not len(self._subscribers):
            self._stop_listener()

    def announce(self, queues: Collection[str] | None = None) -> None:
        """After a commit: a datagram naming ``queues`` (None: all) to every listener of
        this database, this process's included."""
        if self._can_send:
            self._sender.send(datagram.encode(queues))

    def change_marker(self) -> int | None:
        """While this process listens: how many wake-ups the listener has delivered (as on
        PostgreSQL: a commit that announced nothing, such as another worker's heartbeat,
        is no reason to claim). Otherwise ``data_version``, read by waiting workers every
        few milliseconds."""
        if self._listener is None and len(self._subscribers):  # used again after close()
            self._ensure_listener()
        if self.pushes:
            return self._wakes
        return self._read_version()

    def commit_counter(self) -> int | None:
        """``data_version``: it moves whenever another connection commits (for those
        waiting on a job's end, which is not announced)."""
        return self._read_version()

    def heard(self) -> int:
        """How many announcements this process's listener has received."""
        return self._heard

    def announce_coming(self, queues: Collection[str]) -> None:
        """Before a commit this process does not control (an enqueue in the caller's
        transaction): listeners read ``data_version`` closely for a while and wake their
        subscribers when it moves, so the caller's commit is found within milliseconds."""
        if self._can_send and queues:
            self._sender.send(datagram.encode([f"{COMING_PREFIX}{q}" for q in queues]))

    def announce_events(self, kind: str, job_ids: Collection[int]) -> None:
        """After a commit: job events (``"cancel"``) to every listener, so a worker in
        another process holding one of the jobs hears it at once; many at a time go as
        one event for any job."""
        if not self._can_send or not job_ids:
            return
        targets = [str(i) for i in job_ids] if len(job_ids) <= EVENTS_NAMED else ["*"]
        self._sender.send(datagram.encode([f"{JOB_EVENT_PREFIX}{kind}:{t}" for t in targets]))

    def watch_jobs(self, callback: JobEventCallback) -> None:
        """Call ``callback`` on the cancels announced from any process (job ends are not
        pushed: those waiting on a result read :meth:`change_marker`)."""
        self._job_watchers.add(callback)

    def unwatch_jobs(self, callback: JobEventCallback) -> None:
        self._job_watchers.remove(callback)

    def wait_listening(self, timeout: float) -> bool:
        """The socket is bound before :meth:`subscribe` returns: True while listening."""
        return self.pushes

    def close(self) -> None:
        self._stop_listener()
        self._sender.close()

    # -- the listener ------------------------------------------------------------------

    def _ensure_listener(self) -> None:
        with self._lock:
            if not self._can_push:
                return
            if self._listener is not None and self._listener_pid == os.getpid():
                return
            self._listener = None  # (a forked child: the parent's thread is not here)
            self._version = None
            try:
                self._listener = datagram.Listener(
                    self.folder, self._on_message, self._on_tick, self._tick
                )
            except OSError as exc:
                self._can_push = False
                log.info(
                    "no wake-up socket in %s (%s): workers check the database for changes "
                    "every few milliseconds instead", self.folder, exc,
                )  # fmt: skip
                return
            self._listener_pid = os.getpid()

    def _stop_listener(self) -> None:
        with self._lock:
            listener, self._listener = self._listener, None
            mine = self._listener_pid == os.getpid()
        if listener is not None and mine:
            listener.close()

    def _on_message(self, names: list[str]) -> None:
        self._heard += 1
        if any(n.startswith(COMING_PREFIX) for n in names):
            # the first look compares with the last one taken, however old: a commit
            # that came before this datagram was read still wakes everyone
            self._watch_until = time.monotonic() + COMING_WATCH
            names = [n for n in names if not n.startswith(COMING_PREFIX)]
        queues = [n for n in names if not n.startswith(JOB_EVENT_PREFIX)]
        if queues:
            self._wakes += 1
            self._subscribers.wake(None if EVERY_QUEUE in queues else queues)
        for name in names:
            if name.startswith(JOB_EVENT_PREFIX):
                self._job_watchers.emit_text(name)

    def _tick(self) -> float | None:
        """Seconds between looks at ``data_version`` while a commit is coming; None (no
        looks: the listener blocks) otherwise."""
        return COMING_CHECK if time.monotonic() < self._watch_until else None

    def _on_tick(self) -> None:
        """Wake everyone if another connection committed since the last look: it may
        have been the enqueue a caller's commit made visible."""
        self.looks += 1
        try:
            version = self._read_version()
        except BackendError as exc:  # the next look tries again; workers still poll
            log.debug("data_version not read: %s", exc)
            return
        if self._version is not None and version != self._version:
            self._wakes += 1
            self._subscribers.wake(None)
        self._version = version
