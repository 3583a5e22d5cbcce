"""``manage.py sqljobs <command>``: the sqljobs command line (``worker``, ``stats``,
``jobs``, ``queues``, ``dashboard``, ``migrate``, ...) on the App the Django settings
configure, with every Django task registered."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = "Run a sqljobs command (worker, stats, jobs, queues, dashboard, migrate, ...)."

    def run_from_argv(self, argv: list[str]) -> None:
        """Everything after ``manage.py sqljobs`` goes to the sqljobs command line as it
        is: its own options and help, not Django's."""
        from sqljobs.cli import main

        main(["--app", "sqljobs.contrib.django:app", *argv[2:]], prog_name="manage.py sqljobs")

    def handle(self, *args: Any, **options: Any) -> None:  # pragma: no cover - not reached
        self.run_from_argv(["manage.py", "sqljobs", *args])
