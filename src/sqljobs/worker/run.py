"""Running a worker for an App: ``app.run_worker()`` in the foreground, under a
supervisor with ``processes`` > 1, and ``app.run_worker_async()`` inside an existing
event loop. There the ordinary worker runs in a thread, so its handlers, sync and async,
run exactly as in ``sqljobs worker``, and cancelling the awaiting task stops it
gracefully (it drains)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..errors import ConfigurationError
from ..validate import check_queues, is_whole
from .config import WorkerConfig
from .supervisor import run_supervised
from .worker import Worker

if TYPE_CHECKING:
    from ..app import App

log = logging.getLogger("sqljobs")


def run_worker(
    app: App,
    concurrency: int = 8,
    queues: str | Sequence[str] | None = None,
    *,
    processes: int = 1,
    drain_timeout: float | None = None,
    max_tasks_per_process: int | None = None,
    max_memory_per_process: int | str | None = None,
    **options: Any,
) -> None:
    """``app.run_worker``: run until SIGTERM/SIGINT, in this process or supervised."""
    if not is_whole(processes, 1):
        raise ConfigurationError(f"processes must be an int >= 1, got {processes!r}")
    config = WorkerConfig(
        concurrency=concurrency,
        queues=check_queues(queues, "run_worker(queues=...)"),
        drain_timeout=drain_timeout,
        max_tasks_per_process=max_tasks_per_process,
        max_memory_per_process=max_memory_per_process,
        **options,
    )
    if processes > 1:
        run_supervised(app, config, processes)
    else:
        alone_warnings(app, config)
        Worker(app, config).run()


def alone_warnings(app: App, config: WorkerConfig) -> None:
    """Say once, at start, what a worker without a supervisor cannot do: recycling and
    hard time limits both replace a process, which needs ``processes`` > 1."""
    if config.max_tasks_per_process is not None or config.max_memory_per_process is not None:
        log.warning(
            "max_tasks_per_process and max_memory_per_process need --processes 2 or more "
            "(a supervisor to start the replacement); this single worker process is not "
            "recycled"
        )
    hard = sorted(name for name, task in app.tasks.items() if task.hard_timeout is not None)
    if hard:
        log.warning(
            "hard_timeout needs --processes 2 or more (a supervisor to kill the process); "
            "only the soft timeouts apply to %s", ", ".join(hard),
        )  # fmt: skip


async def run_worker_async(
    app: App, concurrency: int = 8, queues: str | Sequence[str] | None = None, **options: Any
) -> None:
    """Run a worker in a thread until the awaiting task is cancelled, then stop it
    gracefully (it drains, as on SIGTERM) and re-raise the cancellation."""
    config = WorkerConfig(
        concurrency=concurrency,
        queues=check_queues(queues, "run_worker_async(queues=...)"),
        install_signal_handlers=False,
        **options,
    )
    alone_warnings(app, config)
    worker = Worker(app, config)
    running = asyncio.ensure_future(asyncio.to_thread(worker.run))
    try:
        await asyncio.shield(running)
    except asyncio.CancelledError:
        log.info("worker %s: the awaiting task was cancelled; stopping", worker.id)
        worker.stop()
        await running  # the drain, bounded by the worker's drain timeout
        raise
