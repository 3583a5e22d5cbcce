"""The dashboard's pages: overview, jobs (filters, keyset pages, bulk actions), a job,
queues, schedules and workers, on both backends. Every page renders with real jobs,
hides what tasks redact, offers only the actions the server takes (none when read-only),
and every action needs the CSRF token, is logged and comes back to the page it came from
with its sentence."""

from __future__ import annotations

import logging
import re
import threading
import time
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx2
import pytest
from markupsafe import escape
from starlette.testclient import TestClient

from sqljobs import App, ConfigurationError, JobContext, JobState, Retry
from sqljobs.dashboard import create_app
from sqljobs.dashboard.charts import bars
from sqljobs.rollup import INF, MetricAmount, Series, minute_of
from sqljobs.testing import Clock, stepped_worker

LOOPBACK = "http://127.0.0.1"
READ_ONLY = "read-only: this dashboard was started with --read-only"
SECRET = "4111-1111"


def _client(app: App, **options: Any) -> TestClient:
    """A loopback client that knows its session's CSRF token (in ``client.csrf``)."""
    client = TestClient(create_app(app, **options), base_url=LOOPBACK)
    client.headers["X-CSRF-Token"] = client.get("/api/csrf").json()["csrf"]
    return client


def _post_form(client: TestClient, path: str, **fields: Any) -> httpx2.Response:
    """Post as a page's form does: form-encoded with its CSRF field; not following the
    redirect."""
    data = {"csrf": client.headers["X-CSRF-Token"], **fields}
    return client.post(path, data=data, follow_redirects=False)


def _flash(response: httpx2.Response) -> tuple[str, dict[str, list[str]]]:
    """Where a form's 303 goes back to, and the sentence it carries."""
    assert response.status_code == 303, response.text
    parts = urlsplit(response.headers["location"])
    query = parse_qs(parts.query)
    assert query.pop("sig"), "a flash message is signed"
    return parts.path, query


def _row_ids(html: str) -> list[int]:
    return [int(i) for i in re.findall(r'<tr data-job="(\d+)">', html)]


def _state(app: App, job_id: int) -> JobState:
    job = app.get_job(job_id)
    assert job is not None
    return job.state


def _h1(html: str) -> str:
    found = re.search(r"<h1>(.*?)</h1>", html, re.S)
    assert found is not None
    return found[1]


