"""Recycling limits and hard time limits: what is refused, how a size is read, and how a
replacement is counted in ``/metrics``. The real processes are in
test_recycling_processes.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from prometheus_client.parser import text_string_to_metric_families

import sqljobs
from sqljobs.cli import cli
from sqljobs.dashboard.metrics import render
from sqljobs.jobs import ExpiredJob, JobState
from sqljobs.maintenance.reaper import hard_limit_decision, rescue_decision
from sqljobs.rollup import Meter
from sqljobs.validate import parse_size
from sqljobs.worker import WorkerConfig
from sqljobs.worker.link import ChildState
from sqljobs.worker.recycling import RecycleLimits, resident_bytes


@pytest.mark.parametrize(
    ("given", "size"),
    [(512, 512), ("512MB", 512_000_000), ("1.5GiB", 1_610_612_736), (" 64 kib ", 65_536)],
)
def test_sizes_are_read_as_bytes(given: object, size: int) -> None:
    assert parse_size(given, "x") == size
    assert WorkerConfig(max_memory_per_process=given).max_memory_per_process == size  # type: ignore[arg-type]


@pytest.mark.parametrize("given", ["512XB", "lots", "", 0, -1, "0MB", True, 1.5])
def test_a_bad_size_is_refused_naming_the_option(given: object) -> None:
    with pytest.raises(sqljobs.ConfigurationError, match="max_memory_per_process"):
        WorkerConfig(max_memory_per_process=given)  # type: ignore[arg-type]


@pytest.mark.parametrize("given", [0, -3, 2.5, "5"])
def test_a_bad_task_count_is_refused(given: object) -> None:
    with pytest.raises(sqljobs.ConfigurationError, match="max_tasks_per_process"):
        WorkerConfig(max_tasks_per_process=given)  # type: ignore[arg-type]


def test_the_cli_refuses_a_bad_size_before_starting(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    result = CliRunner().invoke(cli, ["--url", url, "worker", "--max-memory-per-process", "big"])
    assert result.exit_code == 2
    assert "--max-memory-per-process" in result.output and "512MB" in result.output


def test_the_cli_help_shows_the_limits() -> None:
    text = CliRunner().invoke(cli, ["worker", "--help"]).output
    assert "--max-tasks-per-process" in text and "--max-memory-per-process" in text


def test_limits_give_their_reason() -> None:
    assert RecycleLimits(5, None).reason(4) is None
    assert RecycleLimits(5, None).reason(5) == ("max_tasks", "recycled after 5 tasks")
    label, text = RecycleLimits(None, 1_000_000).reason(0) or ("", "")
    assert label == "max_memory" and text.endswith("over 1 MB") and text.startswith("recycled at ")
    assert RecycleLimits(None, 10 * resident_bytes()).reason(0) is None


def test_hard_timeout_must_be_longer_than_timeout(tmp_path: Path) -> None:
    app = sqljobs.App(f"sqlite:///{tmp_path / 'jobs.db'}")
    with pytest.raises(sqljobs.ConfigurationError, match="hard_timeout 30 s must be longer"):
        app.task(timeout=30, hard_timeout=30)(lambda: None)
    with pytest.raises(sqljobs.ConfigurationError, match="hard_timeout"):
        app.task(hard_timeout=-1)(lambda: None)
    task = app.task(timeout=1, hard_timeout=2, name="ok")(lambda: None)
    assert (task.timeout, task.hard_timeout) == (1, 2)


def expired(attempt: int, max_attempts: int, token: int = 7) -> ExpiredJob:
    return ExpiredJob(
        id=1, token=token, task="t", attempt=attempt, max_attempts=max_attempts, lease=30.0,
        started_at=100.0, lease_until=130.0, deadline_at=None, worker="w", worker_alive=False,
        errors=0, lease_expiries=0, crashes=0,
    )  # fmt: skip


def test_the_killed_job_is_charged_and_retried_or_dead() -> None:
    retry = sqljobs.Retry(max_attempts=3, base=1, cap=1, jitter=False)
    decide = hard_limit_decision(60, 7, retry, rescue_decision())
    again = decide(expired(1, 3), 200.0)
    assert again.state is JobState.PENDING and again.errors == 1 and not again.uncharge
    assert again.error == "exceeded its hard time limit of 60 s" and again.delay == 1
    dead = decide(expired(3, 3), 200.0)
    assert dead.state is JobState.DEAD
    assert dead.error == "exceeded its hard time limit of 60 s (attempt 3 of 3)"
    other_claim = decide(expired(1, 3, token=8), 200.0)  # a later claim: a plain crash
    assert other_claim.crashes == 1 and other_claim.error is not None
    assert "died during attempt" in other_claim.error


def test_the_supervisor_reads_its_childs_lines() -> None:
    child = ChildState("w", -1)
    child.feed(b"S 4 9 1.5 my task\nS 5 2 10", 100.0)
    child.feed(b".0 other\nR max_memory recycled at 612 MB, over 512 MB\n", 100.0)
    assert child.next_deadline() == 101.5
    overdue = child.overdue(101.5)
    assert overdue is not None and (overdue.job_id, overdue.token, overdue.task) == (
        4,
        9,
        "my task",
    )
    child.feed(b"E 4\n", 101.0)
    assert child.overdue(105.0) is None and child.next_deadline() == 110.0
    assert child.recycle == ("max_memory", "recycled at 612 MB, over 512 MB")


@pytest.mark.parametrize("url", ["sqlite", "postgres"], indirect=True)
def test_replacements_are_counted_in_metrics(app: sqljobs.App) -> None:
    app.task(name="noop")(lambda: None)
    meter = Meter()
    meter.replacement("max_memory", app.backend.now())
    meter.replacement("max_memory", app.backend.now())
    meter.replacement("hard_timeout", app.backend.now())
    meter.flush(app.backend)
    families = {f.name: f for f in text_string_to_metric_families(render(app).decode())}
    counts = {
        s.labels["reason"]: s.value
        for s in families["sqljobs_worker_process_replacements"].samples
        if s.name.endswith("_total")
    }
    assert counts == {"max_tasks": 0, "max_memory": 2, "hard_timeout": 1}


def test_replacements_show_in_the_workers_views(app: sqljobs.App) -> None:
    from starlette.testclient import TestClient

    from sqljobs.dashboard import create_app

    app.task(name="noop")(lambda: None)
    runner = CliRunner()
    quiet = runner.invoke(cli, ["--url", app.url, "workers"])
    assert quiet.exit_code == 0 and "replaced" not in quiet.output
    meter = Meter()
    meter.replacement("max_tasks", app.backend.now())
    meter.flush(app.backend)
    shown = runner.invoke(cli, ["--url", app.url, "workers"])
    assert "worker processes replaced: 1 after --max-tasks-per-process" in shown.output
    with TestClient(create_app(app), base_url="http://127.0.0.1") as client:
        page = client.get("/workers").text
    assert "worker processes replaced: 1 after --max-tasks-per-process, 0 over" in page


def test_a_periodic_task_takes_a_hard_timeout(tmp_path: Path) -> None:
    app = sqljobs.App(f"sqlite:///{tmp_path / 'jobs.db'}")
    task = app.periodic(every=60, timeout=5, hard_timeout=10)(lambda: None)
    assert (task.timeout, task.hard_timeout) == (5, 10)
    with pytest.raises(sqljobs.ConfigurationError, match="must be longer than timeout"):
        app.periodic(every=60, name="other", timeout=5, hard_timeout=5)(lambda: None)
