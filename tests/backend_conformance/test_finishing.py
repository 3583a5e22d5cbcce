"""Finishing claimed jobs: batch outcomes, an outcome in the caller's transaction, what is
added after a ``ctx.transaction()`` committed, and idempotency markers; every write
fenced by the claim's token."""

from __future__ import annotations

from sqljobs import JobState
from sqljobs.backends import Backend
from sqljobs.jobs import HeldJob, Outcome

from .conftest import claim, new_job

COVERS = {
    "finish_jobs",
    "finish_in_transaction",
    "amend_done_job",
    "job_transaction",
    "mark_idempotent",
}


def test_finish_jobs_writes_each_outcome_once_and_only_under_its_token(backend: Backend) -> None:
    backend.enqueue_jobs([new_job(backend, "t", i) for i in range(3)])
    a, b, c = claim(backend, limit=3)
    written = backend.finish_jobs(
        [
            Outcome(a.id, a.token, JobState.DONE),
            Outcome(b.id, b.token, JobState.PENDING, delay=60.0, error="boom", errors=1),
            Outcome(c.id, c.token + 1, JobState.DONE),  # a stale token: not written
        ]
    )
    assert sorted(written) == [a.id, b.id]
    states = {i: job.state for i in (a.id, b.id, c.id) if (job := backend.get_job(i))}
    assert states == {a.id: JobState.DONE, b.id: JobState.PENDING, c.id: JobState.RUNNING}
    assert backend.finish_jobs([Outcome(a.id, a.token, JobState.DEAD)]) == [], "ended: fenced"
    assert backend.finish_jobs([]) == []


def test_finish_jobs_clears_prefetched_on_started_buffered_jobs(backend: Backend) -> None:
    backend.enqueue_jobs([new_job(backend, "t", i) for i in range(2)])
    first, buffered = claim(backend, limit=2, start_now=1)
    assert backend.finish_jobs([], [HeldJob(buffered.id, buffered.token)]) == []
    assert backend.finish_jobs([Outcome(first.id, first.token, JobState.DONE)]) == [first.id]


def test_an_outcome_in_the_callers_transaction_commits_with_it(backend: Backend) -> None:
    backend.enqueue_jobs([new_job(backend, "t", 1), new_job(backend, "t", 2)])
    kept, undone = claim(backend, limit=2)
    with backend.job_transaction() as conn:
        assert backend.finish_in_transaction(conn, Outcome(kept.id, kept.token, JobState.DONE))
        assert backend.mark_idempotent(conn, "charge-1", ttl=60.0)
        assert not backend.mark_idempotent(conn, "charge-1"), "a marker is set once"
    try:
        with backend.job_transaction() as conn:
            backend.finish_in_transaction(conn, Outcome(undone.id, undone.token, JobState.DONE))
            backend.mark_idempotent(conn, "charge-2")
            raise RuntimeError("the handler failed after its writes")
    except RuntimeError:
        pass
    job = backend.get_job(kept.id)
    assert job is not None and job.state is JobState.DONE
    job = backend.get_job(undone.id)
    assert job is not None and job.state is JobState.RUNNING, "rolled back with the caller"
    with backend.job_transaction() as conn:
        assert backend.mark_idempotent(conn, "charge-2"), "its marker was rolled back too"
        assert not backend.finish_in_transaction(conn, Outcome(kept.id, kept.token, JobState.DONE))


def test_amend_done_job_adds_the_result_only_while_done_under_the_token(backend: Backend) -> None:
    backend.enqueue_jobs([new_job(backend, "t", 1)])
    (job,) = claim(backend)
    assert not backend.amend_done_job(Outcome(job.id, job.token, JobState.DONE, result="1"))
    backend.finish_jobs([Outcome(job.id, job.token, JobState.DONE)])
    assert not backend.amend_done_job(Outcome(job.id, job.token + 1, JobState.DONE, result="2"))
    assert backend.amend_done_job(Outcome(job.id, job.token, JobState.DONE, result="42"))
    done = backend.get_job(job.id)
    assert done is not None and done.result == 42
