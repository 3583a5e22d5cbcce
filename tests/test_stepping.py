"""sqljobs.testing.stepped_worker: a worker the test steps pass by pass, waiting on what
happened (events, job states) instead of on the clock."""

from __future__ import annotations

import threading

import pytest

from sqljobs import App, JobState, Retry
from sqljobs.testing import Stepper, stepped_worker
from sqljobs.worker import WorkerEvent


def test_a_stepped_worker_runs_a_job_to_its_end_in_the_tests_thread(app: App) -> None:
    ran: list[int] = []

    @app.task
    def add(n: int) -> int:
        ran.append(n)
        return n + 1

    job_id = add.enqueue(1).id
    with stepped_worker(app) as worker:
        assert isinstance(worker, Stepper) and worker.passes == 0, "nothing runs until stepped"
        assert ran == []
        job = worker.until_ended(job_id)
        assert job.state is JobState.DONE and ran == [1]
        # the outcome may be written before the worker accounts for it (on PostgreSQL it
        # rides a claim's round trip): its event follows within a pass or two
        (finished,) = worker.until_event("finished", job_id)
        assert finished.state == "done" and worker.passes >= 1


def test_until_event_returns_the_events_it_waited_for(app: App) -> None:
    @app.task(retry=Retry(max_attempts=2, base=0))
    def fails() -> None:
        raise ValueError("no")

    job_id = fails.enqueue().id
    with stepped_worker(app) as worker:
        (dead,) = worker.until_event("finished", job_id, state="dead")
        assert dead.attempt == 2
        assert [e.state for e in worker.events.of("finished", job_id)] == ["pending", "dead"]


def test_a_wait_whose_budget_runs_out_says_what_never_happened(app: App) -> None:
    @app.task
    def never_enqueued() -> None: ...

    with stepped_worker(app, poll_interval=0.01) as worker, pytest.raises(AssertionError) as caught:
        worker.until_event("finished", 12345, max_steps=3)
    said = str(caught.value)
    assert "1 'finished' event(s) of job 12345 never happened: 3 passes" in said, said


def test_a_condition_already_met_takes_no_pass(app: App) -> None:
    app.task(name="noop")(lambda: None)
    with stepped_worker(app) as worker:
        assert worker.until(lambda: "yes") == "yes"
        assert worker.passes == 0


def test_a_handler_released_by_the_test_is_collected_on_the_next_passes(app: App) -> None:
    """The test's thread steps the worker and releases the handler between steps: the
    handler's return wakes the stepper, with no sleep in between."""
    release = threading.Event()

    @app.task
    def held() -> str:
        assert release.wait(10)
        return "out"

    job_id = held.enqueue().id
    with stepped_worker(app) as worker:
        worker.until_event("started", job_id)
        job = app.get_job(job_id)
        assert job is not None and job.state is JobState.RUNNING
        release.set()
        assert worker.until_ended(job_id).result == "out"


def test_stop_drains_and_ends_the_passes(app: App) -> None:
    seen: list[WorkerEvent] = []

    @app.task
    def noop() -> None: ...

    job_id = noop.enqueue().id
    with stepped_worker(app, on_event=seen.append) as worker:
        worker.until_ended(job_id)
        last = worker.stop()
        assert last.stopped and worker.last is last
        with pytest.raises(AssertionError, match="the worker stopped"):
            worker.until(lambda: False, what="anything")
    assert [e.kind for e in seen if e.job_id == job_id][-1] == "finished", "on_event told too"


def test_the_example_in_the_docs(app: App) -> None:
    """docs/testing.md's example, as written there (with the ``app`` fixture)."""
    entered, release = threading.Event(), threading.Event()

    @app.task
    def export() -> str:
        entered.set()
        release.wait(10)
        return "ok"

    handle = export.enqueue()
    with stepped_worker(app) as worker:
        worker.until(entered.is_set, what="the handler to begin")
        assert handle.refresh().state == "running"
        release.set()
        assert worker.result(handle) == "ok"
