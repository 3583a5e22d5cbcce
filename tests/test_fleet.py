"""Workers claim only what they can run: a mixed fleet shares a queue safely."""

from __future__ import annotations

from sqljobs import App, JobState

from .apps import fleet
from .conftest import Runs, Spawn, wait_until


def test_two_services_with_different_tasks_share_a_queue_and_burn_no_attempt(
    url: str, spawn: Spawn, runs: Runs
) -> None:
    app = App(url)
    for i in range(40):  # interleaved, so each worker meets the other's jobs first
        app.enqueue("resize", args=[f"r{i}"], queue="shared", known=False)
        app.enqueue("bill", args=[f"b{i}"], queue="shared", known=False)
    a = spawn("--concurrency", "4", app="tests.apps.fleet:app_a")
    b = spawn("--concurrency", "4", app="tests.apps.fleet:app_b")
    wait_until(lambda: app.stats().total(JobState.DONE) == 80, timeout=60, what="80 jobs done")
    jobs = app.list_jobs(limit=100)
    assert {j.state for j in jobs} == {JobState.DONE}
    assert all(j.attempts == 1 and j.errors == 0 for j in jobs), "an attempt was burnt"
    ran = [(label.split(":")[0], pid) for label, pid, _ in runs.lines()]
    assert {pid for task, pid in ran if task == "resize"} == {a.pid}
    assert {pid for task, pid in ran if task == "bill"} == {b.pid}
    assert len(ran) == 80
    assert fleet.app_a.tasks.keys() != fleet.app_b.tasks.keys()
