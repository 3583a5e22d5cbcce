"""Writes an operator makes: cancelling one job, and retrying, cancelling or deleting the
jobs a filter matches, each only in the states it names."""

from __future__ import annotations

from sqljobs import JobState
from sqljobs.backends import Backend
from sqljobs.jobs import JobFilter, Outcome

from .conftest import claim, new_job

COVERS = {"cancel_job", "retry_jobs", "cancel_jobs_matching", "delete_jobs"}


def _state(backend: Backend, job_id: int) -> JobState | None:
    job = backend.get_job(job_id)
    return None if job is None else job.state


def test_cancel_job_cancels_pending_and_running_jobs_only(backend: Backend) -> None:
    ids = [r.id for r in backend.enqueue_jobs([new_job(backend, "t", i) for i in range(3)])]
    first, second = claim(backend, limit=2)
    backend.finish_jobs([Outcome(second.id, second.token, JobState.DONE)])
    pending, running, done = ids[2], first.id, second.id
    assert backend.cancel_job(pending) and backend.cancel_job(running)
    assert not backend.cancel_job(done) and not backend.cancel_job(10**9)
    assert _state(backend, pending) is JobState.CANCELLED
    assert _state(backend, running) is JobState.CANCELLED
    assert _state(backend, done) is JobState.DONE


def test_bulk_actions_touch_only_the_matches_in_their_states(backend: Backend) -> None:
    ids = [r.id for r in backend.enqueue_jobs([new_job(backend, "t", i) for i in range(4)])]
    backend.enqueue_jobs([new_job(backend, "u")])
    (dead,) = claim(backend, limit=1)
    backend.finish_jobs([Outcome(dead.id, dead.token, JobState.DEAD, error="boom")])
    wanted = JobFilter(task="t")
    assert backend.cancel_jobs_matching(wanted, ["pending"]) == 3
    assert backend.retry_jobs(wanted, ["dead"]) == 1
    assert _state(backend, dead.id) is JobState.PENDING
    assert backend.delete_jobs(wanted, ["cancelled"]) == 3
    assert [_state(backend, i) for i in ids] == [JobState.PENDING, None, None, None]
    assert backend.delete_jobs(JobFilter(task="u"), ["done", "dead"]) == 0
