"""Fixtures shared by every test: a fresh database per test, on each backend."""

from __future__ import annotations

import contextlib
import ctypes
import functools
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

import sqljobs
from sqljobs.url import url_options
from tests import pg_cluster
from tests.pg_cluster import PrivateCluster
from tests.pgbouncer import PgBouncer

ROOT = Path(__file__).resolve().parent.parent
BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
POOLED = [
    pytest.param(name, marks=[pytest.mark.postgres, pytest.mark.pgbouncer])
    for name in ("pgbouncer-transaction", "pgbouncer-session")
]
"""The ``url`` cases through PgBouncer: not in BACKENDS, a module asks for them (see
tests/test_pgbouncer.py). Transaction mode's URL says ``listen=false``."""
Spawn = Callable[..., "subprocess.Popen[bytes]"]


@pytest.hookimpl(tryfirst=True)  # before -m deselects by marker
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark by fixture what no test should have to mark by hand: a test runs on PostgreSQL
    when it needs the template (PG-only files override ``url`` with it) or gets ``url``'s
    postgres case, also by ``parametrize("url", ["postgres"], indirect=True)``, which
    bypasses BACKENDS' marks; a test that goes through PgBouncer (a ``pgbouncer-*`` case)
    also runs on PostgreSQL; a test that uses ``spawn`` starts worker processes."""
    for item in items:
        fixtures = getattr(item, "fixturenames", ())
        callspec = getattr(item, "callspec", None)
        case = str(callspec.params.get("url", "")) if callspec is not None else ""
        pooled = case.startswith("pgbouncer") or "pgbouncers" in fixtures
        if case == "postgres" or pooled or "pg_template" in fixtures or "private_pg" in fixtures:
            item.add_marker(pytest.mark.postgres)
        if pooled:
            item.add_marker(pytest.mark.pgbouncer)
        if "spawn" in fixtures:
            item.add_marker(pytest.mark.processes)


@pytest.fixture(params=BACKENDS)
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh, empty database URL on each backend: a temp SQLite file, or a new
    PostgreSQL database copied from a migrated template."""
    with database_url(request, tmp_path) as case_url:
        yield case_url


@contextmanager
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """The ``url`` fixture's case ``request.param``: ``sqlite``, ``postgres``, or a fresh
    PostgreSQL database reached through PgBouncer (``pgbouncer-transaction``, whose URL
    asks for poll-only mode, or ``pgbouncer-session``)."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'jobs.db'}"
        return
    if request.param == "private-postgres":  # a server of the test's own, to stop at will
        cluster = request.getfixturevalue("private_pg")
        sqljobs.App(cluster.url()).migrate()
        yield cluster.url()
        return
    template = request.getfixturevalue("pg_template")
    with fresh_pg_database(template) as pg_url:
        if not request.param.startswith("pgbouncer-"):
            yield pg_url
            return
        mode = request.param.removeprefix("pgbouncer-")
        bouncer = request.getfixturevalue("pgbouncers")(mode)
        database = pg_url.rsplit("/", 1)[1]
        yield bouncer.url(database, "listen=false" if mode == "transaction" else "")


@pytest.fixture(autouse=True)
def restore_logging() -> Iterator[None]:
    """A command run in-process sets the ``sqljobs`` logger's level (``lab`` to ERROR) and
    a handler on the root logger: put both back, so no later test loses its records."""
    ours, root = logging.getLogger("sqljobs"), logging.getLogger()
    levels, handlers = (ours.level, root.level), list(root.handlers)
    yield
    ours.setLevel(levels[0])
    root.setLevel(levels[1])
    root.handlers[:] = handlers


@pytest.fixture(autouse=True)
def close_what_tests_open(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Close every App and backend a test opened, so no connection pool is left for the
    garbage collector to tear down from one of the pool's own threads."""
    opened: list[Any] = []
    real_init, real_open = sqljobs.App.__init__, sqljobs.App._open_backend

    @functools.wraps(real_init)  # keeps App's signature for tests that read it
    def init(self: sqljobs.App, *args: Any, **kwargs: Any) -> None:
        real_init(self, *args, **kwargs)
        opened.append(self)

    @functools.wraps(real_open)
    def open_backend(self: sqljobs.App, **options: Any) -> Any:
        backend = real_open(self, **options)
        opened.append(backend)
        return backend

    monkeypatch.setattr(sqljobs.App, "__init__", init)
    monkeypatch.setattr(sqljobs.App, "_open_backend", open_backend)
    yield
    for thing in reversed(opened):
        with contextlib.suppress(Exception):
            thing.close()


