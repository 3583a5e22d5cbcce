"""Durable workflows' row locks on PostgreSQL: transactions that lock the same rows take
them in one order (a workflow's row before its children's, rows of one kind by id), so
two of them never wait for each other. Each test holds one row with a lock of its own so
that the interleaving that would deadlock is certain, and turns the backend's retry of a
deadlock off, so that one would show as an error instead of a one-second stall."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator

import psycopg
import pytest

from sqljobs import App, JobFilter, JobState, Workflow
from sqljobs.backends.base import Claim
from sqljobs.backends.postgres import PostgresBackend
from sqljobs.backends.postgres import pool as pg_pool
from sqljobs.backends.records import Park
from sqljobs.jobs import HeldJob, Outcome

from .conftest import fresh_pg_database, wait_until

ROUNDS = 3


@pytest.fixture
def url(request: pytest.FixtureRequest) -> Iterator[str]:
    """PostgreSQL only: SQLite's one writer never deadlocks."""
    with fresh_pg_database(request.getfixturevalue("pg_template")) as url:
        yield url


@pytest.fixture
def deadlocks_raise(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pg_pool, "_RETRYABLE", (psycopg.errors.SerializationFailure,))


def lock_waiters(admin: psycopg.Connection) -> int:
    """How many sessions of this database wait for a lock."""
    row = admin.execute(
        "SELECT count(*) FROM pg_stat_activity "
        "WHERE datname = current_database() AND wait_event_type = 'Lock'"
    ).fetchone()
    assert row is not None
    return int(row[0])


def together(*works: Callable[[], object]) -> tuple[list[threading.Thread], list[BaseException]]:
    """Start each of ``works`` on a thread of its own, lined up on a barrier."""
    barrier = threading.Barrier(len(works))
    errors: list[BaseException] = []

    def target(work: Callable[[], object]) -> None:
        barrier.wait()
        try:
            work()
        except BaseException as exc:  # asserted by the caller
            errors.append(exc)

    threads = [threading.Thread(target=target, args=(work,)) for work in works]
    for thread in threads:
        thread.start()
    return threads, errors


@pytest.mark.usefixtures("deadlocks_raise")
def test_a_park_on_children_and_a_cancel_of_the_whole_family_never_deadlock(url: str) -> None:
    """A workflow parks on its children (locking their rows, then its own) while a cancel
    by filter takes the workflow and its children (in id order: the workflow first). The
    park used to take the children first: with the last child held up, each waited for the
    other. The park takes the workflow's row first, as the cancel does."""
    app, admin_app = App(url), App(url)
    child = app.task(name="child")(lambda: None)

    @app.workflow(name="flow")
    def flow(wf: Workflow) -> None:  # parked by hand here: never run
        raise AssertionError("not run")

    parker = PostgresBackend(url)
    with psycopg.connect(url, autocommit=True) as admin:
        for _ in range(ROUNDS):
            flow.enqueue()
            (held,) = parker.claim_jobs(Claim("w", None, 1))
            kids = [h.id for h in child.enqueue_many([() for _ in range(3)])]
            park = Park(HeldJob(held.id, held.token), children=kids)
            with psycopg.connect(url) as gate:
                gate.execute("SELECT id FROM sqljobs_jobs WHERE id = %s FOR UPDATE", (kids[-1],))
                threads, errors = together(
                    lambda: parker.park_workflow(park),  # noqa: B023 (joined in this round)
                    lambda: admin_app.cancel(JobFilter(ids=(held.id, *kids))),  # noqa: B023
                )
                wait_until(lambda: lock_waiters(admin) == 2, what="both waiting for a lock")
            for thread in threads:  # (the gate's transaction ended with its connection)
                thread.join(timeout=30)
            assert not errors, errors
            family = [app.get_job(i) for i in (held.id, *kids)]
            assert [j.state if j else None for j in family] == [JobState.CANCELLED] * 4
    parker.close()
    admin_app.close()
    app.close()


