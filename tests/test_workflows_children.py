"""A workflow's child jobs, on both backends: a finished child's outcome outlives the
done-retention until its workflow has read it (a real prune run in between), and every
way of cancelling a workflow (by id, by filter, the CLI, the dashboard's bulk cancel)
cancels the children it waits for that have not ended, and theirs."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest

import sqljobs
from sqljobs import App, JobFilter, JobState, Workflow
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


@dataclass
class Fan:
    app: App
    workflow: int
    done_child: int
    open_children: list[int]


def _fan(url: str) -> Fan:
    """A workflow ``fan`` parked on three children: one done, one pending, and a workflow
    ``inner`` itself parked on a pending child of its own."""
    clock = Clock(START)
    app = App(url, clock=clock)

    @app.task
    def quick() -> int:
        return 1

    @app.task(queue="elsewhere")  # no drain below serves it: it stays pending
    def later() -> None: ...

    @app.workflow
    def inner(wf: Workflow) -> Any:
        return wf.run(later.s())

    @app.workflow
    def fan(wf: Workflow) -> list[Any]:
        return wf.gather([quick.s(), later.s(), inner.s()])

    handle = fan.enqueue()
    app.run_until_empty(clock=clock, queues=["default"])
    (step,) = app.workflow_history(handle.id)
    done_child, pending_child, inner_id = step.detail["children"]
    (inner_step,) = app.workflow_history(inner_id)
    (grandchild,) = inner_step.detail["children"]
    assert state(app, done_child) is JobState.DONE
    assert state(app, inner_id) is JobState.WAITING
    return Fan(app, handle.id, done_child, [pending_child, inner_id, grandchild])


def _by_filter(fan: Fan) -> int:
    return fan.app.cancel(JobFilter(task="fan"))


def _by_keywords(fan: Fan) -> int:
    return fan.app.cancel(task="fan", state="waiting")


def _by_cancel_many(fan: Fan) -> int:
    return fan.app.cancel_many(task="fan")


def _by_cli(fan: Fan) -> int:
    from click.testing import CliRunner

    from sqljobs.cli import Ctx, cli

    args = ["--url", fan.app.url, "jobs", "cancel", "--task", "fan", "--yes"]
    out = CliRunner().invoke(cli, args, obj=Ctx(), catch_exceptions=False)
    assert out.exit_code == 0, out.output
    return int(out.output.split()[0])


def _by_dashboard(fan: Fan, **params: Any) -> int:
    from starlette.testclient import TestClient

    from sqljobs.dashboard import create_app

    client = TestClient(create_app(fan.app), base_url="http://127.0.0.1")
    client.headers["X-CSRF-Token"] = client.get("/api/csrf").json()["csrf"]
    answer = client.post("/api/jobs/cancel", params=params)
    assert answer.status_code == 200, answer.text
    return int(answer.json()["cancelled"])


def _by_dashboard_filter(fan: Fan) -> int:
    return _by_dashboard(fan, task="fan")


def _by_dashboard_selection(fan: Fan) -> int:
    return _by_dashboard(fan, ids=str(fan.workflow))


def _by_id(fan: Fan) -> int:
    return int(fan.app.cancel(fan.workflow))


@pytest.mark.parametrize(
    "cancel",
    [_by_id, _by_filter, _by_keywords, _by_cancel_many, _by_cli, _by_dashboard_filter,
     _by_dashboard_selection],
    ids=lambda f: f.__name__.removeprefix("_by_"),
)  # fmt: skip
def test_every_cancel_of_a_workflow_cancels_its_open_children_and_theirs(
    url: str, cancel: Callable[[Fan], int]
) -> None:
    fan = _fan(url)
    assert cancel(fan) == 1, "the count is of the jobs named or matched"
    assert state(fan.app, fan.workflow) is JobState.CANCELLED
    assert state(fan.app, fan.done_child) is JobState.DONE, "an ended child is left alone"
    assert [state(fan.app, c) for c in fan.open_children] == [JobState.CANCELLED] * 3
