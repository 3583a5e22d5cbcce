"""Groups and dependencies: a callback that waits for its members, the parents a waiting
job still has open, and which of some jobs have ended or were cancelled."""

from __future__ import annotations

from sqljobs import JobState
from sqljobs.backends import Backend
from sqljobs.backends.base import JobGroup
from sqljobs.jobs import Outcome

from .conftest import claim, new_job

COVERS = {"enqueue_group", "open_parents", "ended_among", "cancelled_among"}


def test_a_groups_callback_waits_for_every_member(backend: Backend) -> None:
    members = [new_job(backend, "t", i) for i in range(2)]
    made, then = backend.enqueue_group(JobGroup(members, new_job(backend, "t", 9, collect=True)))
    assert then is not None and then.created
    ids = [r.id for r in made]
    waiting = backend.get_job(then.id)
    assert waiting is not None and waiting.state is JobState.WAITING
    assert sorted(backend.open_parents(then.id, ids)) == ids
    first, second = claim(backend, limit=2)
    backend.finish_jobs([Outcome(first.id, first.token, JobState.DONE, result='"a"')])
    assert backend.open_parents(then.id, ids) == [second.id]
    assert backend.ended_among(ids) == {first.id}
    backend.finish_jobs([Outcome(second.id, second.token, JobState.DONE, result='"b"')])
    released = backend.get_job(then.id)
    assert released is not None and released.state is JobState.PENDING
    assert released.args[0] == (["a", "b"] if first.id < second.id else ["b", "a"])
    assert backend.open_parents(then.id, ids) == []


def test_a_group_without_a_callback_and_in_the_callers_transaction(backend: Backend) -> None:
    with backend.job_transaction() as conn:
        made, then = backend.enqueue_group(JobGroup([new_job(backend, "t", 1)]), conn)
    assert then is None and len(made) == 1


def test_cancelled_and_ended_among(backend: Backend) -> None:
    made = backend.enqueue_jobs([new_job(backend, "t", i) for i in range(3)])
    ids = [r.id for r in made]
    assert backend.cancel_job(ids[0])
    assert backend.cancelled_among(ids) == {ids[0]}
    assert backend.ended_among(ids) == {ids[0]}
    assert backend.cancelled_among([]) == set()
