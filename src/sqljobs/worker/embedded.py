"""A worker inside an existing event loop (:meth:`App.run_worker_async`): the ordinary
worker runs in a thread, so its handlers, sync and async, run exactly as in ``sqljobs
worker``, and cancelling the awaiting task stops it gracefully (it drains)."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from .config import WorkerConfig
from .worker import Worker

if TYPE_CHECKING:
    from ..app import App

log = logging.getLogger("sqljobs")


async def run_worker_async(app: App, config: WorkerConfig) -> None:
    """Run a worker in a thread until the awaiting task is cancelled, then stop it
    gracefully (it drains, as on SIGTERM) and re-raise the cancellation."""
    worker = Worker(app, config)
    running = asyncio.ensure_future(asyncio.to_thread(worker.run))
    try:
        await asyncio.shield(running)
    except asyncio.CancelledError:
        log.info("worker %s: the awaiting task was cancelled; stopping", worker.id)
        worker.stop()
        await running  # the drain, bounded by the worker's drain timeout
        raise
