"""What SECURITY.md promises, checked: no code runs from a payload (no pickle, marshal,
eval or exec anywhere in sqljobs; payloads are JSON; a task name resolves only to a task
the worker registered), and a database password never shows: not in log lines, error
messages, tracebacks, the CLI's output, stats, the dashboard or /metrics."""

from __future__ import annotations

import ast
import json
import logging
import os
import subprocess
import sys
import traceback
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from starlette.testclient import TestClient

import sqljobs
from sqljobs import App, BackendError, ConfigurationError, JobState, PayloadError, UnknownTask
from sqljobs.cli import cli
from sqljobs.dashboard import create_app
from sqljobs.humanize import redact_url, scrub_secrets
from sqljobs.testing import stepped_worker

from .conftest import (
    ROOT,
    child_pythonpath,
    db_execute,
    fresh_pg_database,
)

SRC = Path(sqljobs.__file__).parent
SECRET = "s3cret-Pa55word"

# -- no code from a payload ------------------------------------------------------------

FORBIDDEN_MODULES = {
    *("pickle", "cPickle", "_pickle", "marshal", "shelve", "dill", "cloudpickle"),
    *("jsonpickle", "yaml", "copyreg"),
}
FORBIDDEN_CALLS = {"eval", "exec", "__import__", "resolve_name", "locate"}
"""Builtins that run text as code, and the helpers that turn a dotted name into an object
(``pkgutil.resolve_name``, ``pydoc.locate``); ``compile`` is caught as a bare name."""
IMPORTS_BY_NAME = {
    # module names an operator gives (--app, SQLJOBS_APP, Django settings), never a payload
    "cli/options.py",  # load_app
    "cli/group.py",  # a deferred command, from a fixed table
    "contrib/django/__init__.py",
    "testing/plugin.py",
    "lab/runner.py",  # its own experiments, from a fixed table
}


def _sources() -> Iterator[tuple[str, ast.Module]]:
    for path in sorted(SRC.rglob("*.py")):
        yield path.relative_to(SRC).as_posix(), ast.parse(path.read_text(), str(path))


def test_no_module_of_sqljobs_unpickles_evaluates_or_imports_by_a_stored_name() -> None:
    found = []
    for where, tree in _sources():
        for node in ast.walk(tree):
            line = getattr(node, "lineno", 0)
            if isinstance(node, ast.Import):
                names = {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom):
                names = {(node.module or "").split(".")[0]}
            else:
                names = set()
            found += [f"{where}:{line} imports {n}" for n in names & FORBIDDEN_MODULES]
            if isinstance(node, ast.Call):
                func = node.func
                bare = isinstance(func, ast.Name)
                name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
                if name in FORBIDDEN_CALLS or (bare and name == "compile"):
                    found.append(f"{where}:{line} calls {name}")
                if name == "import_module" and where not in IMPORTS_BY_NAME:
                    found.append(f"{where}:{line} imports a module by name")
    assert not found, found
    assert sum(1 for _ in _sources()) > 100, "the scan saw the package"


def test_a_payload_is_json_and_anything_else_is_refused_at_enqueue(app: App) -> None:
    @app.task(name="echo")
    def echo(value: object) -> None:
        pass

    for value, what in ((object(), "object"), (b"raw", "bytes"), ({1, 2}, "set")):
        with pytest.raises(PayloadError, match=r"argument 'value'|value") as refused:
            echo.enqueue(value)
        assert what in str(refused.value) or "JSON" in str(refused.value)
    handle = echo.enqueue({"nested": [1, "two", None]})
    [(stored,)] = db_execute(
        app, "SELECT payload FROM sqljobs_jobs WHERE id = ?", None, (handle.id,)
    )
    assert json.loads(stored) == {
        "args": [{"nested": [1, "two", None]}],
        "kwargs": {},
    }


