"""Control over work in flight with real worker processes, on both backends: a waiter
woken across processes, cancelling running tasks of each kind, cancelling with no worker
up, pausing a queue that three workers drain, and replacing a process whose cancelled
handler will not stop."""

from __future__ import annotations

import os
import signal
import statistics
import time

import pytest

import sqljobs.handles
from sqljobs import App, JobCancelled, JobState

from .conftest import Runs, Spawn, wait_until

LEASE = 1.5
"""Short leases: a worker that no announcement reaches (a SQLite file whose folder takes
no socket) learns of a cancel at its next heartbeat (every lease/3 s)."""


def _phases(runs: Runs, label: str) -> list[str]:
    return [phase for name, _, phase in runs.lines() if name == label]


def test_a_waiter_in_another_process_is_woken_within_milliseconds(
    app: App, spawn: Spawn, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The caller (this process) blocks on result(); a worker process completes the job.
    The wait ends by the notifier (NOTIFY, or the change counter on SQLite), not by the
    fallback look: here that look would come only after result()'s timeout."""
    timeout = 20.0
    monkeypatch.setattr(sqljobs.handles, "FALLBACK_LOOK", 3 * timeout)
    proc = spawn("--concurrency", "2", lease=LEASE)
    lags, waited = [], 0
    for i in range(7):
        handle = app.enqueue("double", args=[i], known=False)
        asked = app.clock()
        assert handle.result(timeout=timeout) == 2 * i
        returned = app.clock()
        # with no wake-up, result() sleeps to its deadline and looks once more there
        assert returned - asked < timeout, "woken by its last look, not by the notifier"
        finished = handle.refresh().finished_at
        assert finished is not None
        lags.append(returned - finished)
        waited += finished > asked  # it ended while result() waited: a wake-up ended that
    median = statistics.median(lags)
    print(f"result() returned {1000 * median:.1f} ms (median of 7) after the completion")
    assert waited, "every job had ended before result() looked: no wake-up was needed"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=15) == 0


@pytest.mark.parametrize(
    ("task", "after_cancel"),
    [
        ("cooperative", "cancelled"),  # a thread task that checks ctx.cancelled
        ("patient", "cancelled"),  # an async task: CancelledError at its await
        ("stubborn", "end"),  # ignores it: runs to its end, its outcome discarded
    ],
)
def test_cancelling_a_running_task_in_a_worker_process(
    app: App, spawn: Spawn, runs: Runs, task: str, after_cancel: str
) -> None:
    seconds = 2.0 if task == "stubborn" else 60.0
    handle = app.enqueue(task, args=[task, seconds], known=False)
    proc = spawn("--concurrency", "2", lease=LEASE)
    wait_until(lambda: "start" in _phases(runs, task), timeout=20, what="the task to start")
    assert handle.cancel() is True
    assert handle.refresh().state is JobState.CANCELLED, "cancelled at once in the database"
    wait_until(lambda: after_cancel in _phases(runs, task), timeout=20, what=after_cancel)
    assert _phases(runs, task) == ["start", after_cancel]
    with pytest.raises(JobCancelled):
        handle.result(timeout=5)
    job = handle.refresh()
    assert job.state is JobState.CANCELLED and job.result is None and job.errors == 0
    assert job.history[-1]["outcome"] == "cancelled"
    follow = app.enqueue("double", args=[4], known=False)  # the worker goes on working
    assert follow.result(timeout=20) == 8
    assert handle.refresh().state is JobState.CANCELLED, "a late outcome was discarded"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=15) == 0


def test_a_cancel_reaches_a_worker_process_through_the_notifier_not_its_heartbeat(
    app: App, spawn: Spawn, runs: Runs
) -> None:
    """A 60 s lease: the worker's heartbeat comes every 20 s, so a handler told of its
    cancel within 5 s heard it through the notifier (NOTIFY, or a datagram on SQLite)."""
    handle = app.enqueue("cooperative", args=["cooperative", 60.0], known=False)
    proc = spawn("--concurrency", "2", lease=60)
    wait_until(lambda: "start" in _phases(runs, "cooperative"), timeout=20, what="the start")
    cancelled_at = time.monotonic()
    assert handle.cancel() is True
    wait_until(lambda: "cancelled" in _phases(runs, "cooperative"), timeout=5, what="the cancel")
    print(f"the handler saw its cancel {1000 * (time.monotonic() - cancelled_at):.0f} ms later")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=15) == 0