def test_every_page_renders_real_jobs_and_hides_what_tasks_redact(app: App) -> None:
    release, started = threading.Event(), threading.Event()

    @app.task(queue="pay", redact=["card"])
    def charge(ctx: JobContext, customer: str, card: str) -> None:
        ctx.progress(1, total=4, note="authorising")
        started.set()
        release.wait(10)

    @app.task(redact=["card"], retry=Retry(max_attempts=1))
    def boom(card: str) -> None:
        raise RuntimeError("boom <b>")

    app.schedule("nightly:acme", cron="0 3 * * 1-5", task="charge", tz="Europe/Berlin",
                 kwargs={"customer": "acme", "card": SECRET})  # fmt: skip
    dead = boom.enqueue(SECRET).id
    running = charge.enqueue("acme", SECRET).id
    client = _client(app)
    with stepped_worker(app, concurrency=2) as worker:
        worker.until(lambda: _state(app, dead) is JobState.DEAD, what="the dead job")
        worker.until(started.is_set, what="the running job's handler")
        try:
            pages = {path: client.get(path) for path in ("/", "/jobs", "/queues", "/schedules",
                     "/workers", f"/jobs/{dead}", f"/jobs/{running}")}  # fmt: skip
            apis = {path: client.get(path) for path in ("/api/workers", "/api/schedules",
                    "/api/jobs", f"/api/jobs/{running}")}  # fmt: skip
        finally:
            release.set()
    for path, answer in {**pages, **apis}.items():
        assert answer.status_code == 200, (path, answer.text)
        assert SECRET not in answer.text, f"{path} shows a redacted argument"
    titles = {path: _h1(answer.text) for path, answer in pages.items()}
    assert titles == {
        "/": "Overview",
        "/jobs": "Jobs",
        "/queues": "Queues",
        "/schedules": "Schedules",
        "/workers": "Workers",
        f"/jobs/{dead}": f"Job {dead}",
        f"/jobs/{running}": f"Job {running}",
    }
    for path, answer in pages.items():
        html = answer.text
        assert '<div id="live" data-refresh="5000"' in html, path
        assert '<nav aria-label="Main">' in html and '<a href="/workers"' in html, path
        assert '<link rel="stylesheet" href="/static/dashboard.css">' in html, path

    overview = pages["/"].text
    assert "<caption>Queues</caption>" in overview and '<tr data-queue="pay">' in overview
    assert "<caption>Live workers</caption>" in overview and worker.id in overview
    assert f'<tr data-job="{running}">' in overview.split("<h2>Running jobs</h2>")[1]
    assert f'<tr data-job="{dead}">' in overview.split("<h2>Dead jobs</h2>")[1]
    assert '<progress value="1" max="4"></progress> 1/4 (25%) authorising' in overview

    detail = pages[f"/jobs/{dead}"].text
    traceback = re.search(r'<pre class="traceback">(.*?)</pre>', detail, re.S)
    assert traceback is not None and "RuntimeError: boom &lt;b&gt;" in traceback[1]
    assert "<caption>Attempts</caption>" in detail and ">failed</td>" in detail
    assert '<pre class="arguments">' in detail and "&#34;***&#34;" in detail
    assert f'action="/api/jobs/{dead}/retry"' in detail and ">Delete</button>" in detail
    assert ">Cancel</button>" not in detail, "a dead job cannot be cancelled"
    assert ">Cancel</button>" in pages[f"/jobs/{running}"].text

    workers = pages["/workers"].text
    assert f'id="worker-{worker.id}"' in workers and f"pid {worker_pid(apis)}" in workers
    assert f'<tr data-job="{running}">' in workers, "what it runs right now"
    (listed,) = apis["/api/workers"].json()
    assert listed["id"] == worker.id and [j["id"] for j in listed["running"]] == [running]
    assert listed["running"][0]["args"] == ["acme", "***"]
    assert listed["started_at"].endswith("+00:00")

    schedules = pages["/schedules"].text
    assert "At 03:00 on Monday through Friday" in schedules, "the timing in words"
    assert "<code>0 3 * * 1-5</code>" in schedules and "Europe/Berlin" in schedules
    assert 'action="/api/schedules/nightly%3Aacme/pause"' in schedules
    assert ">Run now</button>" in schedules
    (schedule,) = apis["/api/schedules"].json()
    assert schedule["kwargs"] == {"customer": "acme", "card": "***"}
    assert schedule["in_words"] == "At 03:00 on Monday through Friday"


def worker_pid(apis: dict[str, httpx2.Response]) -> int:
    return int(apis["/api/workers"].json()[0]["pid"])


def _seed(app: App) -> dict[str, list[int]]:
    """Jobs to filter: three on mail (one with a key), two on reports, created in that
    order; nothing runs them."""
    app.task(name="send", queue="mail")(lambda to: None)
    app.task(name="report", queue="reports")(lambda tenant: None)
    mail = [app.enqueue("send", [f"user{n}@example.com"]).id for n in range(2)]
    mail.append(app.tasks["send"].with_options(key="welcome:ann").enqueue("ann@example.com").id)
    reports = [app.enqueue("report", [tenant]).id for tenant in ("acme", "globex")]
    return {"mail": mail, "reports": reports}


