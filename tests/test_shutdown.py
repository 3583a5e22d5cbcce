"""Graceful shutdown of a real worker process: SIGTERM drains, then releases; twice is now."""

from __future__ import annotations

import signal
import time

from sqljobs import App, JobState

from .conftest import Runs, Spawn, wait_until


def _started(runs: Runs) -> set[str]:
    return {label for label, _, phase in runs.lines() if phase == "start"}


def test_sigterm_finishes_in_flight_jobs_and_claims_no_more(
    app: App, spawn: Spawn, runs: Runs
) -> None:
    for i in range(20):
        app.enqueue("record", args=[f"job{i}", 0.3])
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
    app: App, spawn, runs: Runs
) -> None:  # type: ignore[no-untyped-def]
    for i in range(4):
        app.enqueue("record", args=[f"long{i}", 5.0])
    proc = spawn("--concurrency", "4", "--drain-timeout", "0.3", lease=2.0)
    wait_until(lambda: len(_started(runs)) == 4, what="four long jobs in flight")
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=10) == 0
    assert time.monotonic() - sent < 3.0, "exit bounded by the drain timeout, not the jobs"
    jobs = app.list_jobs(limit=10)
    assert all(j.state is JobState.PENDING and j.attempts == 0 for j in jobs)
    assert all(j.history[-1]["outcome"] == "released" for j in jobs)
    assert not runs.count("end")


def test_a_second_signal_stops_at_once(app: App, spawn: Spawn, runs: Runs) -> None:
    for i in range(2):
        app.enqueue("record", args=[f"long{i}", 5.0])
    proc = spawn("--concurrency", "2", "--drain-timeout", "9", lease=20.0)
    wait_until(lambda: len(_started(runs)) == 2, what="two jobs in flight")
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    wait_until(lambda: app.stats().workers == 1 and proc.poll() is None, what="draining")
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=10) == 0
    assert time.monotonic() - sent < 3.0, "the second signal did not wait for the 9 s drain"
    assert all(j.state is JobState.PENDING for j in app.list_jobs(limit=10))
