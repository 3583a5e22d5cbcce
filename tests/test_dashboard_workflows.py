"""The dashboard's workflows, on both backends: the list of the App's workflows with what
each waits for, one workflow's timeline of steps (kinds, states, durations, waits,
children, results and errors), the child jobs listed by workflow, and the JSON of each;
hostile step names and results escaped, what child tasks redact hidden, and every bad
address a 4xx that says what is wrong. Workflows are driven by ``run_until_empty`` on a
test clock; one test opens the timeline in headless Chromium."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from markupsafe import escape
from starlette.testclient import TestClient

from sqljobs import App, Job, JobFailed, JobState, Retry, Workflow
from sqljobs.dashboard import create_app
from sqljobs.humanize import duration, iso_local, iso_utc
from sqljobs.testing import Clock

from .conftest import ROOT, child_pythonpath, wait_until
from .test_dashboard_browser import _answers, _chromium, _free_port

START = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
T0 = START.timestamp()
DAY = 86400.0
LOOPBACK = "http://127.0.0.1"
SECRET = "4111-1111-1111-1111"


def _client(app: App) -> TestClient:
    """A loopback client that carries its session's CSRF token."""
    client = TestClient(create_app(app), base_url=LOOPBACK, raise_server_exceptions=False)
    client.headers["X-CSRF-Token"] = client.get("/api/csrf").json()["csrf"]
    return client


def _rows(html: str, kind: str) -> dict[int, str]:
    """The table rows of a page by their ``data-KIND`` id, in the page's order."""
    return {
        int(i): row for i, row in re.findall(rf'<tr data-{kind}="(\d+)">(.*?)</tr>', html, re.S)
    }


def _at(ts: float) -> str:
    """How the pages write a moment: ``<time>`` in UTC for the script, local for people."""
    return f'<time datetime="{iso_utc(ts)}">{iso_local(ts)}</time>'


def _h1(html: str) -> str:
    found = re.search(r"<h1>(.*?)</h1>", html, re.S)
    assert found is not None
    return found[1]


def _state(app: App, job_id: int) -> JobState:
    return _job(app, job_id).state


def _job(app: App, job_id: int) -> Job:
    job = app.get_job(job_id)
    assert job is not None
    return job


def _children(app: App, workflow: int) -> list[int]:
    """The child job ids of ``workflow``, as its steps recorded them."""
    return [int(i) for s in app.workflow_history(workflow) for i in s.detail.get("children", [])]


# -- a fleet of workflows in every state -------------------------------------------------


@dataclass(frozen=True)
class Fleet:
    app: App
    clock: Clock
    fulfil: int  # sleeps a day, then waits for its approval, then runs and gathers children
    boxes: int  # waits for three children on a queue no drain serves
    nap: int  # sleeps an hour
    flaky: int  # a step that failed and tries again in ten minutes
    hopeless: int  # dead: its step failed twice
    quick: int  # done


def _ship(order: str) -> str:
    return f"label-{order}"


def _down() -> None:
    raise ConnectionError("warehouse down")


def _no() -> None:
    raise ValueError("no")


def _fleet(url: str) -> Fleet:
    clock = Clock(START)
    app = App(url, clock=clock)
    ship = app.task(name="ship")(_ship)
    pack = app.task(name="pack", queue="slow")(lambda item: item)

    @app.workflow
    def fulfil(wf: Workflow, order: str) -> dict[str, Any]:
        charged = wf.step("charge", lambda: 42)
        wf.sleep(timedelta(days=1))
        answer = wf.wait_for(f"approved:{order}", timeout=timedelta(days=7))
        label = wf.run(ship.s(order))
        sizes = wf.gather([ship.s(p) for p in ("a", "bb")])
        return {"charged": charged, "answer": answer, "label": label, "sizes": sizes}

    @app.workflow
    def boxes(wf: Workflow) -> list[Any]:
        return wf.gather([pack.s(i) for i in range(3)])

    @app.workflow
    def nap(wf: Workflow) -> None:
        wf.sleep(3600)

    @app.workflow
    def flaky(wf: Workflow) -> None:
        wf.step("call", _down, retry=Retry(max_attempts=3, base=600, cap=3600, jitter=False))

    @app.workflow(retry=Retry(max_attempts=1))
    def hopeless(wf: Workflow) -> None:
        wf.step("never", _no, retry=Retry(max_attempts=2, base=1, jitter=False))

    @app.workflow
    def quick(wf: Workflow) -> int:
        return int(wf.step("one", lambda: 1))

    ids = [w.enqueue(*a).id for w, a in ((fulfil, ["o-17"]), (boxes, []), (nap, []),
           (flaky, []), (hopeless, []), (quick, []))]  # fmt: skip
    app.run_until_empty(clock=clock, until=T0 + 60, queues=["default"])
    return Fleet(app, clock, *ids)


