"""The Django integration in a real Django 6 project (tests/django_project), run by Python
3.12+ in its own venv (``make test`` makes ``.venv-django``), on both databases:
``manage.py migrate`` migrates sqljobs too, ``manage.py sqljobs worker`` runs the
project's ``django.tasks`` tasks, an enqueue inside ``transaction.atomic()`` commits or
rolls back with the model rows, and ``TaskResult`` status, return value, attempts and
errors come back from sqljobs (``shop/scenario.py`` prints them)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from sqljobs import App, JobFilter

from .conftest import ROOT, child_pythonpath

PROJECT = ROOT / "tests" / "django_project"
pytestmark = pytest.mark.processes


@pytest.fixture(scope="module")
def django_python() -> str:
    python = Path(os.environ.get("SQLJOBS_DJANGO_PYTHON", ROOT / ".venv-django" / "bin" / "python"))
    if not python.exists():
        why = f"{python} is missing: make test creates it with Python 3.12 or newer"
        if os.environ.get("CI") == "true":
            pytest.fail(why)
        pytest.skip(why)
    return str(python)


@pytest.fixture
def manage(url: str, django_python: str, tmp_path: Path) -> Iterator[_Manage]:
    runner = _Manage(django_python, url, tmp_path)
    yield runner
    runner.stop()


class _Manage:
    """``manage.py`` of the test project on the test's database."""

    def __init__(self, python: str, url: str, tmp_path: Path) -> None:
        self.python, self.tmp_path = python, tmp_path
        self.env = dict(os.environ, SQLJOBS_TEST_DB_URL=url, PYTHONPATH=child_pythonpath())
        self.workers: list[subprocess.Popen[bytes]] = []

    def run(self, *args: str) -> str:
        done = subprocess.run(
            [self.python, "manage.py", *args],
            cwd=PROJECT, env=self.env, capture_output=True, timeout=120, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr.decode(errors="replace")[-3000:]
        return done.stdout.decode()

    def start_worker(self) -> None:
        with (self.tmp_path / "worker.log").open("wb") as log:  # the child keeps its copy
            self.workers.append(
                subprocess.Popen(
                    [self.python, "manage.py", "sqljobs", "worker", "--concurrency", "4"],
                    cwd=PROJECT, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )  # fmt: skip

    def stop(self) -> None:
        for proc in self.workers:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=20)
        log = self.tmp_path / "worker.log"
        if log.exists():
            print(f"--- worker.log\n{log.read_text(errors='replace')[-3000:]}")


def test_django_tasks_run_on_sqljobs_and_commit_with_the_models_rows(
    url: str, manage: _Manage
) -> None:
    manage.run("migrate", "-v", "0")  # Django's tables, then sqljobs' (post_migrate)
    manage.start_worker()
    said = json.loads(manage.run("shell", "-c", "import shop.scenario").strip().splitlines()[-1])

    assert said["committed"] == ["SUCCESSFUL", {"order": 1, "cents": 400}, said["committed"][2]]
    assert said["same"] == {"order": 1, "cents": 400}  # get_result from any process
    assert said["orders"] == ["acme"]  # the rolled-back order is gone...
    app = App(url, migrate=False)  # ...and so is its job (SQLite may give its id again)
    charge = app.find_jobs(JobFilter(task="shop.tasks.charge")).jobs
    assert sorted(j.args for j in charge) == [[1], [1]]  # the committed one, and `later`
    assert said["later"] == "READY"  # run_after an hour from now: not run yet
    # a task taking Django's context failed once, then succeeded on its 2nd attempt
    assert said["retried"] == ["SUCCESSFUL", 2, 2, ["builtins.ValueError"]]
    assert said["loud"] == "HI"  # an async task
    assert said["failed"] == ["FAILED", "builtins.KeyError", True]
    # sqljobs names each job by the task's module path, in the task's queue and priority
    assert {(j.queue, j.priority) for j in charge} == {("billing", 10)}
    stats = json.loads(manage.run("sqljobs", "stats", "--json"))
    assert stats["counts"]["billing"]["done"] == 1 and stats["workers"] == 1


def test_the_jobs_url_follows_djangos_database_settings() -> None:
    from sqljobs import ConfigurationError
    from sqljobs.contrib.django import jobs_url

    sqlite = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": "/srv/app/db.sqlite3"}}
    assert jobs_url(sqlite, "default") == "sqlite:////srv/app/db.sqlite3"
    pg = {
        "main": {
            "ENGINE": "django.db.backends.postgresql", "NAME": "shop", "USER": "web",
            "PASSWORD": "p@ss:word", "HOST": "db.internal", "PORT": 5433,
        }
    }  # fmt: skip
    assert jobs_url(pg, "main") == "postgresql://web:p%40ss%3Aword@db.internal:5433/shop"
    with pytest.raises(ConfigurationError, match="'other', which DATABASES does not define"):
        jobs_url(sqlite, "other")
    mysql = {"default": {"ENGINE": "django.db.backends.mysql", "NAME": "x"}}
    with pytest.raises(ConfigurationError, match="PostgreSQL or SQLite"):
        jobs_url(mysql, "default")