def test_filters_narrow_the_jobs_page_and_the_json(app: App) -> None:
    jobs = _seed(app)
    mail, reports = jobs["mail"], jobs["reports"]
    app.cancel(mail[0])
    client = _client(app)
    cases: list[tuple[dict[str, str], list[int]]] = [
        ({}, [*reports[::-1], *mail[::-1]]),
        ({"queue": "mail"}, mail[::-1]),
        ({"task": "report"}, reports[::-1]),
        ({"key": "welcome:ann"}, [mail[2]]),
        ({"text": "GLOBEX"}, [reports[1]]),
        ({"state": "cancelled"}, [mail[0]]),
        ({"state": "pending", "queue": "mail"}, mail[:0:-1]),
        ({"since": "1h"}, [*reports[::-1], *mail[::-1]]),
        ({"until": "1h"}, []),
        ({"queue": "mail", "task": "", "key": ""}, mail[::-1]),  # a form's empty fields
    ]
    for params, expected in cases:
        html = client.get("/jobs", params=params).text
        assert _row_ids(html) == expected, params
        n = len(expected)
        assert f"<b>{n}</b> job{'' if n == 1 else 's'} match" in html, params
        shown = {k: v for k, v in params.items() if v}
        if expected and shown and "text" not in shown:
            api = client.get("/api/jobs", params=shown).json()
            assert [j["id"] for j in api] == expected, params
    form = client.get("/jobs", params={"queue": "mail", "state": "pending"}).text
    assert '<label>Queue <input name="queue" value="mail"' in form, "the form keeps the filter"
    assert '<option value="pending" selected>' in form
    for name in ("state", "queue", "task", "key", "text", "since", "until"):
        assert re.search(rf'<label>[^<]+<(input|select) name="{name}"', form), name


def test_keyset_pages_go_on_without_repeating_a_job(app: App) -> None:
    app.task(name="t")(lambda n: None)
    ids = [h.id for h in app.tasks["t"].enqueue_many([(n,) for n in range(120)])]
    client = _client(app)
    seen: list[int] = []
    url: str | None = "/jobs"
    pages = 0
    while url is not None:
        html = client.get(url).text
        seen += _row_ids(html)
        pages += 1
        older = re.search(r'<a href="([^"]+)" rel="next">Older</a>', html)
        url = older[1].replace("&amp;", "&") if older else None
        if pages > 1:
            assert '<a href="/jobs">Newest</a>' in html
    assert pages == 3 and seen == sorted(ids, reverse=True), "every job once, newest first"

    first = client.get("/api/jobs", params={"limit": "100"})
    link = re.fullmatch(r"</api/jobs\?limit=100&before=(\d+)>; rel=\"next\"", first.headers["link"])
    assert link is not None
    rest = client.get("/api/jobs", params={"limit": "100", "before": link[1]})
    together = [j["id"] for j in first.json()] + [j["id"] for j in rest.json()]
    assert together == sorted(ids, reverse=True) and "link" not in rest.headers


