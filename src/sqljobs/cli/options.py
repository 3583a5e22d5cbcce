"""What every command shares: the global options and the App they name (:class:`Ctx`,
handed to commands by :data:`pass_ctx`), and the parameter types for job ids, seconds and
queue names."""

from __future__ import annotations

import importlib
import logging
import math
import os
import sys
from typing import Any

import click

from ..app import App
from ..errors import ConfigurationError
from ..logs import LogFormat, configure_logging
from ..url import DEFAULT_URL
from ..validate import MAX_ID, check_queue_name

JOB_ID = click.IntRange(1, MAX_ID)
"""A job id argument: a number out of the 64-bit range is a usage error that names it
(the database could not even be asked about it)."""
NO_DATABASE = (
    "no database given: pass --url URL or --app MODULE:ATTR, or set SQLJOBS_URL or "
    f"SQLJOBS_APP (a new SQLite file would be --url {DEFAULT_URL})"
)


def load_app(spec: str | None, url: str | None) -> App:
    """``module:attr`` (or ``SQLJOBS_APP``) names the App; else a bare App on the URL
    (``--url`` or ``SQLJOBS_URL``). Neither is an error, not a new ``./sqljobs.db``."""
    spec = spec or os.environ.get("SQLJOBS_APP")
    if not spec:
        if not (url or os.environ.get("SQLJOBS_URL")):
            raise ConfigurationError(NO_DATABASE)
        return App(url)
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise click.BadParameter(f"expected MODULE:ATTR, got {spec!r}", param_hint="--app")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise click.BadParameter(
            f"cannot import {module_name!r}: {exc}", param_hint="--app"
        ) from exc
    app = getattr(module, attr, None)
    if not isinstance(app, App):
        raise click.BadParameter(f"{spec!r} is not a sqljobs.App", param_hint="--app")
    if url:
        app.url = url
    return app


class Ctx:
    """The global options, and the App they name, loaded only by commands that use it
    (``lab`` brings its own database)."""

    def __init__(self, owns_logging: bool = False) -> None:
        self.owns_logging = owns_logging
        self.app_spec: str | None = None
        self.url: str | None = None
        self.verbose = 0
        self.log_format: LogFormat = "text"
        self._app: App | None = None

    @property
    def app(self) -> App:
        if self._app is None:
            self._app = load_app(self.app_spec, self.url)
        return self._app

    def setup_logging(self, worker: bool) -> None:
        """-v INFO, -vv DEBUG; a worker logs INFO without -v (its banner, failed attempts
        and stop summary are what an operator reads). Only when run as ``sqljobs``: a
        program that calls :data:`cli` in-process keeps its own logging."""
        if not self.owns_logging:
            return
        if self.verbose >= 2:
            level = logging.DEBUG
        elif self.verbose == 1 or worker:
            level = logging.INFO
        else:
            level = logging.WARNING
        configure_logging(level, self.log_format)


pass_ctx = click.make_pass_decorator(Ctx)


class Seconds(click.FloatRange):
    """A duration in seconds: finite and not negative (``nan`` and ``inf`` are refused);
    ``positive`` refuses 0 too."""

    name = "seconds"

    def __init__(self, positive: bool = False) -> None:
        super().__init__(min=0, min_open=positive)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        seconds = super().convert(value, param, ctx)
        if not math.isfinite(seconds):
            self.fail(f"{value!r} is not a finite number of seconds", param, ctx)
        return seconds


def queue_name(name: str, where: str, hint: str) -> str:
    """A queue name as the app would check it, refused as a bad parameter (with what a
    name may hold) before anything is read or written."""
    try:
        return check_queue_name(name, where)
    except ConfigurationError as exc:
        raise click.BadParameter(str(exc), param_hint=hint) from exc
