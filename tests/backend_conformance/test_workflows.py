"""Durable workflows' storage: fenced checkpoints, parks (for a time, an event, children),
wake-ups, and events kept in order and only when their transaction commits."""

from __future__ import annotations

import json
import threading
from threading import Barrier

from sqljobs import App, JobState
from sqljobs.backends import Backend
from sqljobs.backends.base import Checkpoint, Park
from sqljobs.jobs import HeldJob, Outcome, WorkflowStep

from .conftest import claim, new_job

COVERS = {
    "workflow_steps",
    "save_step",
    "park_workflow",
    "wake_workflows",
    "next_wake",
    "emit_event",
    "first_event",
    "child_states",
    "workflow_jobs",
    "prune_events",
}


def _running(backend: Backend, task: str = "wf") -> HeldJob:
    backend.enqueue_jobs([new_job(backend, task)])
    (job,) = claim(backend, limit=1)
    return HeldJob(job.id, job.token)


def _state(backend: Backend, job_id: int) -> tuple[JobState, int]:
    job = backend.get_job(job_id)
    assert job is not None
    return job.state, job.attempts


def test_checkpoints_are_fenced_ordered_and_keep_their_name(backend: Backend) -> None:
    held = _running(backend)
    assert backend.save_step(Checkpoint(held, WorkflowStep(1, "b", "step", "done", "2")))
    assert backend.save_step(Checkpoint(held, WorkflowStep(0, "a", "step", "running")))
    assert backend.save_step(Checkpoint(held, WorkflowStep(0, "a", "step", "done", '"x"')))
    stale = HeldJob(held.id, held.token + 1)
    assert not backend.save_step(Checkpoint(stale, WorkflowStep(2, "c", "step", "done")))
    renamed = WorkflowStep(1, "other", "step", "done", "3")
    assert not backend.save_step(Checkpoint(held, renamed)), "a position keeps its step"
    steps = backend.workflow_steps(held.id)
    assert [(s.position, s.name, s.state, s.value) for s in steps] == [
        (0, "a", "done", "x"),
        (1, "b", "done", 2),
    ]
    assert steps[0].ended_at is not None and steps[0].attempt == 1
    assert backend.workflow_steps(held.id + 1000) == []