def test_the_workflows_page_lists_them_newest_first_with_what_each_waits_for(url: str) -> None:
    fleet = _fleet(url)
    app, client = fleet.app, _client(fleet.app)
    page = client.get("/workflows")
    assert page.status_code == 200 and _h1(page.text) == "Workflows"
    assert '<li><a href="/workflows" aria-current="page">Workflows</a></li>' in page.text
    rows = _rows(page.text, "workflow")
    everyone = [fleet.quick, fleet.hopeless, fleet.flaky, fleet.nap, fleet.boxes, fleet.fulfil]
    assert list(rows) == everyone, "newest first"
    for job_id, row in rows.items():
        assert f'<a href="/jobs/{job_id}">{job_id}</a>' in row, "the id links to its job"
        assert f'<a href="/workflows/{job_id}">timeline</a>' in row
        assert f'<a href="/jobs?workflow={job_id}">child jobs</a>' in row
    assert '<span class="state done">done</span>' in rows[fleet.quick]
    assert '<span class="state dead">dead</span>' in rows[fleet.hopeless]
    assert f"its time: {_at(T0 + DAY)}" in rows[fleet.fulfil]
    assert f"its time: {_at(T0 + 3600)}" in rows[fleet.nap]
    assert f"its time: {_at(T0 + 600)}" in rows[fleet.flaky]
    assert "3 child jobs to end" in rows[fleet.boxes]
    assert "its time" not in rows[fleet.quick] + rows[fleet.hopeless]

    waiting = _rows(client.get("/workflows", params={"state": "waiting"}).text, "workflow")
    assert list(waiting) == [fleet.flaky, fleet.nap, fleet.boxes, fleet.fulfil]
    dead = client.get("/workflows", params={"state": "dead"}).text
    assert list(_rows(dead, "workflow")) == [fleet.hopeless]
    assert '<option value="dead" selected>dead</option>' in dead
    assert "No workflows in state cancelled." in client.get("/workflows?state=cancelled").text

    listed = client.get("/api/workflows").json()
    assert [w["id"] for w in listed] == everyone
    by_id = {w["id"]: w for w in listed}
    assert by_id[fleet.fulfil] == {
        "id": fleet.fulfil, "task": "fulfil", "state": "waiting", "steps": 2,
        "wait_event": None, "wake_at": iso_utc(T0 + DAY), "waiting_on": 0,
        "created_at": iso_utc(_job(app, fleet.fulfil).created_at), "finished_at": None,
    }  # fmt: skip
    assert (by_id[fleet.boxes]["waiting_on"], by_id[fleet.boxes]["wake_at"]) == (3, None)
    assert by_id[fleet.quick]["finished_at"] == iso_utc(_job(app, fleet.quick).finished_at)
    limited = client.get("/api/workflows", params={"state": "waiting", "limit": "2"}).json()
    assert [w["id"] for w in limited] == [fleet.flaky, fleet.nap]
    assert [w.id for w in app.workflows()] == everyone, "the page agrees with the App"

    # a waiting workflow's event, in the list once its sleep is over
    fleet.clock.set(T0 + DAY)
    app.run_until_empty(clock=fleet.clock, until=T0 + DAY + 1, queues=["default"])
    row = _rows(client.get("/workflows").text, "workflow")[fleet.fulfil]
    assert f"event <code>approved:o-17</code> until {_at(T0 + 8 * DAY)}" in row


