"""Graceful stop: hand back what never started, wait for running handlers up to the drain
timeout, then release what is still held, with no attempt charged."""

from __future__ import annotations

import logging

from ..backends.base import Backend
from ..errors import BackendError
from ..jobs import ClaimedJob, JobState, Outcome
from .execute import Running
from .state import WorkerState

log = logging.getLogger("sqljobs.worker")


class Draining(WorkerState):
    def _drain_step(self, backend: Backend, now: float) -> bool:
        """One step of a graceful stop; True once nothing is held any more."""
        for run in self.inflight.values():
            run.ctx.shutting_down = True
        if self._threads is not None:  # claimed but not started: hand back, do not start
            self._release(backend, self._threads.take_queued(), "released_unstarted")
        if self._immediate or now >= self._drain_deadline or not self.inflight:
            self._release_all(backend)  # also a suspect still waiting to run
        if self.inflight or self.lanes_busy:
            return False
        self._write_outcomes(backend)
        return not self._to_write and not self.lanes_busy

    def _release_all(self, backend: Backend) -> None:
        """End of drain: hand every job still held back to pending, no attempt charged."""
        runs = list(self.inflight.values())
        for run in runs:
            run.ctx.shutting_down = True
            self._close(run, abandon=False)
        self._release(backend, runs, "released")

    def _release(self, backend: Backend, runs: list[Running], label: str) -> None:
        wall = self.app.clock()
        outcomes = []
        if self._suspect is not None:
            job, self._suspect = self._suspect, None
            outcomes.append(Outcome(job.id, job.token, JobState.PENDING, delay=0.0, uncharge=True))
        for run in runs:
            run.closed = True
            self.inflight.pop(run.job.id, None)
            # taken off the thread queue, so no thread will report it: a given-up run
            # (a cancelled or lost buffered job) must not hold a slot for ever
            self._abandoned.discard(run)
            if self._holds:
                self._handler_ended(run)
            outcomes.append(handed_back(run.job, label, self.id, run.started_wall, wall))
        if not outcomes:
            return
        try:
            written = backend.finish_jobs(outcomes)
        except BackendError:  # the jobs are no longer in inflight: keep their outcomes
            self._to_write = outcomes + self._to_write
            raise
        self.counters["released"] += len(written)
        for run in runs:
            if run.job.id in written:
                self._event("released", run.job, JobState.PENDING.value, label)
        log.info("worker %s: released %d jobs it held (%s)", self.id, len(written), label)


def handed_back(job: ClaimedJob, label: str, worker: str, started_at: float, now: float) -> Outcome:
    """A held job given back at shutdown: pending again at once, no attempt charged, the
    hand-back noted in its history as ``label``."""
    entry = {
        "attempt": job.attempt,
        "outcome": label,
        "started_at": started_at,
        "ended_at": now,
        "worker": worker,
    }
    return Outcome(job.id, job.token, JobState.PENDING, delay=0.0, history=entry, uncharge=True)
