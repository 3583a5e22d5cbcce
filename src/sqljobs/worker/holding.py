"""What a worker holds: the one record its parts share, passed to each explicitly.

The producer fills it, the dispatcher starts what is in it, the completer empties it as
handlers return, the upkeep renews (or gives up) what it holds, and the shutdown hands
back what is left. Only the coordinator thread changes it.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..jobs import ClaimedJob
    from .execute import Running

log = logging.getLogger("sqljobs.worker")


class Holding:
    """The jobs this worker holds: ``inflight``, claimed and started or buffered, by job
    id; ``abandoned``, given up (timed out, lease lost, cancelled) while their threads
    still run them; ``suspect``, a crashed worker's job claimed to run alone, waiting for
    the worker to empty."""

    def __init__(self, worker_id: str, concurrency: int) -> None:
        self.inflight: dict[int, Running] = {}
        self.abandoned: set[Running] = set()
        self.suspect: ClaimedJob | None = None
        self._worker_id = worker_id
        self._concurrency = concurrency

    def close(self, run: Running, *, abandon: bool) -> None:
        """Let go of ``run``: its job is no longer this worker's (its result, if one
        comes, is discarded). An async task is cancelled; a thread that runs on keeps its
        slot (``abandon``) until the handler returns."""
        run.closed = True
        run.ctx.lease_lost = True
        self.inflight.pop(run.job.id, None)
        if run.future is not None:
            run.future.cancel()
        elif abandon and not run.abandoned:
            # the thread goes on until the handler returns (a thread cannot be killed): it
            # keeps its slot until then, so no more than `concurrency` handlers ever run
            run.abandoned = True
            self.abandoned.add(run)
            if len(self.abandoned) >= self._concurrency:
                # often brief (a worker that was paused past its leases): a warning; a
                # cancelled handler that never returns is an error after cancel_grace
                log.warning(
                    "worker %s: all %d slots are held by handlers that were given up (timed "
                    "out or lease lost) and have not returned; no job starts until one "
                    "does (a handler that never returns needs fixing or a restart)",
                    self._worker_id,
                    self._concurrency,
                )