def test_without_workflows_the_navigation_leaves_them_out(app: App) -> None:
    app.task(name="plain")(lambda: None)
    client = _client(app)
    overview = client.get("/").text
    assert '<a href="/jobs"' in overview and '<a href="/workflows"' not in overview
    page = client.get("/workflows")
    assert page.status_code == 200
    assert "registers no workflow (@app.workflow)" in page.text
    assert client.get("/api/workflows").json() == []


def test_a_timeline_shows_each_step_its_wait_its_children_and_its_outcome(url: str) -> None:
    fleet = _fleet(url)
    app, clock, client, wid = fleet.app, fleet.clock, _client(fleet.app), fleet.fulfil
    page = client.get(f"/workflows/{wid}")
    assert page.status_code == 200 and _h1(page.text) == f"Workflow {wid}"
    assert "workflow sleeps until 2026-12-02T09:00:00+00:00" in page.text, "why it waits"
    steps = _rows(page.text, "step")
    assert list(steps) == [0, 1]
    assert "<td>step</td>" in steps[0] and '<td class="name">charge</td>' in steps[0]
    assert '<span class="state done">done</span>' in steps[0] and "<code>42</code>" in steps[0]
    assert "<td>sleep</td>" in steps[1] and '<span class="state waiting">' in steps[1]
    assert f"sleeps until {_at(T0 + DAY)}" in steps[1]
    assert f'<a href="/jobs/{wid}">job {wid}</a>' in page.text
    assert '<div id="live" data-refresh="5000">' in page.text, "a waiting one is watched"

    clock.set(T0 + DAY)
    app.run_until_empty(clock=clock, until=T0 + DAY + 1, queues=["default"])
    steps = _rows(client.get(f"/workflows/{wid}").text, "step")
    assert f"slept until {_at(T0 + DAY)}" in steps[1]
    # a step's times are as stored (on PostgreSQL partly the server's clock, not the test's)
    slept = app.workflow_history(wid)[1]
    assert slept.started_at is not None and slept.ended_at is not None
    took = max(0.0, slept.ended_at - slept.started_at)
    assert f'<td class="n">{duration(took)}</td>' in steps[1], "how long the sleep took"
    assert "<td>wait</td>" in steps[2] and '<td class="name">approved:o-17</td>' in steps[2]
    assert f"waits for event <code>approved:o-17</code> until {_at(T0 + 8 * DAY)}" in steps[2]
    body = client.get(f"/api/workflows/{wid}").json()
    assert body["job"]["id"] == wid and body["job"]["state"] == "waiting"
    assert body["reason"].startswith("workflow waits for event 'approved:o-17'")
    assert [(s["position"], s["kind"], s["state"]) for s in body["steps"]] == [
        (0, "step", "done"), (1, "sleep", "done"), (2, "wait", "waiting"),
    ]  # fmt: skip
    assert body["steps"][0]["value"] == 42 and body["steps"][0]["result"] == "42"
    assert body["steps"][1]["detail"] == {"wake_at": iso_utc(T0 + DAY)}
    assert body["steps"][1]["duration"] == pytest.approx(took)
    assert body["steps"][1]["started_at"] == iso_utc(slept.started_at)
    assert body["steps"][1]["ended_at"] == iso_utc(slept.ended_at)
    assert body["steps"][2]["detail"]["timeout_at"] == iso_utc(T0 + 8 * DAY)
    assert body["steps"][2]["duration"] is None and body["children"] == []

    event = app.emit("approved:o-17", {"by": "ada"})
    app.run_until_empty(clock=clock, queues=["default"])
    assert _state(app, wid) is JobState.DONE
    page = client.get(f"/workflows/{wid}")
    steps = _rows(page.text, "step")
    emitted = app.workflow_history(wid)[2].detail["emitted_at"]
    assert f"event {event}, emitted {_at(emitted)}" in steps[2]
    assert "<code>{&#34;by&#34;: &#34;ada&#34;}</code>" in steps[2]
    children = _children(app, wid)
    assert len(children) == 3
    assert "<td>run</td>" in steps[3] and "<td>gather</td>" in steps[4]
    for child, position in zip(children, (3, 4, 4), strict=True):
        link = f'<a href="/jobs/{child}">job {child}</a> <span class="state done">done</span>'
        assert link in steps[position]
    assert "label-o-17" in steps[3]
    assert '<span class="state done">done</span>' in page.text.split("<dl")[1].split("</dl>")[0]
    assert "<h2>Result</h2>" in page.text and "label-o-17" in page.text
    assert f'<a href="/jobs?workflow={wid}">3 child jobs</a>' in page.text
    body = client.get(f"/api/workflows/{wid}").json()
    assert body["children"] == children and body["reason"] is None
    assert body["steps"][2]["detail"]["event_id"] == event
    assert body["steps"][2]["value"] == {"by": "ada"}
    assert body["steps"][3]["detail"] == {"children": children[:1]}
    assert [c["state"] for c in body["steps"][4]["value"]] == ["done", "done"]

    # the job's page links to its timeline and its children; a child's to its workflow
    job_page = client.get(f"/jobs/{wid}").text
    assert f'<a href="/workflows/{wid}">its timeline</a> (5 steps checkpointed)' in job_page
    assert f'<a href="/jobs?workflow={wid}">its 3 child jobs</a>' in job_page
    child_page = client.get(f"/jobs/{children[1]}").text
    assert f'<a href="/workflows/{wid}">workflow {wid}</a>, at its step 4' in child_page


