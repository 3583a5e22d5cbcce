"""PostgreSQL wake-ups: LISTEN/NOTIFY, debounced per queue, with a trailing NOTIFY.

An enqueue sends its NOTIFY inside its own statement, so it costs no round trip and is
delivered only if the enqueue commits (the SQL is in the backend's ``.sql`` files; this
module decides which queues it names). A burst of enqueues must not serialise its commits
on NOTIFY's global lock, so a queue is named at most once per ``window``; the queues left
out are announced by a trailing NOTIFY after the window, so the last job of a burst is
never left to the workers' fallback poll. The payload is the queue name (or
:data:`~sqljobs.notifiers.base.EVERY_QUEUE`), so a subscriber may wait for its queues only.

One listener thread per backend holds a LISTEN connection and wakes the subscribers; it
reconnects with capped backoff and wakes everyone after reconnecting, since news may have
been missed meanwhile. Once listening, it sends a NOTIFY through the pool on a channel
of its own and warns if that never arrives: behind PgBouncer in transaction mode LISTEN
seems to succeed and then hears nothing. ``listen=False`` is poll-only mode, for that case.
"""

from __future__ import annotations

import logging
import math
import select
import threading
import time
import uuid
from collections.abc import Callable, Collection, Sequence
from typing import Any

import psycopg

from ..errors import BackendError
from .base import (
    EVERY_QUEUE,
    JOB_EVENT_PREFIX,
    Callback,
    JobEventCallback,
    JobWatchers,
    Subscribers,
)

log = logging.getLogger("sqljobs.postgres")

LISTEN_WAIT = 0.1
"""How long the listener waits on its socket at a time, so ``close()`` is prompt."""

PROBE_DELAY = 0.5
"""How long after LISTEN the probe NOTIFY waits: it borrows a pooled connection, which a
worker starting up wants for its first claim."""

PROBE_WAIT = 5.0
"""How long the listener waits for its own test NOTIFY before it warns that notifications
do not reach it."""


def channel_for(schema: str) -> str:
    """The channel of the sqljobs tables in ``schema``: queues in different schemas of one
    database do not wake each other's workers."""
    return f"sqljobs_{schema}"