def test_bulk_actions_change_exactly_the_chosen_jobs_and_say_how_many(
    app: App, caplog: pytest.LogCaptureFixture
) -> None:
    jobs = _seed(app)
    mail, reports = jobs["mail"], jobs["reports"]
    client = _client(app)
    html = client.get("/jobs").text
    assert '<form id="bulk" class="bulk" method="get" action="/jobs/confirm">' in html
    assert f'<input type="checkbox" name="ids" value="{mail[0]}" form="bulk"' in html

    # a selection: the confirmation states the count, then the form does it
    asked = client.get("/jobs/confirm", params={"action": "cancel", "ids": [mail[0], reports[0]],
                       "back": "/jobs?queue=mail"})  # fmt: skip
    assert _h1(asked.text) == "Cancel 2 jobs?"
    assert ">Cancel 2 jobs</button>" in asked.text
    fields = re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)">', asked.text)
    assert ("ids", str(mail[0])) in fields and ("back", "/jobs?queue=mail") in fields
    with caplog.at_level(logging.INFO, logger="sqljobs.dashboard"):
        done = _post_form(client, "/api/jobs/cancel", ids=[mail[0], reports[0]],
                          back="/jobs?queue=mail")  # fmt: skip
    path, flash = _flash(done)
    assert (path, flash["queue"]) == ("/jobs", ["mail"]), "back to the page it came from"
    assert flash["message"] == ["2 job(s) cancelled (ids=2 selected)"]
    assert [_state(app, i) for i in (mail[0], reports[0])] == [JobState.CANCELLED] * 2
    assert _state(app, mail[1]) is JobState.PENDING and _state(app, reports[1]) is JobState.PENDING
    (record,) = [r for r in caplog.records if r.name == "sqljobs.dashboard"]
    assert record.action == "cancel jobs" and record.jobs == 2  # type: ignore[attr-defined]

    # every match of a filter, and only the states the action acts on
    matching = client.get("/jobs", params={"queue": "mail"}).text
    assert "<span>All 3 matching:</span>" in matching
    assert ">Retry all matching</button>" in matching
    asked = client.get("/jobs/confirm", params={"action": "retry", "queue": "mail"})
    assert _h1(asked.text) == "Retry 1 job?", "only the cancelled one can be retried"
    retried = client.post("/api/jobs/retry", params={"queue": "mail", "state": "cancelled"})
    assert retried.json() == {"ok": True, "retried": 1}
    assert _state(app, mail[0]) is JobState.PENDING
    assert _h1(client.get("/jobs/confirm?action=delete&queue=mail").text) == "Delete 0 jobs?"
    by_task = client.get("/jobs/confirm", params={"action": "cancel", "task": "send"}).text
    assert _h1(by_task) == "Cancel 3 jobs?", "counted by the facade, state by state"
    assert "Nothing to delete" in client.get("/jobs/confirm?action=delete&queue=mail").text
    cancelled = client.post("/api/jobs/cancel", params={"task": "send", "text": "user1"})
    assert cancelled.json() == {"ok": True, "cancelled": 1}
    deleted = _post_form(client, "/api/jobs/delete", queue="mail", state="", back="/jobs")
    assert _flash(deleted)[1]["message"] == ["1 job(s) deleted (queue=mail)"]
    assert app.get_job(mail[1]) is None and app.get_job(mail[0]) is not None

    # refusals: no CSRF token, no filter at all, a bad field
    forged = client.post("/api/jobs/cancel", params={"queue": "reports"},
                         headers={"X-CSRF-Token": "forged"})  # fmt: skip
    assert forged.status_code == 403 and _state(app, reports[1]) is JobState.PENDING
    unfiltered = client.post("/api/jobs/cancel")
    assert (
        unfiltered.status_code == 400
        and "needs ids (a selection) or a filter" in (unfiltered.json()["error"])
    )
    nothing = client.get("/jobs/confirm", params={"action": "cancel"})
    assert nothing.status_code == 400 and "tick the boxes" in nothing.text
    bad = client.post("/api/jobs/cancel", params={"ids": "1,x"})
    assert bad.status_code == 400 and "a job id is a whole number" in bad.json()["error"]
    assert _state(app, reports[1]) is JobState.PENDING


def test_a_job_page_deletes_and_shows_parents_and_children(
    app: App, caplog: pytest.LogCaptureFixture
) -> None:
    app.task(name="t")(lambda: None)
    parent = app.enqueue("t").id
    child = app.tasks["t"].with_options(after=[parent]).enqueue().id
    client = _client(app)
    html = client.get(f"/jobs/{parent}").text
    assert f'<dt>children</dt><dd><a href="/jobs/{child}">{child}</a></dd>' in html
    child_page = client.get(f"/jobs/{child}").text
    assert f'<dt>after</dt><dd><a href="/jobs/{parent}">{parent}</a>' in child_page
    assert "waiting for 1 parent to end" in child_page
    assert ">Delete</button>" not in html, "a pending job cannot be deleted"

    refused = _post_form(client, f"/api/jobs/{parent}/delete", back=f"/jobs/{parent}")
    path, flash = _flash(refused)
    assert path == f"/jobs/{parent}" and "only a done, dead or cancelled job" in flash["error"][0]
    assert client.post(f"/api/jobs/{parent}/delete").status_code == 409
    app.cancel(child)
    assert 'data-confirm="Delete job' in client.get(f"/jobs/{child}").text
    with caplog.at_level(logging.INFO, logger="sqljobs.dashboard"):
        gone = _post_form(client, f"/api/jobs/{child}/delete", back=f"/jobs/{child}")
    (record,) = [r for r in caplog.records if r.name == "sqljobs.dashboard"]
    assert record.action == f"delete job {child}" and record.jobs == 1  # type: ignore[attr-defined]
    assert _flash(gone) == ("/jobs", {"message": [f"job {child} deleted"]}), "its page is gone"
    assert app.get_job(child) is None
    missing = client.get(f"/jobs/{child}")
    assert missing.status_code == 404 and f"no job with id {child}" in missing.text
    assert _h1(missing.text) == "Not found"
    assert client.post(f"/api/jobs/{child}/delete").json() == {
        "ok": False,
        "error": f"no job with id {child}",
    }


