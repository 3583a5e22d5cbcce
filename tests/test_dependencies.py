"""Jobs that wait for other jobs, in one process on both backends: ``after=``, the
``waiting`` state, policies, cascades, cancels, groups and their results, and the race
between a child's enqueue and its parent's end.

Worker processes are in test_dependencies_processes.py.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from sqljobs import (
    App,
    ConfigurationError,
    JobCancelled,
    JobNotFound,
    JobState,
    PayloadError,
    Retry,
)
from sqljobs.backends.base import Claim, PruneFinished
from sqljobs.jobs import NewJob, Outcome
from sqljobs.testing import stepped_worker

from .conftest import db_execute


def _states(app: App, *handles: Any) -> list[str]:
    return [app.job(h.id).refresh().state.value for h in handles]


def _edges(app: App) -> int:
    return int(db_execute(app, "SELECT count(*) FROM sqljobs_deps")[0][0])


def test_a_child_waits_for_its_parents_and_says_which(app: App) -> None:
    @app.task
    def step(name: str) -> str:
        return name

    a, b = step.enqueue("a"), step.enqueue("b")
    child = step.with_options(after=[a, b.id]).enqueue("child")
    job = child.refresh()
    assert job.state is JobState.WAITING and job.parents == [a.id, b.id] and job.waiting_on == 2
    assert app.waiting_reason(job) == f"waiting for 2 parents to end (jobs {a.id}, {b.id})"
    assert app.stats().counts["default"]["waiting"] == 1
    # a worker claims only what is pending: the parents, then, released, the child
    with stepped_worker(app, concurrency=1) as worker:
        assert worker.result(child) == "child"
    assert _states(app, a, b, child) == ["done", "done", "done"]
    assert _edges(app) == 0, "a settled edge is taken away"


def test_a_child_of_parents_that_are_done_already_is_pending_at_once(app: App) -> None:
    @app.task
    def step(name: str) -> str:
        return name

    parent = step.enqueue("p")
    with stepped_worker(app) as worker:
        worker.result(parent)
    child = step.with_options(after=[parent]).enqueue("c")
    assert child.refresh().state is JobState.PENDING
    assert _edges(app) == 0


def test_a_diamond_runs_in_order(app: App) -> None:
    spans: dict[str, tuple[float, float]] = {}
    lock = threading.Lock()
    middle = threading.Barrier(2)  # b and c wait for each other: they run side by side

    @app.task
    def step(name: str) -> None:
        began = time.monotonic()
        if name in ("b", "c"):
            middle.wait(timeout=10)
        with lock:
            spans[name] = (began, time.monotonic())

    a = step.enqueue("a")
    b = step.with_options(after=[a]).enqueue("b")
    c = step.with_options(after=[a]).enqueue("c")
    d = step.with_options(after=[b, c]).enqueue("d")
    with stepped_worker(app, concurrency=4) as worker:
        worker.result(d)
    assert spans["a"][1] <= spans["b"][0] and spans["a"][1] <= spans["c"][0]
    assert max(spans["b"][1], spans["c"][1]) <= spans["d"][0]
    assert not middle.broken, "b and c ran side by side"


def test_a_dead_parent_cancels_its_children_and_theirs_and_always_runs_anyway(app: App) -> None:
    @app.task(retry=Retry(max_attempts=1))
    def broken() -> None:
        raise RuntimeError("no luck")

    @app.task
    def step(name: str) -> str:
        return name

    parent = broken.enqueue()
    child = step.with_options(after=[parent]).enqueue("child")
    grandchild = step.with_options(after=[child]).enqueue("grandchild")
    anyway = step.with_options(after=[parent], after_policy="always").enqueue("anyway")
    report = app.run_until_empty()
    assert [(a.job_id, a.state) for a in report.attempts] == [
        (parent.id, "dead"),
        (anyway.id, "done"),
    ], "the cancelled child and grandchild never ran"
    assert anyway.result(timeout=0) == "anyway"
    with pytest.raises(JobCancelled):
        grandchild.result(timeout=0)
    job = child.refresh()
    assert job.state is JobState.CANCELLED and job.attempts == 0
    assert job.last_error is not None and f"parent job {parent.id} ended dead" in job.last_error
    assert f"parent job {child.id} ended cancelled" in (grandchild.refresh().last_error or "")
    assert _edges(app) == 0


def test_a_retried_parent_releases_its_child_only_when_it_is_done(app: App) -> None:
    tries: list[int] = []

    @app.task(retry=Retry(max_attempts=3, base=0.01))
    def flaky() -> str:
        tries.append(1)
        if len(tries) < 2:
            raise RuntimeError("first try fails")
        return "ok"

    @app.task
    def step(name: str) -> str:
        return name

    parent = flaky.enqueue()
    child = step.with_options(after=[parent]).enqueue("child")
    report = app.run_until_empty()  # waits out the retry's backoff (up to 10 ms)
    assert [(a.job_id, a.state) for a in report.attempts] == [
        (parent.id, "pending"),
        (parent.id, "done"),
        (child.id, "done"),
    ], "the child ran only once its parent was done"
    assert child.result(timeout=0) == "child"
    assert len(tries) == 2 and parent.refresh().attempts == 2


def test_cancelling_by_hand_settles_children_too(app: App) -> None:
    @app.task
    def step(name: str) -> str:
        return name

    parent = step.enqueue("p")
    child = step.with_options(after=[parent]).enqueue("c")
    keeps_going = step.with_options(after=[parent], after_policy="always").enqueue("k")
    assert app.cancel(parent.id)
    assert _states(app, parent, child, keeps_going) == ["cancelled", "cancelled", "pending"]
    # a waiting job can be cancelled itself, and bulk cancels take waiting jobs
    other = step.enqueue("o")
    waiting = [step.with_options(after=[other]).enqueue(f"w{i}") for i in range(3)]
    assert app.cancel(waiting[0].id) and not app.cancel(waiting[0].id)
    assert app.cancel_many(state="waiting") == 2
    assert _states(app, *waiting) == ["cancelled"] * 3
    assert app.cancel_many(task="step") == 2  # other and keeps_going, which were pending


def test_bad_parents_are_refused_and_nothing_is_stored(app: App) -> None:
    @app.task
    def step(name: str) -> str:
        return name

    parent = step.enqueue("p")
    with pytest.raises(JobNotFound, match="after= names no job 999999"):
        step.with_options(after=[parent, 999999]).enqueue("orphan")
    for bad in (["1"], [True], [0], 5, "12"):
        with pytest.raises(ConfigurationError, match="after= takes"):
            step.with_options(after=bad).enqueue("x")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match=r"names job \d+ twice"):
        step.with_options(after=[parent, parent.id]).enqueue("x")
    with pytest.raises(ConfigurationError, match="after_policy must be"):
        step.with_options(after=[parent], after_policy="sometimes").enqueue("x")  # type: ignore[arg-type]
    assert [j.id for j in app.list_jobs()] == [parent.id]
    assert _edges(app) == 0
    assert parent.refresh().state is JobState.PENDING


def test_enqueue_by_name_and_enqueue_many_take_after(app: App) -> None:
    @app.task
    def step(name: str) -> str:
        return name

    parent = step.enqueue("p")
    by_name = app.enqueue("step", ["n"], after=[parent])
    # more children than one insert statement takes (PostgreSQL sends 1,000 a statement)
    many = step.with_options(after=[parent]).enqueue_many([(f"c{i}",) for i in range(1500)])
    assert by_name.refresh().state is JobState.WAITING
    assert app.stats().counts["default"]["waiting"] == 1501
    with stepped_worker(app, concurrency=8) as worker:
        assert worker.result(many[-1]) == "c1499"
        assert worker.result(by_name) == "n"
        # siblings end in no set order (two claim lanes on PostgreSQL, a buffer on each):
        # the last one's result says nothing of the others
        worker.until(lambda: app.stats().counts["default"]["done"] == 1502, what="every child")


def test_a_group_callback_gets_the_results_in_order(app: App) -> None:
    @app.task
    def square(x: int) -> int:
        time.sleep(0.01 * (5 - x))  # later members end first
        return x * x

    @app.task
    def total(results: list[int], label: str) -> dict[str, Any]:
        return {"label": label, "results": results, "sum": sum(results)}

    group = app.group([square.s(x) for x in range(5)], then=total.s("squares"))
    assert group.then is not None and group.then.refresh().state is JobState.WAITING
    assert group.then.refresh().parents == group.ids
    with stepped_worker(app, concurrency=5) as worker:
        assert worker.result(group) == {
            "label": "squares", "results": [0, 1, 4, 9, 16], "sum": 30,
        }  # fmt: skip
    plain = app.group([square.s(2), square.with_options(priority=5).s(3)])
    with stepped_worker(app) as worker:
        assert plain.then is None and worker.result(plain) == [4, 9]


def test_a_group_whose_member_dies_cancels_or_runs_its_callback(app: App) -> None:
    @app.task(retry=Retry(max_attempts=1))
    def broken() -> None:
        raise RuntimeError("no luck")

    @app.task
    def value(x: int) -> int:
        return x

    @app.task
    def collect(results: list[Any]) -> list[Any]:
        return results

    strict = app.group([value.s(1), broken.s()], then=collect.s())
    lenient = app.group([value.s(1), broken.s()], then=collect.s(), after_policy="always")
    with stepped_worker(app) as worker:
        assert worker.result(lenient) == [1, None]
        with pytest.raises(JobCancelled):
            worker.result(strict)


def test_a_group_is_checked_before_anything_is_stored(app: App) -> None:
    @app.task
    def value(x: int) -> int:
        return x

    @app.task
    def no_room(label: str) -> None: ...

    with pytest.raises(PayloadError, match="cannot be a group's callback"):
        app.group([value.s(1)], then=no_room.s("x"))
    with pytest.raises(PayloadError, match="arguments do not match"):
        app.group([value.s(1), value.s()])
    with pytest.raises(ConfigurationError, match="task signatures"):
        app.group([value.s(1), 2])  # type: ignore[list-item]
    with pytest.raises(ConfigurationError, match="at least one"):
        app.group([])
    assert app.list_jobs() == []


def test_a_child_enqueued_while_its_parent_ends_is_never_left_waiting(app: App) -> None:
    """The race the locks are for: the child's enqueue reads its parent running while the
    parent's completion commits. Whichever wins, the child ends up pending."""

    @app.task
    def step(name: str) -> str:
        return name

    backend = app.backend
    rounds = 40
    for i in range(rounds):
        parent = step.enqueue(f"p{i}")
        (claimed,) = backend.claim_jobs(Claim("racer", None, 1))
        assert claimed.id == parent.id
        go = threading.Barrier(2)
        children: list[Any] = []
        thread = threading.Thread(target=_enqueue_child, args=(go, children, step, parent))
        thread.start()
        go.wait()
        backend.finish_jobs([Outcome(claimed.id, claimed.token, JobState.DONE)])
        thread.join()
        assert children[0].refresh().state is JobState.PENDING, f"round {i}"
        db_execute(app, "DELETE FROM sqljobs_jobs")
    assert _edges(app) == 0


