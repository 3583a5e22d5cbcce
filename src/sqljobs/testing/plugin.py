"""The pytest plugin (entry point ``sqljobs``): fixtures for tests of code that uses
sqljobs.

- ``sqljobs_url``: a fresh, empty database per test: a SQLite file in the test's
  ``tmp_path``, or, given ``--sqljobs-url`` / ``SQLJOBS_TEST_URL`` (a PostgreSQL URL), a
  new database created beside the one named and dropped after the test (the user needs
  CREATEDB).
- ``sqljobs_clock``: a :class:`~sqljobs.testing.Clock`, on either engine.
- ``sqljobs_app``: the App to test on that database and clock. With ``--sqljobs-app
  MODULE:ATTR`` (or the ini option ``sqljobs_app``), the user's own App, bound to the
  test's database and clock for the test and given back afterwards; without, a new App.
"""

from __future__ import annotations

import importlib
import logging
import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

from ..app import App
from ..errors import ConfigurationError
from ..humanize import redact_url
from ..url import parse_url, url_options
from .binding import bind
from .clock import Clock

log = logging.getLogger("sqljobs.testing")

URL_VARIABLE = "SQLJOBS_TEST_URL"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("sqljobs", "sqljobs testing fixtures")
    group.addoption(
        "--sqljobs-url",
        default=None,
        help="PostgreSQL URL for the sqljobs_url fixture: each test gets a new database "
        f"beside it (default: ${URL_VARIABLE}, else a SQLite file per test)",
    )
    group.addoption(
        "--sqljobs-app",
        default=None,
        help="MODULE:ATTR of the App the sqljobs_app fixture binds to each test's database",
    )
    parser.addini("sqljobs_app", "MODULE:ATTR of the App the sqljobs_app fixture binds")


@pytest.fixture
def sqljobs_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh, empty database URL for this test (SQLite file, or a new PostgreSQL
    database when a server URL is configured)."""
    server = request.config.getoption("sqljobs_url") or os.environ.get(URL_VARIABLE)
    if not server:
        yield f"sqlite:///{tmp_path / 'sqljobs.db'}"
        return
    if parse_url(server).scheme != "postgresql":
        raise ConfigurationError(
            f"--sqljobs-url / {URL_VARIABLE} {redact_url(server)!r}: give a PostgreSQL URL "
            "(leave it unset for a SQLite file per test)"
        )
    with fresh_database(server) as url:
        yield url


@pytest.fixture
def sqljobs_clock() -> Clock:
    """A controllable clock for this test, frozen at the real time it starts."""
    return Clock()


@pytest.fixture
def sqljobs_app(
    request: pytest.FixtureRequest, sqljobs_url: str, sqljobs_clock: Clock
) -> Iterator[App]:
    """The App under test, on this test's database and on ``sqljobs_clock``: the
    configured one (``--sqljobs-app`` or the ini ``sqljobs_app``), bound for the test, or
    a new App to register tasks on."""
    spec = request.config.getoption("sqljobs_app") or request.config.getini("sqljobs_app")
    if not spec:
        app = App(sqljobs_url, clock=sqljobs_clock)
        try:
            yield app
        finally:
            app.close()
        return
    with bind(load_app(str(spec)), sqljobs_url, clock=sqljobs_clock) as app:
        yield app


def load_app(spec: str) -> App:
    """The App named ``MODULE:ATTR``, or an error naming what was wrong."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ConfigurationError(f"sqljobs_app: expected MODULE:ATTR, got {spec!r}")
    module = importlib.import_module(module_name)
    app = getattr(module, attr, None)
    if not isinstance(app, App):
        raise ConfigurationError(f"sqljobs_app: {spec!r} is {app!r}, not a sqljobs.App")
    return app


@contextmanager
def fresh_database(server: str) -> Iterator[str]:
    """A new PostgreSQL database on ``server``'s host (created through ``server``),
    dropped afterwards; yields its URL."""
    import psycopg

    name = f"sqljobs_test_{uuid.uuid4().hex[:12]}"
    parts = urlsplit(server)
    url = urlunsplit(parts._replace(path=f"/{name}"))
    admin_url = url_options(server)[0]  # without sqljobs's own ?listen=false, kept in url
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    log.debug("created test database %s", name)
    try:
        yield url
    finally:
        with psycopg.connect(admin_url, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