class PostgresNotifier:
    """LISTEN/NOTIFY on ``channel``.

    ``connect`` opens a dedicated autocommit connection for LISTEN; ``listen_sql`` is the
    LISTEN statement (``{channel}`` is filled in here); ``send(queues, channel)`` sends
    one NOTIFY per queue through the backend's pool, after a commit.
    """

    def __init__(
        self,
        channel: str,
        *,
        listen: bool,
        window: float,
        connect: Callable[[], psycopg.Connection[Any]],
        listen_sql: str,
        send: Callable[[Sequence[str], str], None],
    ) -> None:
        self.channel = channel
        self.listen = listen
        self.window = window
        self._connect = connect
        self._listen_sql = listen_sql.replace("{channel}", channel)
        self._send = send
        self._lock = threading.Lock()
        self._subscribers = Subscribers()
        self._job_watchers = JobWatchers()
        self._listening = threading.Event()
        self._seen = 0
        self._listener: threading.Thread | None = None
        self._closing = threading.Event()
        self._last_notify: dict[str, float] = {}
        self._trailing: dict[str, threading.Timer] = {}
        # the listener's own channel, for the NOTIFY that tells it notifications arrive
        self._probe_channel = f"sqljobs_probe_{uuid.uuid4().hex}"
        self._probe_due: float | None = None  # when the probe sent is overdue

    # -- the protocol ------------------------------------------------------------------

    @property
    def pushes(self) -> bool:
        """True when a LISTEN thread wakes subscribers, so they need not check for changes."""
        return self.listen

    @property
    def pushes_job_events(self) -> bool:
        """True when the LISTEN thread hears ``#end:ID`` and ``#cancel:ID``."""
        return self.listen

    def subscribe(self, callback: Callback, queues: Collection[str] | None = None) -> None:
        """Call ``callback`` (from the listener thread) when jobs may have been enqueued."""
        self._subscribers.add(callback, queues)
        if self.listen:
            self._ensure_listener()

    def unsubscribe(self, callback: Callback) -> None:
        self._subscribers.remove(callback)

    def watch_jobs(self, callback: JobEventCallback) -> None:
        """Call ``callback`` (from the listener thread) on ``#end:ID`` / ``#cancel:ID``."""
        self._job_watchers.add(callback)
        if self.listen:
            self._ensure_listener()

    def unwatch_jobs(self, callback: JobEventCallback) -> None:
        self._job_watchers.remove(callback)

    def wait_listening(self, timeout: float) -> bool:
        """Wait until the listener has run its LISTEN (True), so a NOTIFY sent from now
        on reaches it; False in poll-only mode or if it could not within ``timeout``."""
        if not self.listen:
            return False
        self._ensure_listener()
        return self._listening.wait(timeout)

    def announce(self, queues: Collection[str] | None = None) -> None:
        """NOTIFY now, outside any enqueue (a schedule that is new or resumed)."""
        if self.listen:
            self._send(sorted(queues) if queues else [EVERY_QUEUE], self.channel)

    def change_marker(self) -> int | None:
        """How many wake-ups the listener has delivered (None in poll-only mode)."""
        if not self.listen:
            return None
        self._ensure_listener()
        return self._seen

    def commit_counter(self) -> int | None:
        """The wake-ups heard (None in poll-only mode): PostgreSQL has no cheaper count."""
        return self.change_marker()

    def close(self) -> None:
        closing, self._closing = self._closing, threading.Event()
        closing.set()
        with self._lock:
            timers, self._trailing = list(self._trailing.values()), {}
            listener, self._listener = self._listener, None
        for timer in timers:
            timer.cancel()
        if listener is not None:
            listener.join(timeout=2)
        self._listening.clear()

    # -- what an enqueue names in its NOTIFY ---------------------------------------------

    def debounce(self, queues: Collection[str]) -> tuple[list[str], list[str]]:
        """The queues to NOTIFY in the enqueue's own statement (each at most once per
        window), and those to leave to :meth:`notify_later`, after the commit."""
        if not self.listen:
            return [], []
        now = time.monotonic()
        with self._lock:
            send = [q for q in queues if now - self._last_notify.get(q, 0.0) >= self.window]
            for q in send:
                self._last_notify[q] = now
        return sorted(send), sorted(set(queues) - set(send))

    def in_callers_transaction(self, queues: Collection[str]) -> list[str]:
        """The queues an enqueue in the caller's transaction NOTIFYs: all of them, since
        nothing can follow up once the caller commits, whenever that is."""
        return sorted(set(queues)) if self.listen else []

    def notify_later(self, queues: Collection[str]) -> None:
        """A trailing NOTIFY for each of ``queues`` one window from now, unless one is
        already due: call it after the commit, or it could wake workers too early."""
        with self._lock:
            for q in queues:
                if q not in self._trailing:
                    timer = threading.Timer(self.window, self._trailing_notify, (q,))
                    timer.daemon = True
                    self._trailing[q] = timer
                    timer.start()

    def _trailing_notify(self, queue: str) -> None:
        with self._lock:
            self._trailing.pop(queue, None)
            self._last_notify[queue] = time.monotonic()
        try:
            self._send([queue], self.channel)
        except BackendError as exc:  # the workers' fallback poll finds the jobs
            log.debug("trailing notify failed: %s", exc)

    # -- the listener thread -------------------------------------------------------------

    def _ensure_listener(self) -> None:
        with self._lock:
            if self._listener is None:
                self._listener = threading.Thread(
                    target=self._listen, args=(self._closing,), name="sqljobs-listen", daemon=True
                )
                self._listener.start()

    def _listen(self, closing: threading.Event) -> None:
        failures, connected_before = 0, False
        while not closing.is_set():
            try:
                with self._connect() as conn:
                    conn.execute(self._listen_sql)
                    conn.execute(f"LISTEN {self._probe_channel}")
                    self._listening.set()
                    failures = 0
                    self._wake(None)  # anything enqueued while we were not listening
                    if connected_before:  # and any job event missed while the line was down
                        self._job_watchers.emit("cancel", None)
                    connected_before = True
                    self._probe()
                    while not closing.is_set():
                        self._drain(conn)
                        self._check_probe()
            except (psycopg.Error, OSError) as exc:
                self._listening.clear()
                failures += 1
                pause = min(5.0, 0.1 * 2**failures)
                log.warning("LISTEN connection lost (%s); reconnecting in %.1f s", exc, pause)
                closing.wait(pause)

    def _drain(self, conn: psycopg.Connection[Any]) -> None:
        """Wait up to LISTEN_WAIT for the socket, then read every notification libpq has.
        Reading at the libpq level keeps nothing between calls that could be dropped,
        unlike restarting psycopg's notifies() generator."""
        if not select.select([conn.fileno()], [], [], LISTEN_WAIT)[0]:
            return
        pgconn = conn.pgconn
        pgconn.consume_input()
        queues: set[str] = set()
        events: list[str] = []
        while (notification := pgconn.notifies()) is not None:
            if notification.relname.decode() == self._probe_channel:
                with self._lock:
                    self._probe_due = None
                continue
            text = notification.extra.decode("utf-8", "replace")
            if text.startswith(JOB_EVENT_PREFIX):
                events.append(text)
            else:
                queues.add(text)
        if queues:
            self._wake(queues)
        for text in events:
            self._job_watchers.emit_text(text)

    def _probe(self) -> None:
        """NOTIFY the listener's own channel through the pool (another connection), from
        a thread of its own: a busy pool must not keep the listener from its socket. The
        wait for it counts from when the NOTIFY was sent."""
        self._probe_due = math.inf
        threading.Thread(target=self._send_probe, name="sqljobs-probe", daemon=True).start()

    def _send_probe(self) -> None:
        if self._closing.wait(PROBE_DELAY):  # not in a starting worker's way to its first job
            return
        for attempt in range(3):  # a pool busy at start-up may refuse the first try
            try:
                self._send(["probe"], self._probe_channel)
                break
            except BackendError as exc:
                log.debug("listener probe not sent (try %d of 3): %s", attempt + 1, exc)
                if attempt == 2 or self._closing.wait(0.5):  # nothing to learn this time
                    with self._lock:
                        self._probe_due = None
                    return
        with self._lock:
            if self._probe_due is not None:  # not heard yet
                self._probe_due = time.monotonic() + PROBE_WAIT

    def _check_probe(self) -> None:
        if self._probe_due is not None and time.monotonic() > self._probe_due:
            self._probe_due = None
            log.warning(
                "LISTEN on %s heard nothing of a NOTIFY sent %.0f s ago: notifications do "
                "not reach this connection, so workers only learn of new jobs at their poll. "
                "Behind PgBouncer in transaction mode, add ?listen=false to the URL "
                "(poll-only mode; see docs/pgbouncer.md)",
                self.channel, PROBE_WAIT,
            )  # fmt: skip

    def _wake(self, queues: Collection[str] | None) -> None:
        self._seen += 1
        self._subscribers.wake(queues)