def test_checkpoints_saved_at_once_from_many_threads_are_each_fenced(backend: Backend) -> None:
    """Checkpoints that arrive together (and may share a commit) keep their own fencing:
    the stale ones are refused, the held ones written, each told which."""
    holds = [_running(backend) for _ in range(8)]
    start = Barrier(len(holds))
    saved: dict[int, bool] = {}

    def save(i: int, held: HeldJob) -> None:
        token = held.token + (1 if i % 2 else 0)  # every other one has lost its claim
        start.wait()
        for position in range(5):
            step = WorkflowStep(position, f"s{position}", "step", "done", str(i))
            saved[i * 10 + position] = backend.save_step(Checkpoint(HeldJob(held.id, token), step))

    threads = [threading.Thread(target=save, args=(i, h)) for i, h in enumerate(holds)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert saved == {i * 10 + p: i % 2 == 0 for i in range(8) for p in range(5)}
    for i, held in enumerate(holds):
        steps = backend.workflow_steps(held.id)
        assert [(s.name, s.value) for s in steps] == (
            [(f"s{p}", i) for p in range(5)] if i % 2 == 0 else []
        )


def test_a_checkpoint_in_the_callers_transaction_commits_with_it(backend: Backend) -> None:
    held = _running(backend)
    try:
        with backend.job_transaction() as conn:
            assert backend.save_step(Checkpoint(held, WorkflowStep(0, "t", "transaction", "done")),
                                     conn)  # fmt: skip
            raise RuntimeError("rolled back")
    except RuntimeError:
        pass
    assert backend.workflow_steps(held.id) == []
    with backend.job_transaction() as conn:
        backend.save_step(Checkpoint(held, WorkflowStep(0, "t", "transaction", "done")), conn)
    assert [s.name for s in backend.workflow_steps(held.id)] == ["t"]


def test_a_sleep_parks_until_its_time_and_gives_the_attempt_back(backend: Backend) -> None:
    held = _running(backend)
    at = backend.now() + 60
    assert backend.park_workflow(Park(HeldJob(held.id, held.token + 1), wake_at=at)) is None
    assert backend.park_workflow(Park(held, wake_at=at)) == "waiting"
    assert _state(backend, held.id) == (JobState.WAITING, 0)
    assert backend.park_workflow(Park(held, wake_at=at)) is None, "parked once"
    assert claim(backend) == []
    next_wake = backend.next_wake()
    assert next_wake is not None and abs(next_wake - at) < 1e-3
    assert backend.wake_workflows(at - 1) == 0
    assert backend.wake_workflows(at) == 1
    assert backend.next_wake() is None
    assert _state(backend, held.id) == (JobState.PENDING, 0), "the park charged no attempt"


def test_a_sleep_already_over_leaves_the_workflow_due(backend: Backend) -> None:
    held = _running(backend)
    assert backend.park_workflow(Park(held, wake_at=backend.now() - 1)) == "pending"
    assert [j.id for j in claim(backend)] == [held.id]


def test_events_wake_their_waiters_and_are_kept_in_order(backend: Backend) -> None:
    held = _running(backend)
    assert backend.park_workflow(Park(held, event="approved:1")) == "waiting"
    first = backend.emit_event("approved:2", json.dumps("other"))
    assert _state(backend, held.id)[0] is JobState.WAITING, "another name wakes nobody"
    second = backend.emit_event("approved:1", json.dumps({"by": "ada"}))
    assert second > first
    assert _state(backend, held.id)[0] is JobState.PENDING
    third = backend.emit_event("approved:1", None)
    found = backend.first_event("approved:1", 0)
    assert (
        found is not None
        and found.id == second
        and json.loads(found.payload or "") == {"by": "ada"}
    )
    later = backend.first_event("approved:1", second)
    assert later is not None and later.id == third and later.payload is None
    assert backend.first_event("approved:1", third) is None


def test_an_event_emitted_before_the_park_leaves_the_workflow_due(backend: Backend) -> None:
    backend.emit_event("paid", None)
    held = _running(backend)
    assert backend.park_workflow(Park(held, event="paid")) == "pending"
    other = _running(backend, "wf2")
    taken = backend.first_event("paid", 0)
    assert taken is not None
    assert backend.park_workflow(Park(other, event="paid", after_event=taken.id)) == "waiting"


def test_an_event_in_a_rolled_back_transaction_never_arrives(app: App, backend: Backend) -> None:
    held = _running(backend)
    backend.park_workflow(Park(held, event="maybe"))
    try:
        with backend.job_transaction() as conn:
            backend.emit_event("maybe", None, conn)
            raise RuntimeError("rolled back")
    except RuntimeError:
        pass
    assert backend.first_event("maybe", 0) is None
    assert _state(backend, held.id)[0] is JobState.WAITING
    with backend.job_transaction() as conn:
        backend.emit_event("maybe", None, conn)
    assert _state(backend, held.id)[0] is JobState.PENDING


def test_a_workflow_waits_for_its_children_to_end(backend: Backend) -> None:
    held = _running(backend)
    made = backend.enqueue_jobs([new_job(backend, "child", i) for i in range(2)])
    ids = [r.id for r in made]
    assert backend.park_workflow(Park(held, children=ids)) == "waiting"
    first, second = claim(backend, limit=5)
    backend.finish_jobs([Outcome(first.id, first.token, JobState.DONE, result="1")])
    assert _state(backend, held.id)[0] is JobState.WAITING
    backend.finish_jobs([Outcome(second.id, second.token, JobState.DEAD, error="boom")])
    assert _state(backend, held.id)[0] is JobState.PENDING, "any end counts"
    states = {c.id: c for c in backend.child_states(ids)}
    assert (states[ids[0]].state, states[ids[0]].result) == ("done", "1")
    assert (states[ids[1]].state, states[ids[1]].error) == ("dead", "boom")
    assert backend.child_states([]) == []


def test_children_that_already_ended_leave_the_workflow_due(backend: Backend) -> None:
    made = backend.enqueue_jobs([new_job(backend, "child")])
    (child,) = claim(backend)
    backend.finish_jobs([Outcome(child.id, child.token, JobState.DONE)])
    held = _running(backend)
    assert backend.park_workflow(Park(held, children=[made[0].id])) == "pending"


def test_workflow_jobs_lists_with_steps_and_old_events_are_pruned(backend: Backend) -> None:
    held = _running(backend, "wf")
    backend.save_step(Checkpoint(held, WorkflowStep(0, "a", "step", "done")))
    backend.park_workflow(Park(held, event="e"))
    backend.enqueue_jobs([new_job(backend, "plain")])
    (row,) = backend.workflow_jobs(["wf"], None, 10)
    assert (row["id"], row["state"], row["steps"], row["wait_event"]) == (
        held.id, "waiting", 1, "e",
    )  # fmt: skip
    assert backend.workflow_jobs(["wf"], "done", 10) == []
    backend.emit_event("old", None)
    assert backend.prune_events(backend.now() - 60) == 0
    assert backend.prune_events(backend.now() + 60) == 1
    assert backend.first_event("old", 0) is None


def test_an_emit_racing_a_park_never_leaves_the_workflow_waiting(backend: Backend) -> None:
    """Emits and parks of one name take turns: whichever commits second sees the other,
    so an event that lands while its workflow parks is never missed."""
    for i in range(40):
        held = _running(backend)
        name = f"race:{i}"
        start = Barrier(2)

        def park(held: HeldJob = held, name: str = name, start: Barrier = start) -> None:
            start.wait()
            backend.park_workflow(Park(held, event=name))

        def emit(name: str = name, start: Barrier = start) -> None:
            start.wait()
            backend.emit_event(name, None)

        threads = [threading.Thread(target=park), threading.Thread(target=emit)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert _state(backend, held.id)[0] is JobState.PENDING, f"round {i}: the event was missed"