def test_a_timeline_shows_children_awaited_a_retry_due_and_a_step_that_failed(url: str) -> None:
    fleet = _fleet(url)
    client = _client(fleet.app)
    boxes = _rows(client.get(f"/workflows/{fleet.boxes}").text, "step")
    assert "<td>gather</td>" in boxes[0] and "waits for 3 child jobs" in boxes[0]
    for child in _children(fleet.app, fleet.boxes):
        assert f'<a href="/jobs/{child}">job {child}</a> <span class="state pending">' in boxes[0]

    flaky = _rows(client.get(f"/workflows/{fleet.flaky}").text, "step")
    assert f"failed 1 time; tries again at {_at(T0 + 600)}" in flaky[0]
    assert "ConnectionError: warehouse down" in flaky[0]

    page = client.get(f"/workflows/{fleet.hopeless}").text
    never = _rows(page, "step")[0]
    assert '<span class="state failed">failed</span>' in never
    assert '<span class="error">ValueError: no</span>' in never
    assert '<span class="state dead">dead</span>' in page and "<h2>Last error</h2>" in page
    assert "step &#39;never&#39; failed 2 time(s)" in page
    body = client.get(f"/api/workflows/{fleet.hopeless}").json()
    assert body["job"]["state"] == "dead"
    assert (body["steps"][0]["state"], body["steps"][0]["error"]) == ("failed", "ValueError: no")
    assert body["steps"][0]["detail"] == {"failures": 2}

    quick = client.get(f"/workflows/{fleet.quick}").text
    assert "<dt>child jobs</dt><dd>none</dd>" in quick


def test_a_workflow_s_child_jobs_are_listed_by_workflow(url: str) -> None:
    fleet = _fleet(url)
    client, wid = _client(fleet.app), fleet.boxes
    children = _children(fleet.app, wid)
    page = client.get("/jobs", params={"workflow": str(wid)})
    assert page.status_code == 200
    assert list(_rows(page.text, "job")) == sorted(children, reverse=True)
    assert f'<input type="hidden" name="workflow" value="{wid}">' in page.text, "kept by Filter"
    assert f'The child jobs of <a href="/workflows/{wid}">workflow {wid}</a>' in page.text
    assert "<b>3</b> jobs match this filter." in page.text
    for child in children:  # "all matching" acts on exactly these
        assert f'<input type="hidden" name="ids" value="{child}">' in page.text
    pending = client.get("/jobs", params={"workflow": str(wid), "state": "pending"})
    assert list(_rows(pending.text, "job")) == sorted(children, reverse=True)
    done = client.get("/jobs", params={"workflow": str(wid), "state": "done"})
    assert _rows(done.text, "job") == {} and "<b>0</b> jobs match" in done.text
    none = client.get("/jobs", params={"workflow": str(fleet.nap)})
    assert _rows(none.text, "job") == {}, "a workflow without children lists none"

    listed = client.get("/api/jobs", params={"workflow": str(wid)}).json()
    assert [j["id"] for j in listed] == sorted(children, reverse=True)
    assert {j["key"].rsplit(":", 1)[0] for j in listed} == {f"wf:{wid}:0:{i}" for i in range(3)}
    paged = client.get("/api/jobs", params={"workflow": str(wid), "limit": "2"})
    assert f"workflow={wid}" in paged.headers["link"], "the next page keeps the workflow"

    cancelled = client.post("/api/jobs/cancel", params={"ids": ",".join(map(str, children))})
    assert cancelled.json() == {"ok": True, "cancelled": 3}
    fleet.app.run_until_empty(clock=fleet.clock, until=fleet.clock() + 1, queues=["default"])
    row = _rows(client.get(f"/workflows/{wid}").text, "step")[0]
    assert row.count('<span class="state cancelled">cancelled</span>') == 3
    assert '<span class="state failed">failed</span>' in row


