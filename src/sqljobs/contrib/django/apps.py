"""The Django app config: put ``"sqljobs.contrib.django"`` in ``INSTALLED_APPS`` for
``manage.py sqljobs ...``."""

from __future__ import annotations

import logging
from typing import Any

from django.apps import AppConfig
from django.db.models.signals import post_migrate

log = logging.getLogger("sqljobs.django")


class SqljobsConfig(AppConfig):
    name = "sqljobs.contrib.django"
    label = "sqljobs"
    verbose_name = "sqljobs"

    def ready(self) -> None:
        # sent once per app that has models (this one has none): each time is a no-op
        # once the tables are there
        post_migrate.connect(_migrate_jobs, dispatch_uid="sqljobs-migrate")


def _migrate_jobs(sender: Any, **kwargs: Any) -> None:
    """``manage.py migrate`` migrates sqljobs' tables too, so a deploy has one step."""
    from . import get_app

    applied = get_app().migrate()
    if applied:
        log.info("sqljobs migrations applied: %s", ", ".join(applied))
