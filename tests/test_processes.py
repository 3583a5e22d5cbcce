"""``--processes N``: a supervisor keeps N workers, hands back a dead child's jobs, and
ends a poison job that keeps killing its worker."""

from __future__ import annotations

import signal
from itertools import pairwise

from sqljobs import App, JobState

from .conftest import Runs, Spawn, wait_until


def test_processes_share_the_work(app: App, spawn: Spawn, runs: Runs) -> None:
    for i in range(60):
        app.enqueue("record", args=[f"job{i}", 0.02], known=False)
    proc = spawn("--processes", "3", "--concurrency", "2")
    wait_until(lambda: app.stats().total("done") == 60, timeout=30)
    pids = {pid for _, pid, _ in runs.lines()}
    assert len(pids) >= 2 and proc.pid not in pids
    assert max(runs.count("end").values()) == 1
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=15) == 0


def test_a_poison_job_ends_dead_after_crashing_its_worker_three_times(
    app: App, spawn: Spawn, runs: Runs
) -> None:
    poison = app.enqueue("kill_my_worker", args=["poison"], known=False).id
    healthy = [app.enqueue("record", args=[f"ok{i}"], known=False).id for i in range(10)]
    proc = spawn("--processes", "2", "--concurrency", "2", lease=30.0)
    wait_until(lambda: app.get_job(poison).state is JobState.DEAD, timeout=30)  # type: ignore[union-attr]
    wait_until(lambda: all(app.get_job(i).state is JobState.DONE for i in healthy), timeout=30)  # type: ignore[union-attr]
    job = app.get_job(poison)
    assert job is not None
    assert job.crashes == 3 and job.last_error is not None
    assert job.last_error.startswith("crashed its worker 3 times")
    outcomes = [h["outcome"] for h in job.history]
    assert outcomes.count("crashed") == 3
    # a process the poison killed may have held it, claimed but not started, in its buffer
    # once more: handed back as "worker_died_before_start", which charges no crash
    assert set(outcomes) <= {"crashed", "worker_died_before_start"}
    # a run the database never learned had begun (a buffered job killing its worker before
    # the next round trip) is handed back uncharged, so it may run once more (see the note
    # on issue 16: crash counting under prefetch)
    assert 3 <= runs.count("start")["poison"] <= len(outcomes)
    assert proc.poll() is None, "the supervisor survived its children"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=15) == 0


def test_a_suspect_job_runs_again_without_waiting_for_the_poll(
    app: App, spawn: Spawn, runs: Runs
) -> None:
    """After its second crash a job is run alone (a suspect): the next-due answer says when
    it falls due, so a worker claims it then rather than at its fallback poll."""
    poll = 30.0
    poison = app.enqueue("kill_my_worker", args=["poison"], known=False).id
    proc = spawn("--processes", "2", "--poll-interval", str(poll), lease=60.0)
    wait_until(lambda: app.get_job(poison).state is JobState.DEAD, timeout=2 * poll)  # type: ignore[union-attr]
    job = app.get_job(poison)
    assert job is not None and job.crashes == 3
    crashed = [h for h in job.history if h["outcome"] == "crashed"]
    assert len(crashed) == 3
    retried, suspect = (b["started_at"] - a["ended_at"] for a, b in pairwise(crashed))
    assert suspect < 2.0, f"the suspect waited {suspect:.2f} s (a plain retry {retried:.2f} s)"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=15) == 0