HOSTILE_NAME = '<script>alert("step")</script>'
HOSTILE_RESULT = "<img src=x onerror=alert(1)>"
HOSTILE_EVENT = "</code><svg onload=alert(2)>"
HOSTILE_ERROR = "<b onmouseover=alert(3)>boom</b>"


def test_hostile_step_names_results_events_and_errors_are_escaped(url: str) -> None:
    clock = Clock(START)
    app = App(url, clock=clock)

    @app.task(name="broken", retry=Retry(max_attempts=1))
    def broken() -> None:
        raise RuntimeError(HOSTILE_ERROR)

    @app.workflow
    def evil(wf: Workflow) -> None:
        wf.step(HOSTILE_NAME, lambda: {"html": HOSTILE_RESULT})
        with contextlib.suppress(JobFailed):
            wf.run(broken.s())
        wf.wait_for(HOSTILE_EVENT)

    wid = evil.enqueue().id
    app.run_until_empty(clock=clock, until=T0 + 60)
    client = _client(app)
    for path in ("/workflows", f"/workflows/{wid}", f"/jobs/{wid}"):
        html = client.get(path).text
        for hostile in (HOSTILE_NAME, HOSTILE_RESULT, HOSTILE_EVENT, HOSTILE_ERROR):
            assert hostile not in html, f"{path} shows {hostile!r} unescaped"
    timeline = client.get(f"/workflows/{wid}").text
    assert f'<td class="name">{escape(HOSTILE_NAME)}</td>' in timeline
    assert str(escape(HOSTILE_RESULT)) in timeline
    assert f"waits for event <code>{escape(HOSTILE_EVENT)}</code>" in timeline
    assert str(escape(HOSTILE_ERROR)) in timeline, "the child's error, in the run's result"
    listed = client.get("/workflows").text
    assert f"event <code>{escape(HOSTILE_EVENT)}</code>" in listed
    body = client.get(f"/api/workflows/{wid}").json()
    assert body["steps"][0]["name"] == HOSTILE_NAME, "JSON carries the text as it is"
    assert body["steps"][0]["value"] == {"html": HOSTILE_RESULT}
    assert HOSTILE_ERROR in body["steps"][1]["value"][0]["error"]


def test_what_a_child_s_task_redacts_is_hidden_in_the_workflow_s_timeline(url: str) -> None:
    clock = Clock(START)
    app = App(url, clock=clock)

    @app.task(name="charge", redact=["card"], retry=Retry(max_attempts=1))
    def charge(customer: str, card: str) -> None:
        raise ValueError(f"card {card} declined for {customer}")

    @app.workflow
    def checkout(wf: Workflow, customer: str, card: str) -> str:
        try:
            wf.run(charge.s(customer, card))
        except JobFailed:
            return "declined"
        return "paid"

    wid = checkout.enqueue("acme", SECRET).id
    app.run_until_empty(clock=clock)
    assert _state(app, wid) is JobState.DONE
    assert SECRET in (app.workflow_history(wid)[0].result or ""), "stored as it was"
    client = _client(app)
    page = client.get(f"/workflows/{wid}").text
    assert SECRET not in page
    run = _rows(page, "step")[0]
    assert SECRET not in run and "card *** declined for acme" in run
    body = client.get(f"/api/workflows/{wid}").json()
    assert body["steps"][0]["value"][0]["error"].endswith("ValueError: card *** declined for acme")
    assert SECRET not in body["steps"][0]["result"]


