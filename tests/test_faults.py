"""Faults (issue 16): handlers that raise what is not an Exception or end their process, a
disk that fills up under a SQLite queue, a wall clock that jumps, and the durability each
SQLite connection commits with. PostgreSQL's own faults (a server down for long, timeouts,
an exhausted pool) are in test_faults_postgres.py."""

from __future__ import annotations

import signal

import pytest

import sqljobs
from sqljobs import App, JobState, Retry
from sqljobs.worker import EventLog

from .apps.faults import RAISED
from .conftest import Runs, Spawn, wait_until, worker_thread

SQLITE_ONLY = pytest.mark.parametrize("url", ["sqlite"], indirect=True)


def _job(app: App, job_id: int) -> sqljobs.Job:
    job = app.get_job(job_id)
    assert job is not None
    return job


# -- handlers that raise BaseException or end their process ----------------------------


@SQLITE_ONLY  # what a handler raises is the executor's business, the same on both backends
@pytest.mark.parametrize("kind", sorted(RAISED))
def test_an_async_handler_raising_a_base_exception_fails_its_attempt_and_the_loop_goes_on(
    app: App, kind: str
) -> None:
    """On the event loop, as on threads (test_worker.py): SystemExit, KeyboardInterrupt,
    GeneratorExit or a BaseException of the user's own is the attempt's failure, retried,
    then dead with its name; the loop keeps running the next async job."""
    raised = RAISED[kind]

    @app.task(retry=Retry(max_attempts=2, base=0))
    async def exits() -> None:
        raise raised("stop")

    @app.task
    async def fine() -> str:
        return "ok"

    bad = exits.enqueue().id
    events = EventLog()
    with worker_thread(app, concurrency=1, on_event=events) as worker:
        events.wait("finished", bad, state="dead")
        good = fine.enqueue().id
        events.wait("finished", good, state="done")
        assert worker.counters["leases_lost"] == 0
    job = _job(app, bad)
    assert job.attempts == 2 and job.crashes == 0
    assert [h["outcome"] for h in job.history] == ["failed", "failed"]
    assert job.last_error is not None and f"{kind}: stop" in job.last_error
    assert job.history[0]["exception"].endswith(kind)


@SQLITE_ONLY
def test_a_custom_base_exception_on_a_thread_fails_its_attempt(app: App) -> None:
    raised = RAISED["Abort"]

    @app.task(retry=Retry(max_attempts=1))
    def aborts() -> None:
        raise raised("user abort")

    job_id = aborts.enqueue().id
    events = EventLog()
    with worker_thread(app, concurrency=1, on_event=events):
        events.wait("finished", job_id, state="dead")
    job = _job(app, job_id)
    assert job.last_error == "failed 1 of 1 attempts; last: Abort: user abort"
    assert job.history[0]["exception"] == "tests.apps.faults.Abort"


@SQLITE_ONLY
def test_base_exceptions_in_worker_processes_fail_attempts_and_kill_no_process(
    app: App, spawn: Spawn, runs: Runs
) -> None:
    """Under ``--processes``, on threads and on the loop: every kind fails its attempts
    (no crash counted, no child process replaced) and the jobs around them all run."""
    bad = [
        app.enqueue(task, args=[f"{task}-{kind}", kind], known=False).id
        for task in ("raise_base", "raise_base_async")
        for kind in sorted(RAISED)
    ]
    good = [app.enqueue("record", args=[f"ok{i}"], known=False).id for i in range(10)]
    proc = spawn("--processes", "2", "--concurrency", "2", app="tests.apps.faults:app")
    wait_until(lambda: all(_job(app, i).state is JobState.DEAD for i in bad), timeout=30)
    wait_until(lambda: all(_job(app, i).state is JobState.DONE for i in good), timeout=30)
    for job_id in bad:
        job = _job(app, job_id)
        assert job.crashes == 0 and job.attempts == job.max_attempts, job
        assert {h["outcome"] for h in job.history} == {"failed"}
    children = {pid for _, pid, _ in runs.lines()}
    assert len(children) <= 2, "no child process died and was replaced"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=15) == 0


@SQLITE_ONLY
def test_os_exit_in_a_handler_is_a_crash_another_worker_recovers(
    app: App, spawn: Spawn, runs: Runs
) -> None:
    """``os._exit`` ends the worker process at once: nothing is written. The job's lease
    runs out, the surviving worker finds its holder dead, counts a crash and runs it."""
    job_id = app.enqueue("exit_once", args=["quits"], known=False).id
    victim = spawn("--concurrency", "2", lease=1.0, app="tests.apps.faults:app")
    assert victim.wait(timeout=20) == 7, "the handler's os._exit ended its worker"
    assert _job(app, job_id).state is JobState.RUNNING  # nobody could say otherwise
    survivor = spawn("--concurrency", "2", lease=1.0, app="tests.apps.faults:app")
    wait_until(lambda: _job(app, job_id).state is JobState.DONE, timeout=20)
    job = _job(app, job_id)
    assert job.crashes == 1 and job.attempts == 2 and job.errors == 0
    assert [h["outcome"] for h in job.history] == ["crashed"]
    assert runs.count("start")["quits"] == 2 and runs.count("end")["quits"] == 1
    survivor.send_signal(signal.SIGTERM)
    assert survivor.wait(timeout=15) == 0


@SQLITE_ONLY
def test_os_exit_under_processes_is_handed_back_and_the_supervisor_lives(
    app: App, spawn: Spawn, runs: Runs
) -> None:
    job_id = app.enqueue("exit_once", args=["quits"], known=False).id
    others = [app.enqueue("record", args=[f"ok{i}"], known=False).id for i in range(5)]
    proc = spawn("--processes", "2", "--concurrency", "2", app="tests.apps.faults:app")
    wait_until(lambda: _job(app, job_id).state is JobState.DONE, timeout=30)
    wait_until(lambda: all(_job(app, i).state is JobState.DONE for i in others), timeout=30)
    job = _job(app, job_id)
    assert job.crashes == 1 and job.attempts == 2
    assert [h["outcome"] for h in job.history] == ["crashed"]
    assert proc.poll() is None, "the supervisor survived its child's os._exit"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=15) == 0
