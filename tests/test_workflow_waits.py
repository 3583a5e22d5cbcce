"""What a parked workflow waits for, on both backends: ``app.waiting_reason``, ``sqljobs
workflows show`` and the dashboard's timeline read it through one reader
(``workflow_ops.step_wait``) and so agree, for a sleep, a step waiting to try again, a
wait for an event with a timeout, and children; a damaged checkpoint's detail reads as
nothing rather than failing."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from click.testing import CliRunner

from sqljobs import App, Retry, Workflow, WorkflowStep
from sqljobs.cli import Ctx, cli
from sqljobs.dashboard.flows import step_rows
from sqljobs.humanize import iso_local
from sqljobs.testing import Clock
from sqljobs.workflow_ops import StepWait, step_wait

START = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
DAY = 86400.0


def _utc(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).isoformat()


def _flaky() -> None:
    raise RuntimeError("not yet")


def test_the_reason_the_cli_and_the_dashboard_agree_on_what_a_workflow_waits_for(
    url: str,
) -> None:
    clock = Clock(START)
    app = App(url, clock=clock)
    t0 = clock()

    @app.task(queue="elsewhere")  # no drain below serves it: it stays pending
    def later() -> None: ...

    @app.workflow
    def sleeps(wf: Workflow) -> None:
        wf.sleep(DAY)

    @app.workflow
    def retries(wf: Workflow) -> None:
        wf.step("flaky", _flaky, retry=Retry(max_attempts=3, base=60, jitter=False))

    @app.workflow
    def waits(wf: Workflow) -> None:
        wf.wait_for("go", timeout=2 * DAY)

    @app.workflow
    def runs(wf: Workflow) -> None:
        wf.run(later.s())

    handles = {w.name: w.enqueue() for w in (sleeps, retries, waits, runs)}
    app.run_until_empty(clock=clock, until=t0 + 1, queues=["default"])
    (child,) = app.workflow_history(handles["runs"].id)[0].detail["children"]
    retry_at = float(app.workflow_history(handles["retries"].id)[0].detail["retry_at"])
    expected: dict[str, tuple[StepWait, str, str]] = {
        "sleeps": (StepWait(t0 + DAY, None, None, ()),
                   f"workflow sleeps until {_utc(t0 + DAY)}", f"until {iso_local(t0 + DAY)}"),
        "retries": (StepWait(retry_at, None, None, ()),
                    f"workflow sleeps until {_utc(retry_at)}", "RuntimeError: not yet"),
        "waits": (StepWait(None, "go", t0 + 2 * DAY, ()),
                  f"workflow waits for event 'go' (until {_utc(t0 + 2 * DAY)})",
                  f"event go until {iso_local(t0 + 2 * DAY)}"),
        "runs": (StepWait(None, None, None, (child,)),
                 f"workflow waits for its child job(s) {child}", f"children {child}"),
    }  # fmt: skip
    for name, (wait, reason, cell) in expected.items():
        job = handles[name].job()
        assert job is not None
        (step,) = app.workflow_history(job.id)
        assert step_wait(step) == wait, name
        assert app.waiting_reason(job) == reason, name
        shown = CliRunner(env={"COLUMNS": "200"}).invoke(
            cli, ["--url", url, "workflows", "show", str(job.id)], obj=Ctx()
        )
        assert shown.exit_code == 0 and f"  {reason}\n" in shown.output, shown.output
        assert cell in shown.output, (name, shown.output)
        (row,) = step_rows(app, [step])
        assert (row.wake_at, row.event, row.timeout_at) == (
            wait.wake_at,
            wait.event,
            wait.timeout_at,
        )
        assert [i for i, _ in row.children] == list(wait.children), name


@pytest.mark.parametrize(
    "detail",
    [{"wake_at": "soon", "children": "1,2"}, {"timeout_at": True, "children": [0, "3", 4.0]}],
)
def test_a_damaged_detail_reads_as_nothing(detail: dict[str, Any]) -> None:
    step = WorkflowStep(0, "x", "sleep", "waiting", detail=detail)
    assert step_wait(step) == StepWait(None, None, None, ())
