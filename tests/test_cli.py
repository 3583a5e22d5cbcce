"""The command line, as SPEC.md writes it, read by a person at an 80-column terminal."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from importlib import metadata
from pathlib import Path

import click
import pytest

from sqljobs import App, JobState

from .conftest import ROOT, db_execute, is_pg, wait_until

pytestmark = pytest.mark.processes  # every test runs `python -m sqljobs` as a user does

RAW_TIME = re.compile(r"\b1\d{9}(\.\d+)?\b")  # a Unix timestamp, as a person should not see


def run_cli(
    *args: str,
    url: str | None = None,
    check: bool = True,
    cwd: Path = ROOT,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """``python -m sqljobs [--url URL] ARGS`` in a subprocess, as a user runs it."""
    return subprocess.run(
        [sys.executable, "-m", "sqljobs", *(["--url", url] if url else []), *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        check=check,
        timeout=60,
        env={**os.environ, "COLUMNS": "80", **(env or {})},
    )


def sqljobs_cli(url: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return run_cli(*args, url=url, check=check)


def assert_fits(out: str, width: int = 80) -> None:
    long = [line for line in out.splitlines() if len(line) > width]
    assert not long, f"lines wider than {width}:\n" + "\n".join(long)


@pytest.mark.slow
def test_migrate_enqueue_stats_and_jobs_commands(url: str) -> None:
    first_run = sqljobs_cli(url, "migrate").stdout
    assert "applied: 0001_initial" in first_run or is_pg(url)  # PG tests start migrated
    assert "up to date" in sqljobs_cli(url, "migrate").stdout
    out = sqljobs_cli(
        url,
        "enqueue",
        "send_report",
        "--remote",
        "--args",
        '["acme"]',
        "--kwargs",
        '{"day": "2026-12-01"}',
        "--key",
        "report:acme",
    ).stdout
    first = json.loads(out)
    again = sqljobs_cli(url, "enqueue", "send_report", "--remote", "--key", "report:acme")
    assert first["created"] and not json.loads(again.stdout)["created"]
    assert first["id"] == json.loads(again.stdout)["id"]
    sqljobs_cli(url, "enqueue", "other", "--remote", "--delay", "3600")

    stats = json.loads(sqljobs_cli(url, "stats", "--json").stdout)
    assert stats["counts"]["default"]["pending"] == 2
    assert stats["oldest_pending_age"] is not None
    assert "oldest pending job" in sqljobs_cli(url, "stats").stdout

    listed = json.loads(sqljobs_cli(url, "jobs", "list", "--state", "pending", "--json").stdout)
    assert {j["task"] for j in listed} == {"send_report", "other"}
    shown = json.loads(sqljobs_cli(url, "jobs", "show", str(first["id"]), "--json").stdout)
    assert shown["args"] == ["acme"] and shown["kwargs"] == {"day": "2026-12-01"}
    assert isinstance(shown["created_at"], float)  # raw numbers are for scripts

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
    ids = [app.enqueue("t", known=False).id for _ in range(3)]
    db_execute(app, "UPDATE sqljobs_jobs SET state = 'dead'")
    assert "3 dead jobs" in sqljobs_cli(url, "jobs", "retry", "--dead").stdout
    assert all(app.get_job(i).state is JobState.PENDING for i in ids)  # type: ignore[union-attr]


# -- no database given -------------------------------------------------------------------


def test_no_database_given_is_refused_and_creates_nothing(tmp_path: Path) -> None:
    """Not a new ./sqljobs.db wherever the command happened to run."""
    env = {k: v for k, v in os.environ.items() if k not in ("SQLJOBS_URL", "SQLJOBS_APP")}
    for command in (["migrate"], ["stats"], ["jobs", "list"], ["enqueue", "t"], ["worker"]):
        out = subprocess.run(
            [sys.executable, "-m", "sqljobs", *command],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            env=env,
            timeout=60,
        )
        assert out.returncode != 0, command
        assert "no database given" in out.stderr, out.stderr
        for way in ("--url", "--app", "SQLJOBS_URL", "sqlite:///sqljobs.db"):
            assert way in out.stderr
        assert "Traceback" not in out.stderr
        assert list(tmp_path.iterdir()) == [], command
    lab = subprocess.run(
        [sys.executable, "-m", "sqljobs", "lab", "E42"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=60,
    )  # the lab makes its own scratch databases: it gets past the check to its own error
    assert lab.returncode == 2 and "E42" in lab.stderr and "no database" not in lab.stderr


def test_a_global_option_after_the_command_says_where_it_belongs(tmp_path: Path) -> None:
    """``sqljobs worker --app x`` (the option belongs before the command): said so, with
    the command's usage, not click's bare "No such option"; nothing is created."""
    for command, option, name in (
        (["worker", "--app", "tasks:app"], "--app", "worker"),
        (["stats", "--url", "sqlite:///jobs.db"], "--url", "stats"),
        (["jobs", "list", "--app", "tasks:app"], "--app", "jobs list"),
    ):
        out = run_cli(*command, check=False, cwd=tmp_path)
        assert out.returncode == 2, out.stderr
        said = f"{option} is an option of sqljobs itself, not of {name!r}"
        assert said in out.stderr and "give it before the command" in out.stderr
        assert f"sqljobs {option} ... {name} ...)" in out.stderr
        assert f"sqljobs {name} [OPTIONS]" in out.stderr  # the command's usage
        assert "Traceback" not in out.stderr
    for other in (["stats", "--bogus"], ["worker", "--version"]):  # not ours to place
        out = run_cli(*other, check=False, cwd=tmp_path)
        assert out.returncode == 2 and f"No such option '{other[1]}'" in out.stderr
    assert list(tmp_path.iterdir()) == []


# -- options and help --------------------------------------------------------------------


def _options(command: click.Command, path: str = "") -> list[tuple[str, click.Option]]:
    out = [(f"{path} {command.name}", p) for p in command.params if isinstance(p, click.Option)]
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            out += _options(sub, f"{path} {command.name}")
    return out


def test_every_option_says_what_it_does_and_the_version_is_printed() -> None:
    from sqljobs.cli import cli

    missing = [f"{where} {opt.opts[0]}" for where, opt in _options(cli) if not opt.help]
    assert not missing, f"options without help: {missing}"
    assert cli.context_settings.get("show_default") is True  # inherited by every command

    version = run_cli("--version").stdout.strip()
    assert version == f"sqljobs {metadata.version('sqljobs')}"
    worker = " ".join(run_cli("worker", "--help").stdout.split())
    assert "[default: 8; x>=1]" in worker and "[default: 1; x>=1]" in worker
    assert "half the shortest task lease, at most 10 s" in worker  # WorkerConfig's rule
    assert "--log-format [text|json]" in worker
    enqueue = " ".join(run_cli("enqueue", "--help").stdout.split())
    assert "[default: (the task's queue, else the app's default queue)]" in enqueue
    assert "[default: (the task's priority, else 0)]" in enqueue
    assert "skip the check that this app knows it" in enqueue
    top = " ".join(run_cli("--help").stdout.split())
    assert "--log-format [text|json]" in top and "[default: text]" in top and "--version" in top


def test_counts_and_durations_are_checked(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    for args, text in (
        (["worker", "--concurrency", "0"], "--concurrency"),
        (["worker", "--processes", "0"], "--processes"),
        (["worker", "--drain-timeout", "-1"], "--drain-timeout"),
        (["worker", "--poll-interval", "0"], "--poll-interval"),
        (["enqueue", "t", "--delay", "nan"], "not a finite number of seconds"),
        (["enqueue", "t", "--delay", "inf"], "not a finite number of seconds"),
        (["enqueue", "t", "--delay", "-5"], "--delay"),
        (["jobs", "list", "--limit", "0"], "--limit"),
    ):
        out = run_cli(*args, url=url, check=False)
        assert out.returncode == 2 and text in out.stderr, (args, out.stderr)
    assert not (tmp_path / "jobs.db").exists()  # refused before touching the database


# -- what a person reads -----------------------------------------------------------------

LONG_TASK = "reports.monthly.send_invoice_summary"


def _job_with_history(url: str) -> int:
    """A dead job whose history holds every kind of entry, and one nobody planned for."""
    app = App(url)
    job_id = app.enqueue(LONG_TASK, ["acme", {"month": "2026-11"}], {"fmt": "pdf"},
                         known=False).id  # fmt: skip
    now = time.time()
    history = [
        {"attempt": 1, "outcome": "failed", "started_at": now - 100, "ended_at": now - 98.5,
         "error": "ValueError: no invoices\nfor acme", "worker": "web-1:1234:ab", "retry_in": 2.0},
        {"attempt": 2, "outcome": "lease_expired", "started_at": now - 90, "ended_at": now - 60,
         "error": "lease of 30 s expired on attempt 2", "worker": "web-2:99:cd"},
        {"outcome": "retried", "from": "dead", "started_at": now - 10, "ended_at": now - 10},
        {"attempt": 3, "outcome": "teleported", "flux": {"capacitor": 1}},
        "a string, not an entry",
    ]  # fmt: skip
    db_execute(
        app,
        "UPDATE sqljobs_jobs SET state = 'dead', attempts = 3, errors = 1, lease_expiries = 1, "
        "last_error = 'ValueError: no invoices', history = ?, "
        "last_traceback = 'Traceback (most recent call last):\n  File \"t.py\"\nValueError: no'",
        "UPDATE sqljobs_jobs SET state = 'dead', attempts = 3, errors = 1, lease_expiries = 1, "
        "last_error = 'ValueError: no invoices', history = ?::jsonb, "
        "last_traceback = 'Traceback (most recent call last):\n  File \"t.py\"\nValueError: no'",
        (json.dumps(history),),
    )
    return job_id


def test_jobs_show_lays_a_job_out_for_a_person(url: str) -> None:
    job_id = _job_with_history(url)
    out = run_cli("jobs", "show", str(job_id), url=url, env={"TZ": "Europe/Berlin"}).stdout
    assert_fits(out)
    assert not RAW_TIME.search(out), out
    fields = dict(re.findall(r"^(\w[\w ]*?)  +(.+)$", out.split("attempt history")[0], re.M))
    assert fields["task"] == LONG_TASK and fields["state"] == "dead"
    assert fields["attempts"].startswith("3/") and "lease expiries 1" in fields["attempts"]
    assert re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d CES?T \(.* ago\)$", fields["created"])
    assert (
        fields["args"] == '["acme", {"month": "2026-11"}]' and fields["kwargs"] == '{"fmt": "pdf"}'
    )
    history = out.split("attempt history")[1].split("last traceback")[0]
    for text in ("failed", "lease_expired", "retried", "teleported", "1.5 s", "30.0 s",
                 "a string, not"):  # fmt: skip
        assert text in history, text
    assert "from=dead" in history or "not shown at this width: " in history
    assert out.rstrip().endswith("ValueError: no")  # the last traceback closes the page

    wide = run_cli("jobs", "show", str(job_id), url=url, env={"COLUMNS": "200"}).stdout
    assert "web-1:1234:ab" in wide and "from=dead" in wide and "retry in 2.0 s" in wide
    assert "ValueError: no invoices for acme; retry in 2.0 s" in wide  # two lines made one

    raw = json.loads(run_cli("jobs", "show", str(job_id), "--json", url=url).stdout)
    assert raw["history"][0]["started_at"] < raw["history"][0]["ended_at"]


def test_tables_fit_80_columns_and_keep_names_whole(url: str) -> None:
    _job_with_history(url)
    app = App(url)
    app.enqueue("send_report", ["acme"], {"day": "2026-12-01"}, known=False)
    app.schedule("daily-report:acme", cron="0 3 * * *", tz="Europe/Berlin", task="send_report",
                 known=False)  # fmt: skip
    app.schedule("refresh", every=0.2, task="refresh_cache", known=False)

    listed = run_cli("jobs", "list", url=url).stdout
    assert_fits(listed)
    assert LONG_TASK in listed and "send_report" in listed
    assert '"acme", day="2026-12-01"' in listed  # the arguments, previewed
    assert not RAW_TIME.search(listed)
    app.pause_queue("default")
    for command in (["stats"], ["schedules"], ["jobs", "list", "--state", "dead"], ["queues"]):
        out = run_cli(*command, url=url).stdout
        assert_fits(out)
        assert not RAW_TIME.search(out), out
    narrow = run_cli("jobs", "list", url=url, env={"COLUMNS": "60"}).stdout
    assert_fits(narrow, 60)
    assert LONG_TASK in narrow and "not shown at this width" in narrow


def test_schedules_show_local_times_and_their_own_zone(url: str) -> None:
    app = App(url)
    app.schedule("daily-report:acme", cron="0 3 * * *", tz="Europe/Berlin", task="send_report",
                 known=False)  # fmt: skip
    app.schedule("refresh", every=0.2, task="refresh_cache", known=False)
    app.pause_schedule("refresh")
    out = run_cli("schedules", url=url, env={"TZ": "Asia/Tokyo"}).stdout
    assert_fits(out)
    berlin = next(line for line in out.splitlines() if line.startswith("daily-report:acme"))
    assert re.search(r"0 3 \* \* \*\s+Europe/Berlin\s+\d{4}-\d\d-\d\d (10|11):00:00 JST", berlin)
    refresh = next(line for line in out.splitlines() if line.startswith("refresh"))
    assert "every 0.2 s" in refresh and "paused" in refresh
    assert "CET" not in out and "UTC" not in out  # one zone for every time shown


# -- messages ----------------------------------------------------------------------------


def test_cancel_and_retry_say_what_is_allowed(url: str) -> None:
    app = App(url)
    job = app.enqueue("t", known=False).id
    assert run_cli("jobs", "retry", str(job), url=url, check=False).stderr.endswith(
        f"job {job} is pending; only dead or cancelled jobs can be retried\n"
    )
    assert run_cli("jobs", "cancel", str(job), url=url).stdout == f"job {job} cancelled\n"
    again = run_cli("jobs", "cancel", str(job), url=url)  # idempotent: exit 0
    assert again.stdout == f"job {job} was already cancelled\n"
    db_execute(app, "UPDATE sqljobs_jobs SET state = 'done' WHERE id = ?", params=(job,))
    done = run_cli("jobs", "cancel", str(job), url=url, check=False)
    assert done.returncode == 1
    assert (
        f"job {job} is done; only pending, waiting or running jobs can be cancelled" in done.stderr
    )
    done = run_cli("jobs", "retry", str(job), url=url, check=False)
    assert done.returncode == 1
    assert f"job {job} is done; only dead or cancelled jobs can be retried" in done.stderr


def test_enqueue_refuses_an_unknown_task_unless_remote(url: str) -> None:
    bad = run_cli("enqueue", "sned_report", url=url, check=False)
    assert bad.returncode != 0 and "unknown task 'sned_report'" in bad.stderr
    made = json.loads(run_cli("enqueue", "sned_report", "--remote", url=url).stdout)
    job = App(url).get_job(made["id"])
    assert job is not None and job.task == "sned_report"


# -- the worker's log --------------------------------------------------------------------

WORKER_APP = """
import sqljobs

