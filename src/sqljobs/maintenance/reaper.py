"""The reaper: returns jobs whose lease expired to ``pending``, or ends them ``dead``.

It tells a crash from a slow job by the holder's worker row: a worker that stopped
heartbeating died (a crash, counted in ``crashes``); a live worker that let a lease lapse
ran the job longer than its lease without renewing it (counted in ``lease_expiries``).
Safe to run from every worker at once: each write is fenced by state and token.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

from ..backends.base import Backend, Rescue
from ..jobs import ExpiredJob, JobState, Outcome
from ..retry import Retry
from ..rollup import AttemptOutcome, Meter

log = logging.getLogger("sqljobs.reaper")

DEFAULT_MAX_CRASHES = 3

Decision = Callable[[ExpiredJob, float], Outcome]


def hard_limit_decision(
    hard_timeout: float, token: int, retry: Retry, otherwise: Decision
) -> Decision:
    """The rule for a job whose process was killed because its handler (the claim
    ``token``) ran past its hard time limit: a charged failure, retried with the task's
    backoff or ``dead``. Another claim of the job is decided by ``otherwise``."""

    def decide(job: ExpiredJob, now: float) -> Outcome:
        if job.token != token:
            return otherwise(job, now)
        error = f"exceeded its hard time limit of {hard_timeout:g} s"
        entry = {
            "attempt": job.attempt,
            "outcome": "hard_timeout",
            "started_at": job.started_at,
            "ended_at": now,
            "worker": job.worker,
            "error": error,
        }
        delay = retry.delay(job.attempt)
        if job.attempt >= job.max_attempts:
            return Outcome(
                job.id, job.token, JobState.DEAD, error=f"{error} (attempt {job.attempt} of "
                f"{job.max_attempts})", history=entry, errors=1,
            )  # fmt: skip
        if job.deadline_at is not None and now + delay >= job.deadline_at:
            return Outcome(
                job.id, job.token, JobState.DEAD, error=f"{error}; its deadline passed",
                history=entry, errors=1,
            )  # fmt: skip
        entry["retry_in"] = delay
        return Outcome(
            job.id, job.token, JobState.PENDING, delay=delay, error=error, history=entry,
            errors=1,
        )  # fmt: skip

    return decide


def rescue_decision(
    max_crashes: int = DEFAULT_MAX_CRASHES,
) -> Callable[[ExpiredJob, float], Outcome]:
    """Build the rule that decides what happens to an expired or orphaned job."""

    def decide(job: ExpiredJob, now: float) -> Outcome:
        ran = None if job.started_at is None else max(0.0, now - job.started_at)
        entry = {
            "attempt": job.attempt,
            "started_at": job.started_at,
            "ended_at": now,
            "worker": job.worker,
        }
        out_of_time = job.deadline_at is not None and now >= job.deadline_at
        exhausted = job.attempt >= job.max_attempts
        if not job.worker_alive and job.prefetched:
            # it waited in the dead worker's buffer and never ran there: not a suspect
            entry.update(
                outcome="worker_died_before_start",
                error=f"worker {job.worker} died before starting it",
            )
            return Outcome(
                job.id, job.token, JobState.PENDING, delay=0.0, history=entry, uncharge=True
            )
        if not job.worker_alive:
            crashes = job.crashes + 1
            error = f"worker {job.worker} died during attempt {job.attempt}"
            entry.update(outcome="crashed", error=error)
            if crashes >= max_crashes:
                error = (
                    f"crashed its worker {crashes} times: the task likely kills its process "
                    "(out of memory, a segfault, os._exit); fix it, then "
                    f"`sqljobs jobs retry {job.id}`"
                )
                return Outcome(
                    job.id, job.token, JobState.DEAD, error=error, history=entry, crashes=1
                )
            if exhausted or out_of_time:
                why = "no attempts left" if exhausted else "its deadline passed"
                return Outcome(
                    job.id,
                    job.token,
                    JobState.DEAD,
                    error=f"{error}; {why}",
                    history=entry,
                    crashes=1,
                )
            return Outcome(
                job.id,
                job.token,
                JobState.PENDING,
                delay=0.0,
                error=error,
                history=entry,
                crashes=1,
            )
        expiries = job.lease_expiries + 1
        ran_text = "" if ran is None else f"; the attempt was still running after {ran:.2f} s"
        error = f"lease of {job.lease:g} s expired on attempt {job.attempt}{ran_text}"
        entry.update(outcome="lease_expired", error=error)
        if exhausted or out_of_time:
            error = (
                f"lease expired {expiries} times (lease {job.lease:g} s{ran_text}): the lease "
                "is likely shorter than this task's run time: raise lease= or keep heartbeats on"
            )
            return Outcome(
                job.id, job.token, JobState.DEAD, error=error, history=entry, lease_expiries=1
            )
        return Outcome(
            job.id,
            job.token,
            JobState.PENDING,
            delay=0.0,
            error=error,
            history=entry,
            lease_expiries=1,
        )

    return decide


class Reaper:
    """Finds expired leases and applies :func:`rescue_decision` to them. Given a
    ``meter``, it counts each attempt it ends there (``lease_expired`` or ``crashed``,
    with how long the attempt had held the job), for the owner to flush."""

    def __init__(
        self,
        backend: Backend,
        max_crashes: int = DEFAULT_MAX_CRASHES,
        meter: Meter | None = None,
    ) -> None:
        self.backend = backend
        self.decide = rescue_decision(max_crashes)
        self.meter = meter

    def run_once(self) -> list[Outcome]:
        """Rescue every expired job now; return what was written."""
        return self._rescue(None)

    def rescue_worker(
        self, worker: str, decisions: Mapping[int, Decision] | None = None
    ) -> list[Outcome]:
        """A supervisor saw ``worker`` die: hand back every job it held, as crashed, but
        for those given their own decision (the job its process was killed for)."""
        return self._rescue(worker, decisions)

    def _rescue(
        self, worker: str | None, decisions: Mapping[int, Decision] | None = None
    ) -> list[Outcome]:
        seen: dict[int, tuple[ExpiredJob, float]] = {}
        decisions = decisions or {}

        def decide(job: ExpiredJob, now: float) -> Outcome:
            seen[job.id] = job, now
            return decisions.get(job.id, self.decide)(job, now)

        written = self.backend.rescue_jobs(Rescue(decide, worker))
        at = self.backend.now()  # the minute counted in, by the clock every tally reads
        for o in written:
            # a buffered job its worker never started carries no error: say what happened
            why = o.error or "its worker is gone and never started it (no attempt charged)"
            log.warning("job %s: %s -> %s", o.job_id, why, o.state)
            if self.meter is not None and not o.uncharge:  # (a handed-back buffered job
                job, now = seen[o.job_id]  # never ran: no attempt ended)
                if o.crashes or o.lease_expiries:
                    outcome = AttemptOutcome.CRASHED if o.crashes else AttemptOutcome.LEASE_EXPIRED
                else:  # its own decision: an error, retried or not
                    dead = o.state is JobState.DEAD
                    outcome = AttemptOutcome.DEAD if dead else AttemptOutcome.RETRIED
                held = None if job.started_at is None else now - job.started_at
                self.meter.attempt(job.queue, job.task, outcome, at, duration=held)
        return written
