"""Wake-ups and the clock: the notifier an engine brings, subscribing to enqueues, the
change marker, watching a job, and the backend's clock."""

from __future__ import annotations

import threading

from sqljobs import App
from sqljobs.backends import Backend

from .conftest import new_job

COVERS = {"now", "notifier", "subscribe", "pushes_changes", "change_marker", "watch_job"}


def test_another_connections_enqueue_is_seen(app: App, backend: Backend) -> None:
    assert backend.notifier is not None
    woken = threading.Event()
    backend.subscribe(woken.set, ["default"])
    before = backend.change_marker()
    other = app._open_backend()
    try:
        (made,) = other.enqueue_jobs([new_job(other, "t", 1)])
        backend.watch_job(made.id)
        if backend.pushes_changes:
            assert woken.wait(10), "a pushing engine announces every enqueue"
        else:
            assert before is not None and backend.change_marker() != before
    finally:
        other.close()


def test_the_clock_is_unix_seconds(backend: Backend) -> None:
    import time

    assert abs(backend.now() - time.time()) < 60