@pytest.fixture
def app(url: str) -> Iterator[sqljobs.App]:
    application = sqljobs.App(url)
    yield application
    application.close()


def wait_until(predicate: Callable[[], Any], timeout: float = 10.0, what: str = "") -> Any:
    """Poll ``predicate`` until it is truthy; fail the test after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what or predicate}")
        time.sleep(0.005)


@contextmanager
def worker_thread(app: sqljobs.App, **options: Any) -> Iterator[sqljobs.Worker]:
    """Run a worker in a thread of this process; stop it gracefully at the end."""
    options.setdefault("install_signal_handlers", False)
    worker = sqljobs.Worker(app, **options)
    errors: list[BaseException] = []

    def target() -> None:
        try:
            worker.run()
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    try:
        yield worker
    finally:
        worker.stop()
        thread.join(timeout=30)
        assert not thread.is_alive(), "worker did not stop"
        if errors:
            raise errors[0]


class Runs:
    """The run log written by tests/apps/workload.py."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.touch()

    def lines(self) -> list[tuple[str, int, str]]:
        out = []
        for line in self.path.read_text().splitlines():
            label, pid, phase = line.split()
            out.append((label, int(pid), phase))
        return out

    def count(self, phase: str = "end") -> Counter[str]:
        return Counter(label for label, _, p in self.lines() if p == phase)

    def started_by(self, pid: int) -> list[str]:
        return [label for label, p, phase in self.lines() if p == pid and phase == "start"]


def child_pythonpath() -> str:
    """What a test's subprocess imports from: the tests' root (for ``tests.apps``), then
    whatever this process was given (a worktree's ``src`` wins over the installed copy)."""
    return os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)


@pytest.fixture
def runs(tmp_path: Path) -> Runs:
    return Runs(tmp_path / "runs.log")


def die_with_parent() -> None:
    """In a child before exec: SIGKILL it when the test process dies, so a pytest killed
    mid-run (no teardown) leaves no worker draining the test database. Linux only; the
    supervisor's own children notice their orphaning (``supervisor_pid``)."""
    if sys.platform == "linux":
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


PR_SET_PDEATHSIG = 1


@pytest.fixture
def spawn(url: str, runs: Runs, tmp_path: Path) -> Iterator[Callable[..., subprocess.Popen[bytes]]]:
    """Start ``sqljobs worker`` subprocesses on the test database; kill leftovers at the end.

    Their output goes to ``worker-N.log`` files beside the database (printed on failure)."""
    procs: list[subprocess.Popen[bytes]] = []
    logs: list[Path] = []

    def start(
        *args: str, lease: float = 1.0, app: str = "tests.apps.workload:app"
    ) -> subprocess.Popen[bytes]:
        env = dict(
            os.environ,
            SQLJOBS_URL=url,
            SQLJOBS_TEST_RUNS=str(runs.path),
            SQLJOBS_TEST_LEASE=str(lease),
            PYTHONPATH=child_pythonpath(),
        )
        log_path = tmp_path / f"worker-{len(procs)}.log"
        logs.append(log_path)
        with log_path.open("wb") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "sqljobs", "-v", "--app", app, "worker", *args],
                env=env,
                cwd=ROOT,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # so teardown can kill a supervisor's children too
                preexec_fn=die_with_parent,  # and a killed pytest leaves none behind
            )
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    for log_path in logs:
        text = log_path.read_text(errors="replace").strip()
        if text:
            print(f"--- {log_path.name}\n{text[-4000:]}")


# -- PostgreSQL: a fresh database per test, copied from a migrated template --------------

PG_ADMIN_URL = os.environ.get("SQLJOBS_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")


