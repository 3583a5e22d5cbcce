"""Real worker processes, real SIGKILL: nothing is lost, leases bring jobs back."""

from __future__ import annotations

import signal
import time

from sqljobs import App, JobState
from sqljobs.maintenance import Reaper

from .conftest import Runs, Spawn, db_execute, wait_until


def test_a_worker_killed_mid_job_loses_nothing(app: App, spawn: Spawn, runs: Runs) -> None:
    n = 40
    for i in range(n):
        app.enqueue("record", args=[f"job{i}", 0.15], known=False)
    victim = spawn("--concurrency", "4", lease=1.0)
    survivor = spawn("--concurrency", "4", lease=1.0)
    wait_until(lambda: runs.started_by(victim.pid), what="the victim to start a job")
    victim.send_signal(signal.SIGKILL)
    victim.wait(timeout=10)
    in_hand = {label for label in runs.started_by(victim.pid)} - {
        label for label, pid, phase in runs.lines() if pid == victim.pid and phase == "end"
    }
    assert in_hand, "the victim was killed holding jobs"

    wait_until(lambda: app.stats().total("done") == n, timeout=30, what="all jobs done")
    done = runs.count("end")
    assert set(done) == {f"job{i}" for i in range(n)}, "every job finished"
    for label in in_hand:
        job = next(j for j in app.list_jobs(limit=100) if j.args[0] == label)
        assert job.state is JobState.DONE
        assert job.crashes == 1 and job.attempts == 2
        assert [h["outcome"] for h in job.history] == ["crashed"]
    assert survivor.poll() is None
    survivor.send_signal(signal.SIGTERM)
    assert survivor.wait(timeout=10) == 0


def test_a_lease_shorter_than_the_job_ends_dead_with_a_lease_diagnosis(app: App) -> None:
    from sqljobs import Retry

    @app.task(lease=0.2, retry=Retry(max_attempts=3, base=0))
    def slow(ctx: sqljobs.JobContext) -> None:
        deadline = time.monotonic() + 5
        while not ctx.lease_lost and time.monotonic() < deadline:
            time.sleep(0.01)

    job_id = slow.enqueue().id
    with stepped_worker(app, heartbeat=False, drain_timeout=0.05, concurrency=2) as worker:
        worker.until(lambda: app.get_job(job_id).state is JobState.DEAD)  # type: ignore[union-attr]
    job = app.get_job(job_id)
    assert job is not None
    assert job.lease_expiries == 3 and job.crashes == 0 and job.errors == 0
    assert "lease expired 3 times" in (job.last_error or "")
    assert "raise lease" in (job.last_error or "")
    assert [h["outcome"] for h in job.history] == ["lease_expired"] * 3


import pytest  # noqa: E402

import sqljobs  # noqa: E402
from sqljobs.testing import stepped_worker  # noqa: E402


def test_a_crash_blames_only_the_job_that_ran_not_the_one_waiting_in_the_buffer(
    app: App, spawn: Spawn, runs: Runs, caplog: pytest.LogCaptureFixture
) -> None:
    """SPEC's poison job is one whose *run* kills its worker: a job claimed into the dead
    worker's buffer, never started there, is handed back uncharged and unblamed."""
    ran = app.enqueue("record", args=["ran", 30], known=False).id
    waited = app.enqueue("record", args=["waited", 30], known=False).id
    victim = spawn("--concurrency", "1", lease=1.0)  # one thread, one job buffered
    wait_until(lambda: runs.started_by(victim.pid) == ["ran"], what="the first job to start")
    wait_until(lambda: (j := app.get_job(waited)) is not None and j.state is JobState.RUNNING)
    victim.send_signal(signal.SIGKILL)
    victim.wait(timeout=10)
    reaper = Reaper(app.backend)

    def all_reaped() -> bool:  # each job's lease runs out on its own (a later claim, later)
        reaper.run_once()
        return app.stats().total("running") == 0

    wait_until(all_reaped, timeout=20, what="both jobs reaped")
    blamed, spared = app.get_job(ran), app.get_job(waited)
    assert blamed is not None and spared is not None
    assert blamed.crashes == 1 and [h["outcome"] for h in blamed.history] == ["crashed"]
    assert spared.crashes == 0 and spared.attempts == 0 and spared.state is JobState.PENDING
    assert [h["outcome"] for h in spared.history] == ["worker_died_before_start"]
    assert runs.started_by(victim.pid) == ["ran"]
    handed_back = [r.getMessage() for r in caplog.records if f"job {waited}:" in r.getMessage()]
    assert handed_back == [
        f"job {waited}: its worker is gone and never started it (no attempt charged) -> pending"
    ]


def test_a_suspect_waiting_to_run_alone_is_not_blamed_when_its_worker_dies(
    app: App, spawn: Spawn, runs: Runs
) -> None:
    """A job from two crashed workers is claimed, then waits for the worker to empty so it
    can run alone: a crash while it waits is not its doing. It goes back uncharged, still a
    suspect, not ``dead`` ("crashed its worker 3 times" for a run it never had)."""
    busy = app.enqueue("record", args=["busy", 30], known=False).id
    victim = spawn("--concurrency", "1", "--poll-interval", "0.2", lease=2.0)
    wait_until(lambda: runs.started_by(victim.pid) == ["busy"], what="the busy job to start")
    suspect = app.enqueue("record", args=["suspect"], known=False, delay=3600).id
    db_execute(
        app,
        "UPDATE sqljobs_jobs SET crashes = 2, run_at = 0 WHERE id = ?",
        "UPDATE sqljobs_jobs SET crashes = 2, run_at = now() - interval '1 s' WHERE id = ?",
        (suspect,),
    )

    def held(job_id: int) -> bool:
        job = app.get_job(job_id)
        return job is not None and job.state is JobState.RUNNING

    wait_until(lambda: held(suspect), timeout=20, what="the worker to claim the suspect")
    assert held(busy), "the suspect waits: the worker still runs another job"
    victim.send_signal(signal.SIGKILL)
    victim.wait(timeout=10)
    reaper = Reaper(app.backend)

    def all_reaped() -> bool:
        reaper.run_once()
        return app.stats().total("running") == 0

    wait_until(all_reaped, timeout=20, what="both jobs reaped")
    job = app.get_job(suspect)
    assert job is not None
    assert job.state is JobState.PENDING and job.crashes == 2 and job.attempts == 0
    assert [h["outcome"] for h in job.history] == ["worker_died_before_start"]
    assert runs.started_by(victim.pid) == ["busy"]
    ran = app.get_job(busy)
    assert ran is not None and ran.crashes == 1