BAD_ADDRESSES = [
    ("/workflows", {"state": "sleeping"}, 400, "state must be one of pending, waiting"),
    ("/workflows", {"page": "2"}, 400, "unknown parameter &#39;page&#39;: /workflows takes state"),
    ("/workflows/abc", {}, 400, "a job id is a whole number"),
    ("/workflows/999999", {}, 404, "no job with id 999999"),
    ("/jobs", {"workflow": "x"}, 400, "workflow must be a workflow&#39;s job id"),
    ("/jobs", {"workflow": "999999"}, 400, "but no job with id 999999"),
]


@pytest.mark.parametrize(("path", "params", "status", "says"), BAD_ADDRESSES)
def test_a_bad_address_is_a_page_that_says_what_is_wrong(
    app: App, path: str, params: dict[str, str], status: int, says: str
) -> None:
    app.workflow(_one_step)
    answer = _client(app).get(path, params=params)
    assert answer.status_code == status, answer.text
    assert says in answer.text and 'role="alert"' in answer.text
    assert _h1(answer.text) == ("Bad address" if status == 400 else "Not found")


def _one_step(wf: Workflow) -> int:
    return int(wf.step("one", lambda: 1))


BAD_REQUESTS = [
    ("/api/workflows", {"state": "sleeping"}, 400, "state must be one of pending, waiting"),
    ("/api/workflows", {"limit": "0"}, 400, "limit must be a whole number from 1 to 1000"),
    ("/api/workflows", {"stat": "dead"}, 400, "unknown parameter 'stat': /api/workflows"),
    ("/api/workflows/abc", {}, 400, "a job id is a whole number"),
    ("/api/workflows/1", {"x": "1"}, 400, "unknown parameter 'x': /api/workflows/ID"),
    ("/api/workflows/999999", {}, 404, "no job with id 999999"),
    ("/api/jobs", {"workflow": "-1"}, 400, "workflow must be a workflow's job id"),
    ("/api/jobs", {"workflow": "999999"}, 400, "but no job with id 999999"),
]


@pytest.mark.parametrize(("path", "params", "status", "says"), BAD_REQUESTS)
def test_a_bad_request_is_json_that_says_what_is_wrong(
    app: App, path: str, params: dict[str, str], status: int, says: str
) -> None:
    app.workflow(_one_step)
    answer = _client(app).get(path, params=params)
    assert answer.status_code == status, answer.text
    assert says in answer.json()["error"]


def test_a_job_that_is_no_workflow_is_a_404_that_says_so(url: str) -> None:
    clock = Clock(START)
    app = App(url, clock=clock)
    app.task(name="plain")(lambda: None)
    one = app.workflow(_one_step)
    plain = app.enqueue("plain").id
    flow = one.enqueue().id
    stranger = app.enqueue("unknown_task", known=False).id
    app.run_until_empty(clock=clock)
    client = _client(app)
    page = client.get(f"/workflows/{plain}")
    assert page.status_code == 404 and _h1(page.text) == "Not found"
    says = f"job {plain} is not a workflow: its task &#39;plain&#39; is a plain task"
    assert says in page.text and f'<a href="/jobs/{plain}">back</a>' in page.text
    api = client.get(f"/api/workflows/{plain}")
    assert api.status_code == 404
    assert api.json() == {
        "error": f"job {plain} is not a workflow: its task 'plain' is a plain task "
        "(@app.task), not a workflow"
    }
    listed = client.get("/jobs", params={"workflow": str(plain)})
    assert listed.status_code == 400 and f"job {plain} is not a workflow" in listed.text
    assert "/workflows/" not in client.get(f"/jobs/{plain}").text, "a plain job: no timeline"

    # a dashboard whose App does not register the workflow still shows its timeline
    bare = _client(App(url))
    timeline = bare.get(f"/workflows/{flow}")
    assert timeline.status_code == 200 and '<td class="name">one</td>' in timeline.text
    assert "(not registered in this dashboard's app)" in timeline.text
    assert bare.get(f"/api/workflows/{flow}").json()["steps"][0]["value"] == 1
    unknown = bare.get(f"/api/workflows/{stranger}")
    why = "is not registered in this dashboard's app and it has no checkpointed steps"
    assert unknown.status_code == 404 and why in unknown.json()["error"]