@pytest.mark.usefixtures("deadlocks_raise")
def test_an_emit_and_a_cancel_of_its_waiters_never_deadlock(url: str) -> None:
    """An emit makes every workflow waiting for its event due while a cancel by filter
    takes the same workflows. The cancel locks them in id order; the emit locked them in
    the order its scan met them, which a park's new row version can put the other way
    round: each then held one and waited for the other's. The emit takes them in id order
    too. Here the cancel is first in line for the lower id, held by a lock of the test's
    own, and the emit comes second, so the interleaving that deadlocked is certain."""
    app, admin_app, emitter = App(url), App(url), App(url)

    @app.workflow(name="waits")
    def waits(wf: Workflow) -> None:  # parked by hand here: never run
        raise AssertionError("not run")

    parker = PostgresBackend(url)
    with psycopg.connect(url, autocommit=True) as admin:
        for round in range(ROUNDS):
            event = f"go:{round}"  # (a park on a name emitted before is due at once)
            waits.enqueue()
            waits.enqueue()
            low, high = sorted(parker.claim_jobs(Claim("w", None, 2)), key=lambda j: j.id)
            for job in (high, low):  # the higher id's row version first in the table
                parker.park_workflow(Park(HeldJob(job.id, job.token), event=event))
            with psycopg.connect(url) as gate:
                gate.execute("SELECT id FROM sqljobs_jobs WHERE id = %s FOR UPDATE", (low.id,))
                threads, errors = together(
                    lambda: admin_app.cancel(JobFilter(ids=(low.id, high.id)))  # noqa: B023
                )
                wait_until(lambda: lock_waiters(admin) == 1, what="the cancel waiting")
                more, late = together(lambda: emitter.emit(event))  # noqa: B023
                wait_until(lambda: lock_waiters(admin) == 2, what="the emit waiting")
            for thread in threads + more:
                thread.join(timeout=30)
            assert not errors + late, errors + late
            pair = [app.get_job(job.id) for job in (low, high)]
            assert [j.state if j else None for j in pair] == [JobState.CANCELLED] * 2
    parker.close()
    emitter.close()
    admin_app.close()
    app.close()


def test_a_child_s_end_and_a_cancel_of_the_family_are_retried_whole(url: str) -> None:
    """The one pair whose orders cannot agree: a child's end locks the child, then its
    workflow (to count it down); a cancel by filter takes the workflow first (the lower
    id). The deadlock PostgreSQL finds between them aborts one transaction whole, and the
    backend runs it again: the end is then fenced off (the child was cancelled) or the
    cancel finds the workflow due; no child or count is lost or doubled either way. Here
    the child's end is held between its two locks (on its edge), so the deadlock is
    certain; the database finds it sooner than by default."""
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(f"ALTER DATABASE {url.rsplit('/', 1)[1]} SET deadlock_timeout = '50ms'")
    app, admin_app = App(url), App(url)
    child = app.task(name="child")(lambda: None)

    @app.workflow(name="flow")
    def flow(wf: Workflow) -> None:  # parked by hand here: never run
        raise AssertionError("not run")

    worker = PostgresBackend(url)
    flow.enqueue()
    (held,) = worker.claim_jobs(Claim("w", None, 1))
    (kid,) = [h.id for h in child.enqueue_many([()])]
    assert worker.park_workflow(Park(HeldJob(held.id, held.token), children=[kid])) == "waiting"
    (running,) = worker.claim_jobs(Claim("w", None, 1))
    with psycopg.connect(url, autocommit=True) as admin, psycopg.connect(url) as gate:
        gate.execute("SELECT FROM sqljobs_deps WHERE parent_id = %s FOR UPDATE", (kid,))
        threads, errors = together(
            lambda: worker.finish_jobs([Outcome(kid, running.token, JobState.DONE)])
        )
        wait_until(lambda: lock_waiters(admin) == 1, what="the child's end on its edge")
        more, late = together(lambda: admin_app.cancel(JobFilter(ids=(held.id, kid))))
        wait_until(lambda: lock_waiters(admin) == 2, what="the cancel on the child")
    for thread in threads + more:
        thread.join(timeout=30)
    assert not errors + late, errors + late
    workflow, ended = app.get_job(held.id), app.get_job(kid)
    assert workflow is not None and workflow.state is JobState.CANCELLED
    assert ended is not None and ended.state in (JobState.DONE, JobState.CANCELLED)
    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT count(*) FROM sqljobs_deps").fetchone() == (0,)
    worker.close()
    admin_app.close()
    app.close()
