"""The command line, as SPEC.md writes it."""

from __future__ import annotations

import json
import subprocess
import sys

from sqljobs import App, JobState

from .conftest import ROOT, db_execute, is_pg


def sqljobs_cli(url: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sqljobs", "--url", url, *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=check,
        timeout=60,
    )


def test_migrate_enqueue_stats_and_jobs_commands(url: str) -> None:
    first_run = sqljobs_cli(url, "migrate").stdout
    assert "applied: 0001_initial" in first_run or is_pg(url)  # PG tests start migrated
    assert "up to date" in sqljobs_cli(url, "migrate").stdout
    out = sqljobs_cli(
        url,
        "enqueue",
        "send_report",
        "--args",
        '["acme"]',
        "--kwargs",
        '{"day": "2026-12-01"}',
        "--key",
        "report:acme",
    ).stdout
    first = json.loads(out)
    again = json.loads(sqljobs_cli(url, "enqueue", "send_report", "--key", "report:acme").stdout)
    assert first["created"] and not again["created"] and first["id"] == again["id"]
    sqljobs_cli(url, "enqueue", "other", "--delay", "3600")

    stats = json.loads(sqljobs_cli(url, "stats", "--json").stdout)
    assert stats["counts"]["default"]["pending"] == 2
    assert stats["oldest_pending_age"] is not None
    assert "oldest pending job" in sqljobs_cli(url, "stats").stdout

    listed = json.loads(sqljobs_cli(url, "jobs", "list", "--state", "pending", "--json").stdout)
    assert {j["task"] for j in listed} == {"send_report", "other"}
    shown = json.loads(sqljobs_cli(url, "jobs", "show", str(first["id"])).stdout)
    assert shown["args"] == ["acme"] and shown["kwargs"] == {"day": "2026-12-01"}

    assert "cancelled" in sqljobs_cli(url, "jobs", "cancel", str(first["id"])).stdout
    assert "pending again" in sqljobs_cli(url, "jobs", "retry", str(first["id"])).stdout
    job = App(url).get_job(first["id"])
    assert job is not None and job.state is JobState.PENDING


def test_cli_errors_are_clear(url: str) -> None:
    bad = sqljobs_cli(url, "jobs", "show", "999", check=False)
    assert bad.returncode != 0 and "no job with id 999" in bad.stderr
    bad = sqljobs_cli(url, "enqueue", "t", "--args", "{oops", check=False)
    assert bad.returncode != 0 and "not valid JSON" in bad.stderr
    bad = sqljobs_cli("mysql://x/y", "stats", check=False)
    assert bad.returncode != 0 and "unsupported database URL scheme" in bad.stderr
    bad = sqljobs_cli(url, "jobs", "retry", check=False)
    assert bad.returncode != 0 and "--dead" in bad.stderr


def test_retry_all_dead(url: str) -> None:
    app = App(url)
    ids = [app.enqueue("t").id for _ in range(3)]
    db_execute(app, "UPDATE sqljobs_jobs SET state = 'dead'")
    assert "3 dead jobs" in sqljobs_cli(url, "jobs", "retry", "--dead").stdout
    assert all(app.get_job(i).state is JobState.PENDING for i in ids)  # type: ignore[union-attr]
