"""A workflow's child jobs, on both backends: a finished child's outcome outlives the
done-retention until its workflow has read it (a real prune run in between)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import sqljobs
from sqljobs import App, JobState, Workflow
from sqljobs.maintenance import Pruner
from sqljobs.testing import Clock

START = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
DAY = 86400.0


def state(app: App, job_id: int) -> JobState | None:
    job = app.get_job(job_id)
    return None if job is None else job.state


def test_a_child_s_outcome_outlives_the_done_retention_until_its_workflow_reads_it(
    url: str,
) -> None:
    clock = Clock(START)
    app = App(url, clock=clock, retention=sqljobs.Retention(done=60))

    @app.task
    def quick() -> int:
        return 1

    @app.task(queue="slow")  # served only by the second drain below
    def later() -> int:
        return 2

    @app.task
    def bystander() -> None: ...

    @app.workflow
    def fan(wf: Workflow) -> list[Any]:
        return wf.gather([quick.s(), later.s()])

    handle = fan.enqueue()
    other = bystander.enqueue()
    app.run_until_empty(clock=clock, queues=["default"])
    (step,) = app.workflow_history(handle.id)
    quick_id, later_id = step.detail["children"]
    assert state(app, quick_id) is JobState.DONE and state(app, later_id) is JobState.PENDING

    clock.advance(2 * DAY)  # the first child ended long past the done-retention
    Pruner(app.backend, app.retention).run_once()
    assert state(app, other.id) is None, "the pruner ran and took what it may"
    assert state(app, quick_id) is JobState.DONE, "its workflow has not read it yet"

    app.run_until_empty(clock=clock, queues=["slow", "default"])
    assert handle.result(timeout=1) == [1, 2]
    clock.advance(2 * DAY)
    Pruner(app.backend, app.retention).run_once()
    assert state(app, quick_id) is None and state(app, later_id) is None, "read: prunable"