@pytest.fixture(scope="session")
def pg_template() -> Iterator[str]:
    """A migrated template database; in CI a missing PostgreSQL fails the run."""
    import psycopg

    try:
        psycopg.connect(PG_ADMIN_URL, connect_timeout=5).close()
    except psycopg.OperationalError as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(f"PostgreSQL is required in CI and is not reachable: {exc}")
        pytest.skip(f"PostgreSQL not reachable at {PG_ADMIN_URL}: {exc}")
    name = f"sqljobs_template_{os.getpid()}"
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {name}")
        admin.execute(f"CREATE DATABASE {name}")
    app = sqljobs.App(_pg_url(name))
    app.migrate()
    app.close()
    yield name
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture
def private_pg() -> Iterator[PrivateCluster]:
    """A PostgreSQL server of this test's own (see tests/pg_cluster.py), for tests that
    restart or stop the server; ask for it with ``parametrize("url", ["private-postgres"],
    indirect=True)`` to get a migrated database on it as ``url``."""
    why_not = pg_cluster.available()
    if why_not is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"a private PostgreSQL server is required in CI: {why_not}")
        pytest.skip(why_not)
    cluster = PrivateCluster()
    try:
        yield cluster
    finally:
        cluster.destroy()


@pytest.fixture(scope="session")
def pgbouncers(
    pg_template: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Callable[[str], PgBouncer]]:
    """PgBouncer in front of the tests' PostgreSQL, one process per pool mode, each
    started when a test first asks for it and stopped at the end of the session; in CI a
    missing pgbouncer fails the run."""
    if shutil.which("pgbouncer") is None:
        message = "pgbouncer is not installed (apt-get install pgbouncer)"
        if os.environ.get("CI") == "true":
            pytest.fail(f"{message}; it is required in CI")
        pytest.skip(message)
    started: dict[str, PgBouncer] = {}

    def bouncer(mode: str) -> PgBouncer:
        if mode not in started:
            directory = tmp_path_factory.mktemp(f"pgbouncer-{mode}")
            started[mode] = PgBouncer(mode, PG_ADMIN_URL, directory)
            started[mode].start()
        return started[mode]

    yield bouncer
    for running in started.values():
        running.stop()


def _pg_url(database: str) -> str:
    return PG_ADMIN_URL.rsplit("/", 1)[0] + "/" + database


@contextmanager
def fresh_pg_database(template: str) -> Iterator[str]:
    import uuid

    import psycopg

    name = f"sqljobs_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name} TEMPLATE {template} STRATEGY FILE_COPY")
    try:
        yield _pg_url(name)
    finally:
        with psycopg.connect(PG_ADMIN_URL, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def is_pg(app_or_url: sqljobs.App | str) -> bool:
    url = app_or_url if isinstance(app_or_url, str) else app_or_url.url
    return url.startswith("postgres")


def db_execute(
    app: sqljobs.App, sqlite: str, postgres: str | None = None, params: tuple[Any, ...] = ()
) -> list[Any]:
    """Run raw SQL on the app's database (tests only): ``?`` placeholders, translated for
    PostgreSQL; ``postgres`` gives a different statement where the dialects differ."""
    if is_pg(app):
        import psycopg

        with psycopg.connect(url_options(app.url)[0], autocommit=True) as pg:
            cur = pg.execute((postgres or sqlite).replace("?", "%s"), params)
            return cur.fetchall() if cur.description else []
    import sqlite3

    conn = sqlite3.connect(app.url.removeprefix("sqlite:///"), isolation_level=None)
    try:
        return conn.execute(sqlite, params).fetchall()
    finally:
        conn.close()


def expire_lease(app: sqljobs.App, job_id: int) -> None:
    """Make a running job's lease look expired, as if its worker went silent."""
    db_execute(
        app,
        "UPDATE sqljobs_jobs SET lease_until = 0 WHERE id = ?",
        "UPDATE sqljobs_jobs SET lease_until = now() - interval '1 hour' WHERE id = ?",
        (job_id,),
    )


def placeholder(app: sqljobs.App) -> str:
    """The DB-API parameter marker of the app's backend (what ctx.transaction() speaks)."""
    return "%s" if is_pg(app) else "?"