app = sqljobs.App(default_lease=5.0)


@app.task(retry=sqljobs.Retry(max_attempts=2, base=0.01))
def boom(label: str) -> None:
    raise ValueError(f"boom {label}")
"""


@pytest.mark.parametrize("log_format", ["text", "json"])
def test_worker_logs_its_banner_failures_and_summary(
    url: str, tmp_path: Path, log_format: str
) -> None:
    """Without -v; ``worker --log-format`` wins over the global one; Ctrl-C exits 0."""
    (tmp_path / "wapp.py").write_text(textwrap.dedent(WORKER_APP))
    env = {**os.environ, "SQLJOBS_URL": url, "SQLJOBS_APP": "wapp:app", "COLUMNS": "80"}
    base = [sys.executable, "-m", "sqljobs"]
    made = subprocess.run([*base, "enqueue", "boom", "--args", '["x"]'], cwd=tmp_path, env=env,
                          capture_output=True, text=True, check=True, timeout=60)  # fmt: skip
    job_id = json.loads(made.stdout)["id"]
    other = "json" if log_format == "text" else "text"
    proc = subprocess.Popen(
        [*base, "--log-format", other, "worker", "--log-format", log_format],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        app = App(url)
        wait_until(lambda: app.get_job(job_id).state is JobState.DEAD, timeout=30)  # type: ignore[union-attr]
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0 and stdout == "", (stdout, stderr)
    lines = stderr.splitlines()
    if log_format == "json":
        records = [json.loads(line) for line in lines]
        messages = [r["message"] for r in records]
        failed = next(r for r in records if r["level"] == "WARNING")
        assert failed["job_id"] == job_id and failed["task"] == "boom"
        assert failed["attempt"] == 1 and failed["logger"] == "sqljobs.worker"
        assert re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}\+00:00$", failed["time"])
    else:
        pattern = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (INFO|WARNING|ERROR) sqljobs\.\w+: "
        starts = [line for line in lines if re.match(pattern, line)]
        assert starts and starts[0] == lines[0]
        messages = [re.sub(pattern, "", line) for line in starts]
    assert "started on" in messages[0]  # the banner
    assert any(f"job {job_id} (boom) attempt 1/2 failed" in m for m in messages)
    assert any("stopped" in m for m in messages[-2:])  # the stop summary
