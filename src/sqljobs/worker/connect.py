"""Reaching the database: a worker waits, with capped backoff, while its database cannot
be reached (a server that restarts, a deploy that starts workers before the database)
and fails at once on what waiting will not fix (a wrong password, a missing database)."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..backends import worker_options
from ..backends.base import Backend, WorkerInfo
from ..errors import BackendError
from .config import WorkerConfig

if TYPE_CHECKING:
    from ..app import App

log = logging.getLogger("sqljobs.worker")

CONNECT_BACKOFF_FIRST = 0.1
CONNECT_BACKOFF_CAP = 5.0
"""A worker that cannot reach its database at start-up tries again after these pauses,
doubling from the first to the cap, until it connects or is stopped."""


def connect(
    app: App,
    config: WorkerConfig,
    info: WorkerInfo,
    stop_requested: Callable[[], bool],
    wake: threading.Event,
) -> Backend | None:
    """Open (and migrate) the worker's backend and register the worker, waiting while the
    database cannot be reached; None if ``stop_requested()`` said so meanwhile. Other
    errors fail at once."""
    options = worker_options(app.url, config.concurrency, config.synchronous)
    pause, waited = CONNECT_BACKOFF_FIRST, 0.0
    while True:
        backend: Backend | None = None
        try:
            backend = app._open_backend(**options)
            backend.register_worker(info)
            if waited:
                log.info("worker %s: database reachable after %.1f s", info.id, waited)
            return backend
        except BackendError as exc:
            if backend is not None:
                with contextlib.suppress(Exception):
                    backend.close()
            if not unreachable(exc):
                raise
            if stop_requested():
                return None
            log.warning(
                "worker %s: database unreachable (%s); retrying in %.1f s", info.id, exc, pause
            )
            wake.wait(pause)
            wake.clear()
            waited += pause
            pause = min(pause * 2, CONNECT_BACKOFF_CAP)


def unreachable(exc: BackendError) -> bool:
    """True when the database could not be reached (refused, down, starting up, shutting
    down): worth waiting for. A server that answered with an error (a wrong password, a
    missing database) is not, nor is a SQLite file that cannot be opened."""
    cause = exc.__cause__
    if cause is None or not hasattr(cause, "sqlstate"):  # not a PostgreSQL driver error
        return False
    state = cause.sqlstate
    if state is not None:
        return bool(state.startswith(("08", "57P", "53300")))
    # libpq reports a failed connection without a SQLSTATE: the server's own refusals
    # come as "FATAL: ...", and only those that pass with time are worth the wait
    text = str(cause)
    return "FATAL:" not in text or any(passing in text for passing in _PASSING)


_PASSING = (
    "the database system is starting up",
    "the database system is shutting down",
    "the database system is in recovery mode",
    "the database system is not yet accepting connections",
    "too many clients",
    "remaining connection slots are reserved",
)