def test_a_stored_task_name_runs_only_a_registered_task(app: App, tmp_path: Path) -> None:
    """Whoever can write the jobs table picks the task and its arguments: the name is
    looked up among the worker's registered tasks, never imported."""
    marker = tmp_path / "ran"

    @app.task(name="ok")
    def ok() -> str:
        return "fine"

    with pytest.raises(UnknownTask):
        app.enqueue("os.system", args=[f"touch {marker}"])
    forged = [
        app.enqueue(name, args=[f"touch {marker}"], known=False).id
        for name in ("os.system", "os:system", "subprocess.getoutput", "builtins.eval")
    ]
    handle = ok.enqueue()
    with stepped_worker(app, concurrency=2) as worker:
        assert worker.result(handle) == "fine"
    for job_id in forged:
        job = app.get_job(job_id)
        assert job is not None and job.state is JobState.PENDING and job.attempts == 0
        reason = app.waiting_reason(job)
        assert reason is not None and "no live worker has registered task" in reason
    assert not marker.exists()


# -- database passwords never show -------------------------------------------------------


def test_redact_url_hides_every_password_a_url_can_carry() -> None:
    cases = {
        "postgresql://app:s3cret@db/jobs": "postgresql://app:***@db/jobs",
        "postgresql+psycopg://app:s3cret@db:5432/jobs": "postgresql+psycopg://app:***@db:5432/jobs",
        "postgresql://app:pa/ss@db/jobs": "postgresql://app:***@db/jobs",
        "postgresql://app:p@ss@db/jobs": "postgresql://app:***@db/jobs",
        "postgresql://app@db/jobs?password=s3cret&sslmode=require": (
            "postgresql://app@db/jobs?password=***&sslmode=require"
        ),
        "postgresql://app@db/jobs?sslmode=require&sslpassword=s3cret": (
            "postgresql://app@db/jobs?sslmode=require&sslpassword=***"
        ),
        "postgresql://app@db/jobs": "postgresql://app@db/jobs",
        "sqlite:////var/lib/jobs.db": "sqlite:////var/lib/jobs.db",
    }
    for url, shown in cases.items():
        assert redact_url(url) == shown, url
    assert scrub_secrets("x p%40ss y p@ss", "postgresql://a:p%40ss@h/d") == "x *** y ***"


@pytest.mark.parametrize(
    "url",
    [
        f"mysql://app:{SECRET}@db/jobs",
        f"postgresql://app:{SECRET}@/",
        f"postgresql://app:{SECRET}@db/jobs?bogus=1",  # an option neither sqljobs nor libpq knows
        f"host=db user=app password={SECRET}",
    ],
)
def test_a_bad_url_is_named_without_its_password(url: str) -> None:
    with pytest.raises(ConfigurationError) as refused:
        App(url)
    assert SECRET not in str(refused.value) and "***" in str(refused.value)


@pytest.mark.parametrize(
    "url",
    [
        f"postgresql://postgres:{SECRET}@127.0.0.1:1/test",  # nobody listens there
        f"postgresql://postgres:{SECRET}@127.0.0.1:5432/test?sslmode=bogus",  # libpq refuses it
        f"postgresql://postgres@127.0.0.1:1/test?password={SECRET}",
    ],
)
def test_a_failed_connection_says_why_without_the_password(
    url: str, caplog: pytest.LogCaptureFixture
) -> None:
    app = App(url, backend_options={"connect_timeout": 2})
    with caplog.at_level(logging.DEBUG), pytest.raises(BackendError) as failed:
        app.stats()
    told = "".join(traceback.format_exception(failed.value))  # the causes too
    assert "cannot connect to PostgreSQL at" in told and SECRET not in told
    assert SECRET not in caplog.text and SECRET not in repr(app)


def test_the_driver_name_of_an_sqlalchemy_url_is_dropped_not_quoted(pg_template: str) -> None:
    """libpq refuses ``postgresql+psycopg://`` quoting the whole URL, password and all."""
    with fresh_pg_database(pg_template) as plain:
        url = _with_password(plain).replace("postgresql://", "postgresql+psycopg://", 1)
        app = App(url)
        assert app.stats().counts == {}  # it connects
        app.close()
    app = App(url + "?sslmode=bogus", backend_options={"connect_timeout": 2})  # libpq refuses it
    with pytest.raises(BackendError) as failed:
        app.stats()
    assert SECRET not in "".join(traceback.format_exception(failed.value))