def test_schedules_are_paused_resumed_and_run_now(app: App) -> None:
    app.task(name="report")(lambda tenant: None)
    app.schedule("daily/acme", every=3600, task="report", kwargs={"tenant": "acme"},
                 overlap="skip")  # fmt: skip
    client = _client(app)
    base = "/api/schedules/daily%2Facme"
    assert f'action="{base}/pause"' in client.get("/schedules").text
    paused = _post_form(client, f"{base}/pause", back="/schedules")
    assert _flash(paused) == (
        "/schedules",
        {"message": ["schedule daily/acme paused: it enqueues no run until resumed"]},
    )
    state = app.get_schedule("daily/acme")
    assert state is not None and state.paused
    html = client.get("/schedules").text
    assert f'action="{base}/resume"' in html and f'action="{base}/pause"' not in html
    again = client.post(f"{base}/pause").json()
    assert again == {"ok": True, "note": "already paused"}
    assert client.post(f"{base}/resume").json() == {"ok": True}
    ran = client.post(f"{base}/run").json()
    assert ran["ok"] is True and ran["created"] is True
    job = app.get_job(ran["job_id"])
    assert job is not None and job.kwargs == {"tenant": "acme"}
    skipped = client.post(f"{base}/run").json()
    assert skipped == {"ok": True, "job_id": ran["job_id"], "created": False}, "overlap skip"
    missing = client.post("/api/schedules/nope/run")
    assert missing.status_code == 404 and missing.json()["error"] == "no schedule named 'nope'"
    listed = client.get("/api/schedules").json()
    assert [s["name"] for s in listed] == ["daily/acme"]
    assert listed[0]["in_words"] == "every 1 h 0 min" and listed[0]["paused"] is False


def test_read_only_pages_offer_no_action_and_every_new_action_is_refused(app: App) -> None:
    jobs = _seed(app)
    app.cancel(jobs["mail"][0])
    app.schedule("hourly", every=3600, task="report", kwargs={"tenant": "acme"})
    client = _client(app, read_only=True)
    for path in ("/", "/jobs", "/queues", "/schedules", "/workers", f"/jobs/{jobs['mail'][0]}",
                 "/jobs/confirm?action=delete&queue=mail"):  # fmt: skip
        html = client.get(path).text
        assert 'method="post"' not in html and READ_ONLY in html, path
        buttons = re.findall(r"<button[^>]*>([^<]*)</button>", html)
        assert buttons in ([], ["Filter"]), (path, buttons)
    assert _row_ids(client.get("/jobs").text), "the jobs are still listed"
    for path, params in (
        ("/api/jobs/cancel", {"queue": "mail"}),
        ("/api/jobs/retry", {"queue": "mail"}),
        ("/api/jobs/delete", {"queue": "mail"}),
        (f"/api/jobs/{jobs['mail'][0]}/delete", {}),
        ("/api/schedules/hourly/pause", {}),
        ("/api/schedules/hourly/run", {}),
    ):
        refused = client.post(path, params=params)
        assert refused.status_code == 403 and READ_ONLY in refused.json()["error"], path
    assert _state(app, jobs["mail"][0]) is JobState.CANCELLED
    assert _state(app, jobs["mail"][1]) is JobState.PENDING
    state = app.get_schedule("hourly")
    assert state is not None and not state.paused and state.last_job_id is None