def test_a_group_whose_members_ended_already_runs_with_their_results(app: App) -> None:
    """Made again with keys naming members that are done, the callback is pending at once
    and still gets their results; two members that are one job count once."""

    @app.task
    def value(x: int) -> dict[str, Any]:
        return {"x": x, "none": None, "inner": {"gone": None}}

    @app.task
    def collect(results: list[Any], tag: str) -> list[Any]:
        return [tag, results]

    first = app.group([value.with_options(key="v1").s(1)], then=collect.s("first"))
    with stepped_worker(app) as worker:
        assert worker.result(first) == [
            "first",
            [{"x": 1, "none": None, "inner": {"gone": None}}],
        ]
    again = app.group([value.with_options(key="v1").s(1)], then=collect.s("again"))
    assert again.then is not None and again.then.refresh().state is JobState.PENDING
    twice = app.group(
        [value.with_options(key="v2").s(2), value.with_options(key="v2").s(2)],
        then=collect.s("twice"),
    )
    with stepped_worker(app) as worker:
        assert worker.result(again) == [
            "again",
            [{"x": 1, "none": None, "inner": {"gone": None}}],
        ]
        done = {"x": 2, "none": None, "inner": {"gone": None}}
        assert worker.result(twice) == ["twice", [done, done]]


def test_a_child_cancelled_before_its_parents_ended_is_not_retried_ahead_of_them(
    app: App,
) -> None:
    @app.task
    def step(name: str) -> str:
        return name

    parent = step.enqueue("p")
    child = step.with_options(after=[parent]).enqueue("c")
    assert app.cancel(child.id)
    with pytest.raises(ConfigurationError, match="which are not done: retry them first"):
        app.retry_job(child.id)
    assert child.refresh().state is JobState.CANCELLED