def _with_password(url: str) -> str:
    """``url`` (whose server trusts the user) with a password the server ignores."""
    scheme, rest = url.split("://", 1)
    user, host = rest.split("@", 1)
    return f"{scheme}://{user.split(':')[0]}:{SECRET}@{host}"


@pytest.fixture
def secret_url(pg_template: str) -> Iterator[str]:
    with fresh_pg_database(pg_template) as url:
        yield _with_password(url)


def _fail() -> None:
    raise RuntimeError("boom")


def test_a_worker_run_logs_nothing_of_the_password(
    secret_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    app = App(secret_url)
    app.task(name="fine")(lambda: 1)
    app.task(name="fails", retry=sqljobs.Retry(max_attempts=1))(_fail)
    caplog.set_level(logging.DEBUG)
    # also the sqljobs logger itself: a CLI run earlier in the process may have set its level
    caplog.set_level(logging.DEBUG, logger="sqljobs")
    with stepped_worker(app, concurrency=2) as worker:
        done = app.tasks["fine"].enqueue()
        dead = app.tasks["fails"].enqueue()
        assert worker.result(done) == 1
        worker.until(lambda: app.get_job(dead.id).state is JobState.DEAD)  # type: ignore[union-attr]
    records = caplog.records
    assert any("started on postgresql://" in r.getMessage() for r in records)
    for record in records:
        shown = record.getMessage() + (record.exc_text or "") + str(record.args)
        assert SECRET not in shown, record.getMessage()
    assert SECRET not in json.dumps(app.stats().to_dict(), default=str)
    assert SECRET not in repr(app) and SECRET not in str(app.workers())
    app.close()


def test_the_dashboard_and_metrics_show_nothing_of_the_password(secret_url: str) -> None:
    app = App(secret_url)
    app.task(name="fine")(lambda: 1)
    job = app.tasks["fine"].with_options(delay=3600).enqueue().id
    client = TestClient(create_app(app), base_url="http://127.0.0.1")
    pages = ["/", "/jobs", f"/jobs/{job}", "/queues", "/schedules", "/workers", "/metrics"]
    pages += ["/api/stats", "/api/jobs", "/api/queues", "/api/workers", "/api/schedules"]
    for page in pages:
        answer = client.get(page)
        assert answer.status_code == 200 and SECRET not in answer.text, page
    app.close()


def test_the_cli_shows_nothing_of_the_password(secret_url: str) -> None:
    runner = CliRunner()
    for args in (
        ["migrate"],
        ["stats"],
        ["stats", "--json"],
        ["jobs", "list"],
        ["queues"],
        ["schedules"],
        ["enqueue", "nobody", "--remote"],
    ):
        answer = runner.invoke(cli, ["--url", secret_url, *args])
        assert SECRET not in answer.output, args
        assert answer.exception is None or SECRET not in str(answer.exception), args


def test_the_command_line_error_for_an_unreachable_database_hides_the_password() -> None:
    url = f"postgresql://postgres:{SECRET}@127.0.0.1:1/test"  # nobody listens there
    env = {**os.environ, "PYTHONPATH": child_pythonpath(), "SQLJOBS_URL": url}
    command = [sys.executable, "-m", "sqljobs", "--app", "tests.apps.workload:app"]
    stats = subprocess.run(
        [*command, "stats"], capture_output=True, text=True, cwd=ROOT, env=env, timeout=60
    )
    assert stats.returncode != 0 and "cannot connect to PostgreSQL" in stats.stderr
    assert SECRET not in stats.stdout + stats.stderr
    # a worker keeps trying: read its log until it has said why, then stop it
    worker = subprocess.Popen(
        [*command, "-v", "worker"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=ROOT,
        env=env,
    )
    try:
        assert worker.stdout is not None
        said = []
        for line in worker.stdout:
            said.append(line)
            if "database unreachable" in line:
                break
    finally:
        worker.kill()
        worker.wait(timeout=10)
        if worker.stdout is not None:
            worker.stdout.close()
    assert "cannot connect to PostgreSQL at postgresql://postgres:***@" in "".join(said)
    assert SECRET not in "".join(said)


# -- the dashboard ------------------------------------------------------------------------


def _basic(password: str) -> dict[str, str]:
    import base64

    return {"Authorization": "Basic " + base64.b64encode(f"ops:{password}".encode()).decode()}


def test_every_post_route_of_the_dashboard_needs_the_csrf_token(app: App) -> None:
    """Basic auth is what a browser resends by itself to a cross-site form: with it alone,
    every POST route the dashboard has (found from its routing table, so a new one is
    covered) is refused, and nothing changes."""
    from starlette.routing import Route

    app.task(name="later")(lambda: None)
    job = app.tasks["later"].with_options(delay=3600).enqueue().id
    app.schedule("nightly", task="later", every=3600)
    asgi = create_app(app, token="tok-" + SECRET)
    values = {"job_id": str(job), "name": "nightly"}
    posts = [
        r.path.replace("{name:path}", "{name}").format(**values)
        for r in asgi.routes
        if isinstance(r, Route) and r.methods and "POST" in r.methods
    ]
    assert len(posts) >= 14 and "/login" in posts and "/logout" in posts
    client = TestClient(asgi, base_url="http://127.0.0.1", headers=_basic("tok-" + SECRET))
    assert client.get("/api/csrf").status_code == 200  # a session cookie, as a browser has
    for path in posts:
        for form in (None, {"csrf": "forged"}):
            answer = client.post(f"{path}?queue=default", data=form, follow_redirects=False)
            assert answer.status_code == 403, (path, form, answer.text)
    assert _state_of(app, job) is JobState.PENDING
    assert not any(q.paused for q in app.queues())
    schedule = app.get_schedule("nightly")
    assert schedule is not None and not schedule.paused


def _state_of(app: App, job_id: int) -> JobState:
    job = app.get_job(job_id)
    assert job is not None
    return job.state


def test_the_dashboard_defaults_to_loopback_and_no_page_shows_the_token(app: App) -> None:
    import inspect

    from sqljobs.dashboard import serve

    assert inspect.signature(serve).parameters["host"].default == "127.0.0.1"
    dashboard = cli.commands["dashboard"]
    assert {p.name: p.default for p in dashboard.params}["host"] == "127.0.0.1"
    for host in ("0.0.0.0", "::", "192.168.1.5", "jobs.internal", "::ffff:127.0.0.1"):
        refused = CliRunner().invoke(cli, ["--url", app.url, "dashboard", "--host", host])
        assert refused.exit_code == 2 and "without a token" in refused.output, host
    token = "tok-" + SECRET
    app.task(name="later")(lambda: None)
    job = app.tasks["later"].with_options(delay=3600).enqueue().id
    client = TestClient(
        create_app(app, token=token), base_url="http://127.0.0.1", headers=_basic(token)
    )
    for page in ("/", "/jobs", f"/jobs/{job}", "/queues", "/schedules", "/workers", "/metrics"):
        answer = client.get(page)
        assert answer.status_code == 200 and token not in answer.text, page
    login = TestClient(client.app, base_url="http://127.0.0.1").get("/login")
    assert login.status_code == 200 and token not in login.text
    assert 'type="password"' in login.text


def test_a_failed_attempt_s_log_lines_hide_the_task_s_redacted_arguments(
    app: App, caplog: pytest.LogCaptureFixture
) -> None:
    card = "4111-2222-3333-4444"

    @app.task(redact=["card"], retry=sqljobs.Retry(max_attempts=2, base=0.01, cap=0.01))
    def charge(card: str, amount: int) -> None:
        raise ValueError(f"card {card} declined")

    caplog.set_level(logging.DEBUG, logger="sqljobs")
    handle = charge.enqueue(card, 5)
    with stepped_worker(app) as worker:
        worker.until(lambda: app.get_job(handle.id).state is JobState.DEAD)  # type: ignore[union-attr]
    said = [r.getMessage() for r in caplog.records]
    assert any("attempt 1/2 failed: ValueError: card *** declined" in s for s in said), said
    assert any(
        "the job is dead: failed 2 of 2 attempts; last: ValueError: card *** declined" in s
        for s in said
    ), said
    assert not any(card in s for s in said)
