"""Graceful shutdown of a real worker process: SIGTERM drains, then releases; twice is now."""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import sqljobs
from sqljobs import App, BackendError, JobState, Retry
from sqljobs.worker import EventLog

from .conftest import Runs, Spawn, wait_until, worker_thread


def _started(runs: Runs) -> set[str]:
    return {label for label, _, phase in runs.lines() if phase == "start"}


def test_sigterm_finishes_in_flight_jobs_and_claims_no_more(
    app: App, spawn: Spawn, runs: Runs
) -> None:
    for i in range(20):
        app.enqueue("record", args=[f"job{i}", 0.3], known=False)
    proc = spawn("--concurrency", "4", "--drain-timeout", "1.5", lease=3.0)
    wait_until(lambda: len(_started(runs)) >= 4, what="four jobs in flight")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=10) == 0
    started, ended = _started(runs), set(runs.count("end"))
    assert started == ended, "every job in flight at SIGTERM completed"
    assert 4 <= len(started) < 20, "no claims after the signal beyond the first batch"
    jobs = app.list_jobs(limit=50)
    assert {j.args[0] for j in jobs if j.state is JobState.DONE} == started
    pending = [j for j in jobs if j.state is JobState.PENDING]
    assert len(pending) == 20 - len(started) and all(j.attempts == 0 for j in pending)


def test_jobs_still_running_after_the_drain_are_released_uncharged(
    app: App, spawn: Spawn, runs: Runs
) -> None:
    for i in range(4):
        app.enqueue("record", args=[f"long{i}", 5.0], known=False)
    proc = spawn("--concurrency", "4", "--drain-timeout", "0.3", lease=2.0)
    wait_until(lambda: len(_started(runs)) == 4, what="four long jobs in flight")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=10) == 0
    # exit bounded by the drain timeout, not the jobs: it came before any job ended
    assert not runs.count("end"), "the worker waited for its jobs"
    jobs = app.list_jobs(limit=10)
    assert all(j.state is JobState.PENDING and j.attempts == 0 for j in jobs)
    assert all(j.history[-1]["outcome"] == "released" for j in jobs)


def test_a_second_signal_stops_at_once(app: App, spawn: Spawn, runs: Runs, tmp_path: Path) -> None:
    for i in range(2):
        app.enqueue("record", args=[f"long{i}", 5.0], known=False)
    proc = spawn("--concurrency", "2", "--drain-timeout", "9", lease=20.0)
    wait_until(lambda: len(_started(runs)) == 2, what="two jobs in flight")
    proc.send_signal(signal.SIGTERM)
    output = tmp_path / "worker-0.log"  # the spawn fixture's log of this worker
    wait_until(lambda: "stopping, draining" in output.read_text(), what="the drain to start")
    assert proc.poll() is None, "the first signal drains: the worker waits for its jobs"
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=10) == 0
    # the 9 s drain would have let the 5 s jobs end: the exit came before either did
    assert not runs.count("end"), "the second signal did not stop the drain"
    assert all(j.state is JobState.PENDING for j in app.list_jobs(limit=10))


def test_jobs_a_claim_brings_back_after_the_stop_are_handed_back_unstarted(app: App) -> None:
    """A claim can be in flight when the stop comes (on PostgreSQL on a lane thread): the
    jobs it brings back must not start, but go back to pending with no attempt charged,
    and no claim may follow it (it could take back the very jobs just handed back)."""
    ran: list[int] = []
    app.task(name="t")(ran.append)
    claimed, release = threading.Event(), threading.Event()
    real_open = app._open_backend

    def gated_backend(**options: Any) -> Any:
        """The worker's backend, whose claims pause once they have committed jobs."""
        backend = real_open(**options)
        real = backend.finish_and_claim

        def gated(*args: Any, **kwargs: Any) -> Any:
            written, jobs = real(*args, **kwargs)
            if jobs:  # committed: these jobs are this worker's now
                claimed.set()
                release.wait(10)
            return written, jobs

        backend.finish_and_claim = gated  # type: ignore[method-assign]
        return backend

    app._open_backend = gated_backend  # type: ignore[method-assign]
    events = EventLog()
    with worker_thread(app, concurrency=2, poll_interval=60, on_event=events) as worker:
        handles = app.tasks["t"].enqueue_many([(i,) for i in range(8)])  # full batches
        assert claimed.wait(10), "the worker did not claim"
        worker.stop()
        release.set()
        assert worker.stopped.wait(10)
    assert ran == [], "a job claimed after the stop was started"
    for handle in handles:
        job = handle.job()
        assert job is not None and job.state is JobState.PENDING and job.attempts == 0
    assert app.stats().total("pending") == 8
    assert not events.of("started") and events.of("released"), "the claimed ones went back"