# -- in a real browser ---------------------------------------------------------------------

FLOWS_TASKS = '''"""The browser test's workflow: it charges, sleeps, and runs a child."""
from datetime import timedelta

import sqljobs


def define(app):
    ship = app.task(name="ship", queue="slow")(lambda order: f"label-{order}")

    @app.workflow
    def fulfil(wf: sqljobs.Workflow, order: str) -> str:
        wf.step("charge", lambda: 42)
        wf.sleep(timedelta(hours=1))
        return wf.run(ship.s(order))

    return fulfil
'''
FLOWS_APP = "import sqljobs\nfrom flows_tasks import define\n\napp = sqljobs.App()\ndefine(app)\n"


@contextlib.contextmanager
def _dashboard(url: str, folder: Path) -> Iterator[str]:
    """``sqljobs dashboard --app flows_app:app`` in its own process; its base URL."""
    port = _free_port()
    pythonpath = os.pathsep.join((str(folder), child_pythonpath()))
    env = dict(os.environ, SQLJOBS_URL=url, PYTHONPATH=pythonpath)
    log = folder / "dashboard.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "sqljobs", "--app", "flows_app:app", "dashboard",
             "--port", str(port)],
            env=env, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: _answers(f"{base}/api/stats"), what="the dashboard to answer")
        yield base
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=10)
        print(f"--- dashboard.log\n{log.read_text(errors='replace')[-3000:]}")


@pytest.mark.browser
@pytest.mark.parametrize("url", ["sqlite"], indirect=True)  # the browser's side only
def test_an_operator_opens_a_workflow_s_timeline_in_a_browser(url: str, tmp_path: Path) -> None:
    sync_api = pytest.importorskip("playwright.sync_api")
    executable = _chromium()
    (tmp_path / "flows_tasks.py").write_text(FLOWS_TASKS)
    (tmp_path / "flows_app.py").write_text(FLOWS_APP)
    spec = importlib.util.spec_from_file_location("flows_tasks", tmp_path / "flows_tasks.py")
    assert spec is not None and spec.loader is not None
    tasks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tasks)
    clock = Clock(START)
    app = App(url, clock=clock)
    fulfil = tasks.define(app)
    wid = fulfil.enqueue("o-17").id
    app.run_until_empty(clock=clock, until=T0 + 3601, queues=["default"])
    assert _state(app, wid) is JobState.WAITING  # on its child, which no drain serves

    with _dashboard(url, tmp_path) as base, sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.set_default_timeout(10_000)
            page.goto(base + "/")
            page.get_by_role("link", name="Workflows", exact=True).click()
            page.wait_for_url("**/workflows")
            row = page.locator(f'tr[data-workflow="{wid}"]')
            assert "waiting" in row.inner_text() and "1 child job to end" in row.inner_text()
            row.get_by_role("link", name="timeline").click()
            page.wait_for_url(f"**/workflows/{wid}")
            assert page.get_by_role("heading", name=f"Workflow {wid}", level=1).is_visible()
            timeline = page.locator("table.timeline")
            assert timeline.is_visible()
            rows = timeline.locator("tbody tr")
            assert rows.count() == 3
            assert "charge" in rows.nth(0).inner_text() and "42" in rows.nth(0).inner_text()
            assert "slept until" in rows.nth(1).inner_text()
            assert "waits for 1 child job" in rows.nth(2).inner_text()
            child = _children(app, wid)[0]
            rows.nth(2).get_by_role("link", name=f"job {child}").click()
            page.wait_for_url(f"**/jobs/{child}")
            assert page.get_by_role("link", name=f"workflow {wid}").is_visible()
        finally:
            browser.close()
