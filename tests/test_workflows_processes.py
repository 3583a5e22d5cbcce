"""Durable workflows under real worker processes and real SIGKILLs, on every engine."""

from __future__ import annotations

import json

import sqljobs
from sqljobs import App, JobState

from .apps.workflows import register
from .conftest import Runs, Spawn, db_execute, wait_until


def test_a_workflow_killed_in_every_step_runs_each_finished_step_once(
    app: App, spawn: Spawn, runs: Runs
) -> None:
    """The supervisor restarts the process the workflow killed; each new attempt replays
    the finished steps from their checkpoints: every step whose effect ended ran once, the
    one killed mid-way ran again, and the transaction step committed exactly once."""
    handle = register(app).enqueue("w")  # (registered here too: its retry is stamped now)
    spawn("--processes", "2", "--concurrency", "2", app="tests.apps.workflows:app", lease=1.0)
    wait_until(lambda: handle.job().state is JobState.DONE, timeout=90, what="the workflow")  # type: ignore[union-attr]
    steps = [f"w-s{i}" for i in range(6)]
    assert handle.result(timeout=1) == steps
    ended, started = runs.count("end"), runs.count("start")
    assert {s: ended[s] for s in steps} == {s: 1 for s in steps}, "each finished once"
    assert {s: started[s] for s in steps} == {s: 2 for s in steps}, "killed once each"
    assert db_execute(app, "SELECT count(*) FROM wf_booked") == [(1,)]
    job = handle.job()
    # checkpoints clear the crashes before them: only the kill after the last one counts
    assert job is not None and job.state is JobState.DONE and job.crashes == 1
    history = app.workflow_history(handle.id)
    assert [s.name for s in history] == [*(f"s{i}" for i in range(6)), "book", "sleep"]
    assert all(s.state == "done" for s in history)


def test_the_cli_lists_workflows_and_shows_a_timeline(url: str) -> None:
    from sqljobs.testing import Clock

    from .test_cli import run_cli

    clock = Clock()
    app = App(url, clock=clock)
    register(app)

    @app.workflow(name="six_steps_waiting")
    def waiting(wf: sqljobs.Workflow) -> None:
        wf.step("first", lambda: 1)
        wf.wait_for("go", timeout=3600)

    handle = waiting.enqueue()
    app.run_until_empty(clock=clock, until=clock() + 1)
    listed = run_cli("--app", "tests.apps.workflows:app", "workflows", "list", "--json", url=url)
    assert listed.stdout.strip() == "[]", "that App's own workflow has no jobs here"
    shown = run_cli("workflows", "show", str(handle.id), url=url)
    assert f"workflow {handle.id} (six_steps_waiting): waiting" in shown.stdout
    assert "waits for event 'go'" in shown.stdout
    assert "first" in shown.stdout and "done" in shown.stdout
    as_json = run_cli("workflows", "show", str(handle.id), "--json", url=url)
    steps = json.loads(as_json.stdout)["steps"]
    assert [(s["name"], s["state"], s["value"]) for s in steps] == [
        ("first", "done", 1),
        ("go", "waiting", None),
    ]
    missing = run_cli("workflows", "show", "999999", url=url, check=False)
    assert missing.returncode != 0 and "no job with id 999999" in missing.stderr
