"""The app a worker subprocess loads for the latency benchmark (``latency_app:app``).

``stamp(sent)`` appends ``time.time() - sent`` (seconds) to the file named by
``BENCH_LATENCY_OUT``: the delay from just before the enqueue call to the handler start.
The benchmark process registers the same task on its own App to enqueue it.
"""

from __future__ import annotations

import os
import threading
import time
from typing import TextIO

import sqljobs

_lock = threading.Lock()
_out: TextIO | None = None


def _record(delay: float) -> None:
    global _out
    with _lock:
        if _out is None:
            _out = open(os.environ["BENCH_LATENCY_OUT"], "a", buffering=1)  # noqa: SIM115
        _out.write(f"{delay:.6f}\n")


def register(app: sqljobs.App) -> sqljobs.Task:
    """Register ``stamp`` on ``app``; the worker and the enqueuer both call this."""

    @app.task(name="stamp")
    def stamp(sent: float) -> None:
        _record(time.time() - sent)  # first thing: the start time is what is measured

    return stamp


app = sqljobs.App()  # the URL comes from SQLJOBS_URL
register(app)
