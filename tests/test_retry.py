"""Backoff with full jitter, caps, max attempts, deadlines, and the task's own choices."""

from __future__ import annotations

import random
import statistics

import pytest

import sqljobs
from sqljobs import App, Discard, JobState, Retry, RetryLater
from sqljobs.testing import stepped_worker

from .conftest import wait_until, worker_thread


@pytest.mark.parametrize("attempt", [1, 2, 3, 5, 8, 12])
def test_delays_fall_within_zero_and_the_capped_exponential(attempt: int) -> None:
    policy = Retry(max_attempts=20, base=0.5, cap=30)
    rng = random.Random(attempt)
    ceiling = min(30, 0.5 * 2 ** (attempt - 1))
    samples = [policy.delay(attempt, rng) for _ in range(2000)]
    assert all(0 <= d <= ceiling for d in samples)
    # full jitter spreads uniformly: mean near half the ceiling, wide spread, few repeats
    assert statistics.mean(samples) == pytest.approx(ceiling / 2, rel=0.1)
    assert statistics.pstdev(samples) > ceiling / 4
    assert len(set(samples)) > 1900


def test_without_jitter_the_delay_is_the_ceiling() -> None:
    policy = Retry(base=1, cap=5, jitter=False)
    assert [policy.delay(n) for n in range(1, 6)] == [1, 2, 4, 5, 5]


def test_a_failing_job_is_retried_then_dead_with_error_traceback_and_history(app: App) -> None:
    calls: list[int] = []

    @app.task(retry=Retry(max_attempts=3, base=0.01, cap=0.02))
    def flaky(ctx: sqljobs.JobContext) -> None:
        calls.append(ctx.attempt)
        raise RuntimeError(f"boom {ctx.attempt}")

    job_id = flaky.enqueue().id
    report = app.run_until_empty()  # waits out the 10-20 ms backoffs in real time
    assert (report.dead, report.failed, report.job(job_id).attempts) == (1, 3, 3)
    job = app.get_job(job_id)
    assert job is not None
    assert calls == [1, 2, 3]
    assert (job.attempts, job.errors) == (3, 3)
    assert job.last_error == "failed 3 of 3 attempts; last: RuntimeError: boom 3"
    assert job.last_traceback and "RuntimeError: boom 3" in job.last_traceback
    assert [h["error"] for h in job.history] == [f"RuntimeError: boom {i}" for i in (1, 2, 3)]
    assert all(0 <= h["retry_in"] <= 0.02 for h in job.history[:2])


def test_retry_run_at_follows_the_policy(app: App) -> None:
    @app.task(retry=Retry(max_attempts=5, base=100, cap=300))
    def fails() -> None:
        raise ValueError("x")

    job_id = fails.enqueue().id
    with stepped_worker(app) as worker:
        worker.until(lambda: app.get_job(job_id).errors == 1)  # type: ignore[union-attr]
    job = app.get_job(job_id)
    assert job is not None and job.state is JobState.PENDING
    ended = job.history[0]["ended_at"]
    assert ended <= job.run_at <= ended + 100 + 1


def test_the_deadline_ends_retries(app: App) -> None:
    @app.task(retry=Retry(max_attempts=100, base=0.05, cap=0.05, deadline=0.3))
    def fails() -> None:
        raise ValueError("still broken")

    job_id = fails.enqueue().id
    with stepped_worker(app) as worker:
        worker.until(lambda: app.get_job(job_id).state is JobState.DEAD)  # type: ignore[union-attr]
    job = app.get_job(job_id)
    assert job is not None and job.last_error is not None
    assert job.last_error.startswith("deadline passed")
    assert 1 < job.attempts < 100


def test_a_task_can_ask_for_a_retry_after_a_delay_or_be_discarded(app: App) -> None:
    @app.task(retry=Retry(max_attempts=3, base=0))
    def later(ctx: sqljobs.JobContext) -> None:
        if ctx.attempt == 1:
            raise RetryLater(0.2, "not ready")

    @app.task
    def hopeless() -> None:
        raise Discard("customer deleted")

    later_id, hopeless_id = later.enqueue().id, hopeless.enqueue().id
    report = app.run_until_empty()
    assert (report.job(later_id).state, report.job(hopeless_id).state) == ("done", "dead")
    later_job, hopeless_job = app.get_job(later_id), app.get_job(hopeless_id)
    assert later_job is not None and hopeless_job is not None
    assert later_job.history[0]["outcome"] == "retry_requested"
    assert later_job.history[0]["retry_in"] == 0.2
    assert hopeless_job.attempts == 1 and hopeless_job.last_error == "discarded: customer deleted"


def test_a_retry_runs_when_it_falls_due_not_at_the_next_poll(app: App) -> None:
    import itertools
    import time

    started: list[float] = []

    @app.task(retry=Retry(max_attempts=3, base=0.2, cap=0.2, jitter=False))
    def fails() -> None:
        started.append(time.monotonic())
        raise ValueError("x")

    job_id = fails.enqueue().id
    with worker_thread(app, poll_interval=30):  # how run() waits: a thread of its own
        wait_until(lambda: app.get_job(job_id).state is JobState.DEAD)  # type: ignore[union-attr]
    gaps = [b - a for a, b in itertools.pairwise(started)]
    assert len(gaps) == 2 and all(0.19 <= g < 1.0 for g in gaps), gaps