def test_bad_page_parameters_say_what_is_wrong(app: App) -> None:
    client = _client(app)
    cases = [
        ("/jobs", {"state": "bogus"}, "state must be one of pending"),
        ("/jobs", {"since": "yesterday"}, "since must be a time: &#39;1h&#39;"),
        ("/jobs", {"since": "1h", "until": "2h"}, "since must come before until"),
        ("/jobs", {"before": "-3"}, "a job id is a whole number"),
        ("/jobs", {"page": "2"}, "unknown parameter &#39;page&#39;: /jobs takes state"),
        ("/jobs", {"text": "x" * 201}, "search for at most 200"),
        ("/jobs/confirm", {"action": "nuke", "queue": "mail"}, "action must be one of retry"),
        ("/queues", {"queue": "mail"}, "/queues takes no"),
    ]
    for path, params, says in cases:
        answer = client.get(path, params=params)
        assert answer.status_code == 400, (path, params)
        assert says in answer.text and 'role="alert"' in answer.text, (path, params)
        way_back = "/jobs" if path == "/jobs/confirm" else path
        assert _h1(answer.text) == "Bad address" and f'<a href="{way_back}">back</a>' in answer.text
    api = client.get("/api/jobs", params={"until": "soon"})
    assert api.status_code == 400 and "until must be a time" in api.json()["error"]
    assert client.get("/jobs/abc").status_code == 400


def test_the_overview_colours_the_oldest_due_age_against_its_threshold(url: str) -> None:
    clock = Clock()
    app = App(url, clock=clock)
    app.task(name="t")(lambda: None)
    app.enqueue("t")
    clock.advance(0.5)  # the job waits half a second, on the App's clock
    assert (app.stats().oldest_pending_age or 0) > 0.05
    alarmed = _client(app, alert_age=0.01).get("/").text
    assert re.search(r'<b class="alert" title="alert above 10 ms">\d', alarmed)
    calm = _client(app).get("/").text
    assert '<b class="ok" title="alert above 1 min 0 s">' in calm
    for bad in (0, -1, float("nan"), True, "60"):
        with pytest.raises(ConfigurationError, match="alert_age must be seconds > 0"):
            create_app(app, alert_age=bad)  # type: ignore[arg-type]


def test_forms_return_only_to_this_dashboard_and_the_page_is_locked_down(app: App) -> None:
    app.enqueue("send", queue="mail", known=False)
    client = _client(app)
    for back in ("//evil.example/", "https://evil.example/", "\\\\evil", "jobs"):
        path, _ = _flash(_post_form(client, "/api/queues/mail/pause", back=back))
        assert path == "/", back
    policy = client.get("/").headers["content-security-policy"]
    assert "script-src 'self'" in policy and "frame-ancestors 'none'" in policy
    assert "<script>" not in client.get("/").text, "no inline script under that policy"
    guarded = TestClient(create_app(app, token="s3cret"), base_url=LOOPBACK)
    assert guarded.get("/static/dashboard.css").status_code == 200, "the login page's style"
    assert guarded.get("/jobs").status_code == 401


def test_a_chart_draws_one_bar_a_minute_scaled_to_the_busiest() -> None:
    class Minute:
        def __init__(self, at: float) -> None:
            self.minute = at

    minutes = [Minute(60.0 * n) for n in range(4)]
    svg = str(bars(minutes, [0, 5, 10, 2], "done per minute", "done"))
    heights = [float(h) for h in re.findall(r'<rect class="bar done"[^>]* height="([\d.]+)"', svg)]
    assert len(heights) == 4 and heights[0] == 0 and heights[2] == max(heights)
    assert heights[1] == pytest.approx(heights[2] / 2)
    assert "<title>1 min ago: 10</title>" in svg and "<title>this minute: 2</title>" in svg
    assert 'role="img" aria-label="done per minute: 17 in the last 4 minutes' in svg
    assert str(escape("<")) in str(bars(minutes, [1, 1, 1, 1], "<x>", "done"))