def test_a_job_cancelled_while_no_worker_runs_never_runs(
    app: App, spawn: Spawn, runs: Runs
) -> None:
    doomed = app.enqueue("record", args=["doomed"], known=False)
    assert app.cancel(doomed.id)
    proc = spawn("--concurrency", "2", lease=LEASE)
    after = app.enqueue("record", args=["after"], known=False)
    assert after.result(timeout=20) is None
    assert _phases(runs, "doomed") == []
    assert doomed.refresh().state is JobState.CANCELLED and doomed.refresh().attempts == 0
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=15) == 0


def test_pausing_a_queue_that_three_workers_drain(app: App, spawn: Spawn, runs: Runs) -> None:
    """No job of the paused queue is claimed after the pause commits, the jobs already
    running finish, the workers go on with other queues, and a resume drains the rest."""
    total = 240
    handles = [app.enqueue("record", args=[f"j{i}", 0.02], known=False) for i in range(total)]
    procs = [spawn("--concurrency", "2", lease=LEASE) for _ in range(3)]
    wait_until(lambda: app.stats().counts["default"]["done"] >= 30, timeout=30, what="a start")
    assert app.pause_queue("default")
    paused_at = app.backend.queue_states()["default"][1]
    assert paused_at is not None
    wait_until(lambda: app.stats().counts["default"]["running"] == 0, timeout=20,
               what="the running jobs to finish")  # fmt: skip
    pending = app.stats().counts["default"]["pending"]
    assert pending > 0, "the pause came before the queue drained"
    # the workers are alive and claiming: a job of another queue runs
    other = app.enqueue("record", args=["other", 0.0], queue="other", known=False)
    assert other.result(timeout=20) is None
    assert app.stats().counts["default"]["pending"] == pending, "nothing claimed while paused"
    claimed_after = [
        h.id
        for h in handles
        if (job := h.refresh()).started_at is not None and job.started_at > paused_at + 0.05
    ]
    assert claimed_after == [], "claims from the paused queue after the pause point"
    assert app.resume_queue("default")
    wait_until(lambda: app.stats().counts["default"]["done"] == total, timeout=60,
               what="the rest to drain after the resume")  # fmt: skip
    assert max(runs.count("end").values()) == 1, "each job ran once"
    for proc in procs:
        proc.send_signal(signal.SIGTERM)
    for proc in procs:
        assert proc.wait(timeout=15) == 0


def test_a_process_whose_cancelled_handler_will_not_stop_is_replaced(
    app: App, spawn: Spawn, runs: Runs
) -> None:
    handle = app.enqueue("stubborn", args=["stuck", 120.0], known=False)
    proc = spawn("--processes", "2", "--concurrency", "2", "--cancel-grace", "0.5", lease=3.0)
    wait_until(lambda: "start" in _phases(runs, "stuck"), timeout=20, what="the task to start")
    (pid,) = [p for name, p, phase in runs.lines() if name == "stuck" and phase == "start"]
    app.cancel(handle.id)

    def gone() -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        return False

    wait_until(gone, timeout=30, what="the stuck worker process to be replaced")
    assert _phases(runs, "stuck") == ["start"], "the handler ended with its process"
    jobs = [app.enqueue("record", args=[f"after{i}"], known=False) for i in range(6)]
    for job in jobs:
        assert job.result(timeout=20) is None
    assert pid not in {p for name, p, _ in runs.lines() if name.startswith("after")}
    assert handle.refresh().state is JobState.CANCELLED
    assert proc.poll() is None, "the supervisor lives on"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=15) == 0, "the supervisor stops, its stuck child long gone"
