"""Operations under ``--processes``: worker processes recycled past a job count or a
memory size, and handlers killed (with their process) past their hard time limit."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from sqljobs import App, JobState, Retry
from sqljobs.rollup import Series

from .conftest import Runs, wait_until

Spawn = Callable[..., subprocess.Popen[bytes]]
OPERATIONS = "tests.apps.operations:app"


def replacements(app: App, reason: str) -> float:
    return sum(
        a.amount
        for a in app.metric_totals()
        if a.series == Series.REPLACEMENTS and a.outcome == reason
    )


def supervisor_log(tmp_path: Path) -> str:
    return (tmp_path / "worker-0.log").read_text(errors="replace")


def finished_once(app: App, ids: list[int], runs: Runs, labels: list[str]) -> None:
    """Every job done on its first attempt, and each handler ran exactly once."""
    for job_id in ids:
        job = app.get_job(job_id)
        assert job is not None and job.state is JobState.DONE and job.attempts == 1, job
    starts, ends = runs.count("start"), runs.count("end")
    assert all(starts[label] == 1 and ends[label] == 1 for label in labels), (starts, ends)


def test_processes_are_recycled_after_max_tasks(
    app: App, spawn: Spawn, runs: Runs, tmp_path: Path
) -> None:
    labels = [f"t{i}" for i in range(30)]
    ids = [app.enqueue("quick", args=[label], known=False).id for label in labels]
    proc = spawn(
        "--processes", "2", "--concurrency", "2", "--max-tasks-per-process", "5",
        lease=30.0, app=OPERATIONS,
    )  # fmt: skip
    wait_until(lambda: app.stats().total("done") == 30, timeout=60, what="30 jobs done")
    wait_until(lambda: replacements(app, "max_tasks") >= 5, timeout=30, what="5 recycles")
    finished_once(app, ids, runs, labels)
    pids = {pid for _, pid, _ in runs.lines()}
    assert len(pids) >= 6, "each process ran at most about 5 jobs"
    assert supervisor_log(tmp_path).count("tasks; starting a new one") >= 5
    assert "recycled after 5 tasks" in supervisor_log(tmp_path)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=15) == 0


def test_a_leaking_process_is_recycled_past_max_memory(
    app: App, spawn: Spawn, runs: Runs, tmp_path: Path
) -> None:
    labels = [f"leak{i}" for i in range(12)]
    ids = [app.enqueue("leak", args=[label, 40], known=False).id for label in labels]
    proc = spawn(
        "--processes", "2", "--concurrency", "1", "--max-memory-per-process", "150MB",
        lease=30.0, app=OPERATIONS,
    )  # fmt: skip
    wait_until(lambda: app.stats().total("done") == 12, timeout=60, what="12 jobs done")
    wait_until(lambda: replacements(app, "max_memory") >= 2, timeout=30, what="2 recycles")
    finished_once(app, ids, runs, labels)
    text = supervisor_log(tmp_path)
    assert "over 150 MB; starting a new one" in text and "recycled at " in text
    assert replacements(app, "max_tasks") == 0
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=15) == 0


@pytest.fixture
def one_attempt_app(url: str) -> Iterator[App]:
    """Enqueues by name with the stuck task's retry policy (one attempt)."""
    application = App(url, default_retry=Retry(max_attempts=1))
    yield application
    application.close()


def test_a_handler_past_its_hard_time_limit_has_its_process_killed(
    one_attempt_app: App, spawn: Spawn, runs: Runs, tmp_path: Path
) -> None:
    app = one_attempt_app
    proc = spawn("--processes", "2", "--concurrency", "2", lease=30.0, app=OPERATIONS)
    stuck = app.enqueue("stuck", args=["stuck"], known=False).id
    wait_until(lambda: runs.count("start")["stuck"] == 1, what="the stuck handler started")
    companion = app.enqueue("quick", args=["companion", 0.2], known=False).id
    wait_until(lambda: app.get_job(stuck).state is JobState.DEAD, timeout=15)  # type: ignore[union-attr]
    job = app.get_job(stuck)
    assert job is not None and job.attempts == 1 and job.crashes == 0
    assert job.last_error is not None
    assert job.last_error.startswith("exceeded its hard time limit of 1 s")
    assert job.history[-1]["outcome"] == "hard_timeout"
    wait_until(lambda: app.get_job(companion).state is JobState.DONE, timeout=15)  # type: ignore[union-attr]
    assert runs.count("end")["companion"] == 1 and runs.count("end")["stuck"] == 0
    wait_until(lambda: replacements(app, "hard_timeout") == 1, what="the kill counted")
    # the replacement works: a job enqueued after the kill runs
    after = app.enqueue("quick", args=["after"], known=False).id
    wait_until(lambda: app.get_job(after).state is JobState.DONE, timeout=15)  # type: ignore[union-attr]
    assert "exceeded its hard time limit of 1 s; killing worker process" in supervisor_log(tmp_path)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=15) == 0


def test_past_its_timeout_a_hard_limited_handler_keeps_its_job_until_it_ends(
    one_attempt_app: App, spawn: Spawn, runs: Runs, tmp_path: Path
) -> None:
    """Asked to stop at its timeout, it is not given up at once: no retry could run
    beside it. It returns before its hard limit: a timed-out attempt, no kill."""
    app = one_attempt_app
    proc = spawn("--processes", "2", "--concurrency", "2", lease=30.0, app=OPERATIONS)
    late = app.enqueue("late", args=["late", 3.0], known=False).id
    asked = "past its timeout of 0.3 s; asked to stop"
    wait_until(lambda: asked in supervisor_log(tmp_path), what="the handler asked to stop")
    assert runs.count("end")["late"] == 0, "the handler runs 3 s, the ask came at 0.3 s"
    assert app.get_job(late).state is JobState.RUNNING  # type: ignore[union-attr]
    wait_until(lambda: app.get_job(late).state is JobState.DEAD)  # type: ignore[union-attr]
    job = app.get_job(late)
    assert job is not None and job.last_error is not None
    assert "timed out after 0.3 s" in job.last_error and job.history[-1]["outcome"] == "timed_out"
    assert replacements(app, "hard_timeout") == 0
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=15) == 0


@pytest.mark.parametrize("url", ["sqlite"], indirect=True)
def test_one_process_says_recycling_and_hard_limits_need_processes(
    app: App, spawn: Spawn, runs: Runs, tmp_path: Path
) -> None:
    proc = spawn("--max-tasks-per-process", "5", app=OPERATIONS)
    app.enqueue("quick", args=["one"], known=False)
    wait_until(lambda: runs.count("end")["one"] == 1)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=15) == 0
    text = supervisor_log(tmp_path)
    assert text.count("need --processes 2 or more") == 1
    assert "hard_timeout needs --processes 2 or more" in text and "stuck" in text
