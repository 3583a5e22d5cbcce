"""Helpers for testing code that uses sqljobs: a clock the test moves, a drain that runs
due jobs through a real worker in-process, a worker the test steps pass by pass
(:func:`stepped_worker`), assertions on what was enqueued, and the plan a database
chooses for a statement (:func:`explain`).

    clock = Clock()
    app = sqljobs.App("sqlite:///" + str(tmp_path / "jobs.db"), clock=clock)
    ...
    send_report.with_options(delay=3600).enqueue("acme", "2026-12-01")
    assert_enqueued(app, send_report, args=["acme", "2026-12-01"])
    report = app.run_until_empty()        # moves the clock an hour on, runs the job
    assert report.done == 1

The pytest plugin (:mod:`sqljobs.testing.plugin`, registered by entry point) gives the
fixtures ``sqljobs_url``, ``sqljobs_clock`` and ``sqljobs_app``. There is no "eager"
mode that runs jobs at enqueue time: see :mod:`sqljobs.testing.drain` and docs/testing.md.
"""

from ..errors import DrainIncomplete
from .asserts import assert_enqueued, assert_not_enqueued, enqueued_jobs
from .binding import bind
from .clock import Clock
from .drain import run_until_empty
from .plans import Plan, PlanNode, assert_uses_index, explain
from .report import Attempt, DrainReport, JobRun
from .stepping import Stepper, stepped_worker

__all__ = [
    "Attempt",
    "Clock",
    "DrainIncomplete",
    "DrainReport",
    "JobRun",
    "Plan",
    "PlanNode",
    "Stepper",
    "assert_enqueued",
    "assert_not_enqueued",
    "assert_uses_index",
    "bind",
    "enqueued_jobs",
    "explain",
    "run_until_empty",
    "stepped_worker",
]