def test_the_overview_charts_the_last_hour_of_done_and_failed_attempts(app: App) -> None:
    # what workers add to the rollup at their heartbeats, added here directly
    now = minute_of(time.time())
    app.backend.add_metric_amounts(
        [
            MetricAmount("default", "t", "done", Series.ATTEMPTS, INF, 3, now),
            MetricAmount("default", "t", "retried", Series.ATTEMPTS, INF, 2, now - 600),
        ]
    )
    html = _client(app).get("/").text
    svgs = re.findall(r'<svg class="chart".*?</svg>', html, re.S)
    assert len(svgs) == 2 and all(svg.count("<rect class=") == 60 for svg in svgs)
    assert 'aria-label="done per minute: 3 in the last 60 minutes' in svgs[0]
    assert "<title>this minute: 3</title>" in svgs[0]
    assert "<title>10 min ago: 2</title>" in svgs[1]
    assert "<figcaption>Done per minute, last hour: 3 in all</figcaption>" in html
    assert "<figcaption>Failed attempts per minute, last hour: 2 in all</figcaption>" in html
    assert "<script" not in "".join(svgs) and "style=" not in html, "nothing the CSP refuses"


def test_a_filter_carried_to_a_bulk_action_reads_back_the_same() -> None:
    from starlette.datastructures import ImmutableMultiDict

    from sqljobs.dashboard import api

    now = 1_796_318_745.1234567
    params = ImmutableMultiDict(
        [("state", "dead"), ("queue", "mail"), ("task", "send"), ("key", "k:1"),
         ("text", "acme"), ("since", "90m"), ("until", "2026-12-04T01:00:00+01:00"),
         ("ids", "3,4"), ("ids", "5")]
    )  # fmt: skip
    found = api.job_filter(params, now, selection=True)
    assert found.since == now - 5400 and found.until == 1_796_342_400.0
    assert found.ids == (3, 4, 5)
    carried = ImmutableMultiDict(api.filter_fields(found))
    assert api.job_filter(carried, now + 3600, selection=True) == found, "fixed when shown"
    naive = api.job_filter(ImmutableMultiDict([("since", "2026-12-03 08:00")]), now)
    assert naive.since == 1_796_284_800.0, "a time without a zone is UTC"