def test_a_draining_worker_sleeps_between_its_duties(app: App) -> None:
    """While a long job drains, the coordinator waits on its events: the fallback poll
    falling due mid-drain, or a retry written during it, must not make it spin."""
    started = threading.Event()

    @app.task(name="slow")
    def slow() -> None:
        started.set()
        time.sleep(1.0)  # the job's own work, longer than the poll interval

    @app.task(name="fails", retry=Retry(max_attempts=3, base=0.1, cap=0.1))
    def fails() -> None:
        raise RuntimeError("retry me")

    with worker_thread(app, concurrency=2, poll_interval=0.1, drain_timeout=5) as worker:
        slow.enqueue()
        assert started.wait(10)
        worker.stop()
        fails.enqueue()  # not claimed while stopping, so no retry; the poll still falls due
        before = worker.counters["loops"]
        assert worker.stopped.wait(10)
        woke = worker.counters["loops"] - before
    assert woke < 50, f"the coordinator woke {woke} times in a 1 s drain: it spins"


def test_a_release_that_fails_is_written_again_not_dropped(app: App) -> None:
    """The database failing just as the drain hands jobs back: the release is retried
    with the worker's other writes, so the job is pending again, not left to its lease."""
    release = threading.Event()

    @app.task(name="long")
    def long() -> None:
        release.wait(10)  # still running when the drain ends

    failed: list[bool] = []
    real_open = app._open_backend

    def flaky_backend(**options: Any) -> Any:
        """The worker's backend, failing the first hand-back it is asked to write."""
        backend = real_open(**options)
        real = backend.finish_jobs

        def flaky(outcomes: Any, *rest: Any) -> Any:
            if not failed and any(o.state is JobState.PENDING for o in outcomes):
                failed.append(True)
                raise BackendError("database went away (simulated)")
            return real(outcomes, *rest)

        backend.finish_jobs = flaky  # type: ignore[method-assign,assignment]
        return backend

    app._open_backend = flaky_backend  # type: ignore[method-assign]
    events = EventLog()
    with worker_thread(app, concurrency=1, drain_timeout=0.3, on_event=events) as worker:
        handle = long.enqueue()
        events.wait("started", handle.id)
        worker.stop()
        assert worker.stopped.wait(10)
    release.set()
    assert failed, "the release never reached the database"
    job = handle.job()
    assert job is not None and job.state is JobState.PENDING and job.attempts == 0
    assert job.history[-1]["outcome"] == "released"


@pytest.mark.timeout(10)
def test_a_signal_while_the_main_thread_holds_the_wake_lock_cannot_deadlock(app: App) -> None:
    """A handler runs between two bytecodes of the main thread, which may be inside the
    coordinator's wake event at that moment, holding its lock (it was, once, in CI: the
    second signal never stopped the worker). The handler must not take that lock."""
    app.task(name="any")(lambda: None)
    worker = sqljobs.Worker(app, install_signal_handlers=False)
    lock = worker._wake._cond  # type: ignore[attr-defined]  # (white box: the event's own lock)
    with lock:  # as held inside the event's wait(), set() or clear()
        worker.handle_signal(signal.SIGTERM)
        worker.handle_signal(signal.SIGINT)
    with worker:
        step = worker.run_once()
    assert step.stopped, "first signal drains, the second stops at once"


def test_a_worker_off_the_main_thread_says_it_does_not_handle_sigterm(
    app: App, caplog: pytest.LogCaptureFixture
) -> None:
    """Python lets only the main thread install signal handlers: run_worker() elsewhere
    once skipped them without a word, so a SIGTERM killed the process undrained."""
    caplog.set_level("WARNING", logger="sqljobs.worker")

    @app.task
    def t() -> None: ...

    worker = sqljobs.Worker(app)  # install_signal_handlers=True, as run_worker() has it
    thread = threading.Thread(target=worker.run, name="off-main")
    thread.start()
    try:
        wait_until(lambda: app.stats().workers == 1, what="the worker registered")
    finally:
        worker.stop()
        thread.join(10)
    assert not thread.is_alive()
    warned = [r.getMessage() for r in caplog.records if "SIGTERM" in r.getMessage()]
    assert len(warned) == 1 and "'off-main', not the main thread" in warned[0]
    assert "worker.handle_signal(signum)" in warned[0]
    assert "install_signal_handlers=False" in warned[0]
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # nothing was installed
    caplog.clear()
    with worker_thread(app):  # told not to: no warning
        wait_until(lambda: app.stats().workers == 1)
    assert not [r for r in caplog.records if "SIGTERM" in r.getMessage()]
