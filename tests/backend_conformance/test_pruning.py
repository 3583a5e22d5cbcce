"""Pruning: finished jobs (their keys kept as spent keys for a while), spent keys, rate
starts and idempotency markers, each in batches, each only when old enough."""

from __future__ import annotations

from sqljobs import JobState
from sqljobs.backends import Backend
from sqljobs.backends.base import PruneFinished
from sqljobs.jobs import Outcome

from .conftest import claim, new_job

COVERS = {
    "prune_finished",
    "spent_key_of_job",
    "prune_spent_keys",
    "prune_starts",
    "prune_idempotency",
}


def test_finished_jobs_go_and_their_keys_stay_for_a_while(backend: Backend) -> None:
    backend.enqueue_jobs([new_job(backend, "t", 1, key="k"), new_job(backend, "t", 2)])
    backend.enqueue_jobs([new_job(backend, "t", 3)])
    keyed, plain, left = claim(backend, limit=3)
    backend.finish_jobs([Outcome(j.id, j.token, JobState.DONE) for j in (keyed, plain)])
    now = backend.now()
    assert backend.prune_finished(PruneFinished(now - 60)) == 0, "not old enough yet"
    assert backend.prune_finished(PruneFinished(now + 1, state="dead")) == 0
    assert backend.prune_finished(PruneFinished(now + 1, limit=1)) == 1
    assert backend.prune_finished(PruneFinished(now + 1, key_retention=3600.0)) == 1
    assert backend.get_job(keyed.id) is None and backend.get_job(left.id) is not None
    spent = backend.spent_key_of_job(keyed.id)
    assert spent is not None and spent.key == "k" and spent.expires_at > now
    (again,) = backend.enqueue_jobs([new_job(backend, "t", 4, key="k")])
    assert again.id == keyed.id and not again.created, "the kept key answers"
    assert backend.prune_spent_keys(now) == 0
    assert backend.prune_spent_keys(spent.expires_at + 1) == 1
    assert backend.spent_key_of_job(keyed.id) is None


def test_rate_starts_and_idempotency_markers_are_pruned_when_old(backend: Backend) -> None:
    backend.enqueue_jobs([new_job(backend, "t", 1, limit_key="r", rate_max=5, rate_window=1.0)])
    assert len(claim(backend, limited=True)) == 1
    with backend.job_transaction() as conn:
        backend.mark_idempotent(conn, "once", ttl=10.0)
        backend.mark_idempotent(conn, "forever")
    now = backend.now()
    assert backend.prune_starts(now - 60) == 0
    assert backend.prune_starts(now + 1) == 1
    assert backend.prune_idempotency(now) == 0
    assert backend.prune_idempotency(now + 11) == 1, "only the marker with a ttl"
