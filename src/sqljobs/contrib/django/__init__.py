"""sqljobs in a Django project: one App configured from the settings, every Django task
(``django.tasks``) run by sqljobs workers, ``manage.py sqljobs ...``, and enqueues that
commit with the request's own rows.

Settings::

    INSTALLED_APPS = [..., "sqljobs.contrib.django"]
    TASKS = {"default": {"BACKEND": "sqljobs.contrib.django.TaskBackend"}}
    SQLJOBS = {
        "DATABASE": "default",      # the jobs live in this database (its tables beside yours)
        # "URL": "postgresql://...", # or any sqljobs URL instead
        # "TASK_MODULES": ["myproject.jobs"],  # besides each installed app's tasks module
        # "APP": {"retention": 3600},          # more App(...) options
    }

The jobs are kept in the database Django uses (``DATABASE``), so an enqueue inside
``transaction.atomic()`` runs on Django's own connection and commits, or rolls back, with
the rows written beside it. ``manage.py migrate`` migrates sqljobs' tables too (after
Django's own), and ``manage.py sqljobs worker`` runs the jobs.
"""

from __future__ import annotations

import functools
import importlib
import logging
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ...app import App

log = logging.getLogger("sqljobs.django")

__all__ = ["TaskBackend", "get_app", "jobs_url"]


def jobs_url(databases: dict[str, dict[str, Any]], alias: str) -> str:
    """The sqljobs URL of Django's database ``alias`` (PostgreSQL or SQLite)."""
    from urllib.parse import quote

    from ...errors import ConfigurationError

    if alias not in databases:
        raise ConfigurationError(
            f"SQLJOBS['DATABASE'] is {alias!r}, which DATABASES does not define "
            f"(it has {', '.join(sorted(databases)) or 'none'})"
        )
    db = databases[alias]
    engine = str(db.get("ENGINE", ""))
    if engine.endswith("sqlite3"):
        return f"sqlite:///{db['NAME']}"
    if engine.endswith("postgresql"):
        user = quote(str(db.get("USER") or ""), safe="")
        password = quote(str(db.get("PASSWORD") or ""), safe="")
        auth = f"{user}:{password}@" if password else (f"{user}@" if user else "")
        host = db.get("HOST") or "localhost"
        port = f":{db['PORT']}" if db.get("PORT") else ""
        return f"postgresql://{auth}{host}{port}/{db['NAME']}"
    raise ConfigurationError(
        f"database {alias!r} uses {engine!r}: sqljobs keeps jobs in PostgreSQL or SQLite; "
        "give SQLJOBS['URL'] to keep them elsewhere (no transaction shared with Django then)"
    )


@functools.cache  # one App per process, as Django keeps one connection handler
def get_app() -> App:
    """The App the settings describe, with every Django task registered (each installed
    app's ``tasks`` module and ``SQLJOBS['TASK_MODULES']`` are imported)."""
    from django.conf import settings

    from ...app import App
    from .tasks import register_django_tasks

    options = dict(getattr(settings, "SQLJOBS", {}))
    url = options.get("URL") or jobs_url(settings.DATABASES, options.get("DATABASE", "default"))
    # migrated with Django's own migrate (see apps.py): a migration on first use would
    # wait for the write lock of the caller's transaction on SQLite
    app = App(url, **{"migrate": False, **dict(options.get("APP", {}))})
    register_django_tasks(app, _task_modules(options.get("TASK_MODULES", ())))
    log.info("sqljobs for Django: %r", app)
    return app


def _task_modules(extra: Any) -> list[Any]:
    """Each installed app's ``tasks`` module (when it has one) and the modules named."""
    from django.apps import apps

    modules = []
    for config in apps.get_app_configs():
        try:
            modules.append(importlib.import_module(f"{config.name}.tasks"))
        except ModuleNotFoundError as exc:
            if exc.name != f"{config.name}.tasks":
                raise  # the module exists and failed to import: say so
    modules += [importlib.import_module(name) for name in extra]
    return modules


def __getattr__(name: str) -> Any:
    """``sqljobs.contrib.django:app`` (for ``--app``) is the App of the settings, and
    ``TaskBackend`` is imported only when Django asks for it."""
    if name == "app":
        return get_app()
    if name == "TaskBackend":
        from .backend import TaskBackend

        return TaskBackend
    raise AttributeError(name)