def test_a_keyed_child_gives_its_key_up_as_its_scope_says(app: App) -> None:
    @app.task
    def step(name: str) -> str:
        return name

    parent = step.enqueue("p")
    keyed = step.with_options(after=[parent], key="child", key_scope="active")
    first = keyed.enqueue("c")
    with stepped_worker(app) as worker:
        worker.result(first)
    second = keyed.enqueue("c")
    assert second.created and second.id != first.id


def _enqueue_child(go: threading.Barrier, into: list[Any], task: Any, parent: Any) -> None:
    go.wait()
    into.append(task.with_options(after=[parent]).enqueue("child"))


def test_a_keyed_child_whose_key_holder_is_pruned_mid_enqueue_answers_with_it(
    app: App, url: str
) -> None:
    """The key holder conflicts with the child's insert, then the pruner deletes it
    before the child reads it back: the enqueue answers with the kept key, never fails."""
    if url.startswith("sqlite"):
        pytest.skip("one writer: nothing can prune between the enqueue's statements")

    @app.task
    def step() -> None:
        pass

    holder = step.with_options(key="order-7").enqueue()
    app.run_until_empty()
    parent = step.enqueue()
    assert _states(app, holder, parent) == ["done", "pending"]
    backend: Any = app.backend  # its statements and one step of its enqueue
    pruned: list[int] = []

    class PruneAfterConflict:
        """The enqueue's connection; the pruner runs right after the conflicting insert."""

        def __init__(self, conn: Any) -> None:
            self.conn = conn

        def execute(self, statement: Any, params: Any = None) -> Any:
            cursor = self.conn.execute(statement, params)
            if statement is backend.sql["insert_dependent"] and not pruned:
                pruned.append(backend.prune_finished(PruneFinished(backend.now() + 60)))
            return cursor

    job = NewJob(
        task="step",
        payload="[[], {}]",
        queue="default",
        priority=0,
        run_at=0.0,
        lease=30.0,
        max_attempts=3,
        key="order-7",
        after=(parent.id,),
    )
    with backend.job_transaction() as conn:
        answer = backend._insert_dependent(PruneAfterConflict(conn), job)
    assert pruned == [1]
    assert (answer.id, answer.created) == (holder.id, False)
