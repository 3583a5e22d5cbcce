"""What a worker tallies for the metrics rollup (:mod:`sqljobs.rollup`): a finished run's
sample, taken as its handler returns, and the outcome it is counted under once written.

An attempt is counted only once its outcome is written: one the database refused (the
lease was lost, the job cancelled) is counted by whoever ended it instead (the rescuer
as ``lease_expired``, the cancel as ``cancelled``), never twice.
"""

from __future__ import annotations

import time

from .. import rollup
from ..jobs import ClaimedJob, JobState, Outcome
from ..rollup import AttemptOutcome, Meter
from .execute import Running

Sample = rollup.Sample
"""A finished attempt to tally once its outcome is written: the job, how long its handler
ran and how long it waited from its due time to its start (None: it never started)."""


def sample(run: Running, now: float | None = None) -> Sample:
    """How long ``run``'s handler ran (until ``now``, monotonic; by default, now) and how
    long the job waited from its due time (its ``run_at``, or its creation if later) to the
    handler's start; both None if the handler never started."""
    begun = run.begun
    if begun is None:
        return run.job, None, None
    ran = (time.monotonic() if now is None else now) - begun
    return run.job, ran, waited(run.job, run.started_wall + (begun - run.started))


def waited(job: ClaimedJob, started_at: float) -> float:
    """Seconds from ``job``'s due time to ``started_at`` (Unix seconds)."""
    return started_at - max(job.run_at, job.created_at)


def attempt_outcome(outcome: Outcome) -> AttemptOutcome | None:
    """The label a written outcome counts under (None: a hand-back, not an attempt's end)."""
    state = outcome.state
    if state is JobState.DONE:
        return AttemptOutcome.DONE
    if state is JobState.DEAD:
        return AttemptOutcome.DEAD
    if state is JobState.PENDING and not outcome.uncharge:
        return AttemptOutcome.RETRIED
    return None


def tally(meter: Meter, taken: Sample, outcome: str, at: float) -> None:
    """Count one attempt's end at ``at`` (Unix seconds)."""
    job, ran, wait = taken
    meter.attempt(job.queue, job.task, outcome, at, ran, wait)
