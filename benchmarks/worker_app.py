"""The app a benchmark worker subprocess loads: ``python -m sqljobs --app worker_app:app``.

The benchmark process registers the same tasks on its own App to enqueue them. ``stamp(sent)``
appends ``time.time() - sent`` to the file named by ``BENCH_OUT``: the delay from just
before the enqueue call to the start of the handler, which is what latency means here.
``echo(value)`` returns its argument, for a caller that waits on the result.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import TextIO

import sqljobs

_lock = threading.Lock()
_out: TextIO | None = None


def _record(delay: float) -> None:
    global _out
    with _lock:
        if _out is None:
            _out = open(os.environ["BENCH_OUT"], "a", buffering=1)  # noqa: SIM115
        _out.write(f"{delay:.6f}\n")


def register(app: sqljobs.App, on_noop: Callable[[], None] | None = None) -> None:
    """Register ``noop`` (and ``anoop``, its ``async def`` twin), ``stamp`` and ``echo`` on
    ``app``; ``on_noop`` counts in-process calls."""

    @app.task(name="noop")
    def noop(i: int) -> None:
        if on_noop is not None:
            on_noop()

    @app.task(name="anoop")
    async def anoop(i: int) -> None:
        if on_noop is not None:
            on_noop()

    @app.task(name="stamp")
    def stamp(sent: float) -> None:
        _record(time.time() - sent)  # first thing: the start time is what is measured

    @app.task(name="echo")
    def echo(value: int) -> int:
        return value  # stored as the job's result, for a caller waiting on it


app = sqljobs.App()  # the URL comes from the command line's --url
register(app)