def test_bounded_searches_and_capped_counts_say_so(
    app: App, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sqljobs.backends.ops import browsing

    monkeypatch.setattr(browsing, "TEXT_SCAN", 4)  # a text search reads 4 ids a page
    monkeypatch.setattr(browsing, "COUNT_SCAN", 4)  # a count by task stops at 4
    app.task(name="t")(lambda word: None)
    ids = [h.id for h in app.tasks["t"].enqueue_many([("needle",)] + [("hay",)] * 9)]
    client = _client(app)
    html = client.get("/jobs", params={"text": "needle"}).text
    assert _row_ids(html) == [] and "older pages may hold more" in html
    older = re.search(r'<a href="([^"]+)" rel="next">Older</a>', html)
    assert older is not None, "the search goes on below"
    asked = client.get("/jobs/confirm", params={"action": "cancel", "task": "t"})
    assert _h1(asked.text) == "Cancel at least 4 jobs?"
    assert "every match is changed, however many" in asked.text
    assert "<b>4+</b> jobs match" in client.get("/jobs", params={"task": "t"}).text
    assert client.post("/api/jobs/cancel", params={"task": "t"}).json() == {
        "ok": True,
        "cancelled": 10,
    }, "the action itself is not capped"
    assert all(_state(app, i) is JobState.CANCELLED for i in ids)


def test_the_queues_page_shows_limits_where_they_exist(app: App) -> None:
    app.limit_queue("mail", concurrency=2, rate="10/m")
    app.task(name="send", queue="mail")(lambda: None)
    app.task(name="report", queue="reports")(lambda: None)
    app.enqueue("send")
    html = _client(app).get("/queues").text
    limits = html.split("<caption>Queue limits</caption>")[1].split("</table>")[0]
    assert '<tr><td>mail</td><td class="n">2</td><td class="n">10/m</td></tr>' in limits
    assert "reports" not in limits, "a queue without a limit has no row"
    assert '<tr data-queue="reports">' in html and 'action="/api/queues/mail/pause"' in html


def test_a_confirmation_acts_on_what_it_counted_and_never_on_none_when_unsure(
    app: App, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sqljobs.backends.ops import browsing

    app.task(name="old")(lambda n: n)
    app.task(name="new")(lambda n: n)
    olds = [app.enqueue("old", [n]).id for n in range(3)]
    for n in range(6):
        app.enqueue("new", [n])
    client = _client(app)
    monkeypatch.setattr(browsing, "COUNT_SCAN", 4)  # the old jobs lie beyond the count
    unsure = client.get("/jobs/confirm", params={"action": "cancel", "task": "old"}).text
    assert _h1(unsure) == "Cancel all the matching jobs?" and "Nothing to" not in unsure
    # the form carries the newest id it counted: a job enqueued since is left alone
    up_to = re.search(r'name="up_to" value="(\d+)"', unsure)
    assert up_to is not None and int(up_to.group(1)) == olds[-1] + 6
    newer = app.enqueue("old", [99]).id
    fields: dict[str, Any] = {"task": "old", "up_to": up_to.group(1), "back": "/jobs"}
    path, flash = _flash(_post_form(client, "/api/jobs/cancel", **fields))
    assert path == "/jobs" and "3 job(s) cancelled" in flash["message"][0]
    assert [_state(app, i) for i in olds] == [JobState.CANCELLED] * 3
    assert _state(app, newer) is JobState.PENDING


def test_a_jobs_page_lists_every_attempt_with_its_worker_and_traceback(app: App) -> None:
    tries: list[int] = []

    @app.task(retry=Retry(max_attempts=3, base=0.01))
    def flaky() -> str:
        tries.append(1)
        if len(tries) == 1:
            raise ValueError("first try fails")
        return "ok"

    handle = flaky.enqueue()
    with stepped_worker(app) as worker:
        assert worker.result(handle) == "ok"
    job = app.get_job(handle.id)
    assert job is not None and job.history[0]["worker"] == worker.id
    assert "ValueError: first try fails" in job.history[0]["traceback"]
    page = _client(app).get(f"/jobs/{handle.id}").text
    table = page[
        page.index("<caption>Attempts</caption>") : page.index(
            "</table>", page.index("<caption>Attempts")
        )
    ]
    rows = re.findall(r"<tr><td class=\"n\">(\d+)</td><td>(\w+)</td><td>([^<]*)</td>", table)
    assert rows == [("1", "failed", worker.id), ("2", "done", worker.id)]
    assert '<pre class="attempt-traceback">' in table and "first try fails" in table


def test_a_keyed_jobs_page_says_the_keys_scope(app: App) -> None:
    app.task(name="sync")(lambda n: n)
    retained = app.enqueue("sync", [1], key="sync:1").id
    active = app.enqueue("sync", [2], key="sync:2", key_scope="active").id
    held = app.enqueue("sync", [3], key="sync:3", key_scope=90).id
    client = _client(app)
    assert "sync:1</a> (scope: retained)" in client.get(f"/jobs/{retained}").text
    assert "sync:2</a> (scope: active)" in client.get(f"/jobs/{active}").text
    assert "sync:3</a> (scope: 90 s after it ends)" in client.get(f"/jobs/{held}").text
