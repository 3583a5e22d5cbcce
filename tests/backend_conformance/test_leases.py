"""Leases: renewal by heartbeat, slots held by handlers that outlive their job's row,
progress, and the rescue of jobs whose lease ran out or whose worker died."""

from __future__ import annotations

from sqljobs import App, JobState
from sqljobs.backends import Backend, WorkerInfo
from sqljobs.backends.base import Rescue
from sqljobs.jobs import ExpiredJob, HeldJob, Outcome

from ..conftest import expire_lease
from .conftest import claim, new_job

COVERS = {"renew_leases", "hold_slots", "save_progress", "rescue_jobs"}


def _give_back(job: ExpiredJob, now: float) -> Outcome:
    return Outcome(job.id, job.token, JobState.PENDING, lease_expiries=job.lease_expiries + 1)


def test_renew_leases_extends_only_jobs_still_held_under_their_token(backend: Backend) -> None:
    backend.register_worker(WorkerInfo("w", "host", 1, None, 4, 10.0))
    backend.enqueue_jobs([new_job(backend, "t", i) for i in range(2)])
    a, b = claim(backend, limit=2)
    renewed = backend.renew_leases("w", [HeldJob(a.id, a.token), HeldJob(b.id, b.token + 1)])
    assert renewed == {a.id}
    assert backend.renew_leases("w", []) == set(), "a heartbeat with nothing held"


def test_save_progress_is_fenced(backend: Backend) -> None:
    backend.enqueue_jobs([new_job(backend, "t", 1)])
    (job,) = claim(backend)
    report = '{"done": 1, "total": 2, "note": "half", "at": 0}'
    assert backend.save_progress([(HeldJob(job.id, job.token), report)]) == {job.id}
    assert backend.save_progress([(HeldJob(job.id, job.token + 1), report)]) == set()
    assert backend.save_progress([]) == set()
    saved = backend.get_job(job.id)
    assert saved is not None and saved.progress is not None and saved.progress.done == 1


def test_hold_slots_keeps_and_then_ends_a_handlers_hold(backend: Backend) -> None:
    backend.enqueue_jobs([new_job(backend, "t", 1)])
    (job,) = claim(backend)
    timed_out = Outcome(job.id, job.token, JobState.DEAD, error="timed out", hold=True)
    assert backend.finish_jobs([timed_out]) == [job.id]
    held = backend.get_job(job.id)
    assert held is not None and held.lease_until is not None, "the row holds its slot"
    backend.hold_slots([HeldJob(job.id, job.token)], [])
    backend.hold_slots([], [HeldJob(job.id, job.token)])
    ended = backend.get_job(job.id)
    assert ended is not None and ended.lease_until is None and ended.state is JobState.DEAD


def test_rescue_jobs_hands_back_expired_leases_and_a_dead_workers_jobs(
    app: App, backend: Backend
) -> None:
    backend.enqueue_jobs([new_job(backend, "t", i) for i in range(3)])
    expired = claim(backend, "gone", limit=2)
    (other,) = claim(backend, "crashed")
    for held in expired:
        expire_lease(app, held.id)
    rescued = backend.rescue_jobs(Rescue(_give_back))
    assert sorted(o.job_id for o in rescued) == sorted(j.id for j in expired)
    assert backend.rescue_jobs(Rescue(_give_back)) == [], "each is rescued once"
    (taken,) = backend.rescue_jobs(Rescue(_give_back, worker="crashed"))
    assert taken.job_id == other.id
    job = backend.get_job(other.id)
    assert job is not None and job.state is JobState.PENDING
