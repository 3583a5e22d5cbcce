"""The dashboard: backlog health as HTML, JSON and Prometheus metrics from the database;
retry and cancel, behind a token when one is set (and required beyond loopback); every
refusal says why, to a script and to a person. The security checks themselves are in
test_dashboard_security.py; here a client carries its session's CSRF token."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import threading
import urllib.request
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx2
import pytest
from markupsafe import escape
from starlette.applications import Starlette
from starlette.testclient import TestClient

from sqljobs import App, JobContext, JobState, Retry
from sqljobs.dashboard import create_app, is_loopback
from sqljobs.humanize import iso_local, iso_utc, preview
from sqljobs.testing import Clock, stepped_worker

from .conftest import wait_until

READ_ONLY = (
    "read-only: this dashboard was started with --read-only and takes no actions "
    "(retry, cancel, delete, pause, resume, run now)"
)
BAD_TOKEN = "a valid token is required"


@dataclass(frozen=True)
class Jobs:
    dead: int
    done: int
    pending: int


def _jobs(app: App) -> Jobs:
    """One job dead, one done, one pending (due in an hour), on the default queue."""

    @app.task(name="boom", retry=Retry(max_attempts=1))
    def boom() -> None:
        raise RuntimeError("boom <script>")

    app.task(name="fine")(lambda: None)
    app.task(name="later")(lambda *args, **kwargs: None)
    dead, done = app.enqueue("boom").id, app.enqueue("fine").id
    with stepped_worker(app, queues=["default"]) as worker:
        worker.until(lambda: app.get_job(dead).state is JobState.DEAD)  # type: ignore[union-attr]
        worker.until(lambda: app.get_job(done).state is JobState.DONE)  # type: ignore[union-attr]
    pending = app.tasks["later"].with_options(delay=3600).enqueue().id
    return Jobs(dead, done, pending)


def _state(app: App, job_id: int) -> JobState:
    job = app.get_job(job_id)
    assert job is not None
    return job.state


def _rows(html: str, job_id: int) -> list[str]:
    """The page's table rows for one job (it may be in more than one table)."""
    return re.findall(rf'<tr data-job="{job_id}">.*?</tr>', html, re.S)


def _flash(location: str) -> dict[str, list[str]]:
    """The flash message a redirect back to the page carries (without its signature)."""
    parts = urlsplit(location)
    assert parts.path == "/", location
    query = parse_qs(parts.query)
    assert query.pop("sig"), "a flash message is signed"
    return query


def _client(asgi: Starlette, **options: Any) -> TestClient:
    """A client on loopback (the Host the dashboard accepts there) whose actions carry its
    session's CSRF token, as the page's forms do."""
    client = TestClient(asgi, base_url="http://127.0.0.1", **options)
    answer = client.get("/api/csrf")
    if answer.status_code == 200:  # a token-guarded dashboard without credentials: 401
        client.headers["X-CSRF-Token"] = answer.json()["csrf"]
    return client


def _submit(client: TestClient, path: str) -> httpx2.Response:
    """Post as the page's form does (form-encoded, with its CSRF field), without following
    the redirect."""
    fields = {"csrf": client.headers.get("X-CSRF-Token", "")}
    return client.post(path, data=fields, follow_redirects=False)


def test_the_page_json_and_metrics_agree_with_stats(app: App) -> None:
    jobs = _jobs(app)
    client = _client(create_app(app))
    page = client.get("/")
    assert page.status_code == 200
    assert "boom &lt;script&gt;" in page.text and "boom <script>" not in page.text, "escaped"
    assert client.get("/api/stats").json() == app.stats().to_dict()
    assert client.get(f"/api/jobs/{jobs.dead}").json()["state"] == "dead"
    dead = client.get("/api/jobs", params={"state": "dead"}).json()
    assert [j["id"] for j in dead] == [jobs.dead]
    assert client.get("/api/jobs/999999").json() == {"error": "no job with id 999999"}
    assert client.get("/api/jobs/999999").status_code == 404
    text = client.get("/metrics").text
    assert 'sqljobs_jobs{queue="default",state="dead"} 1.0' in text
    assert 'sqljobs_jobs{queue="default",state="pending"} 1.0' in text
    assert 'sqljobs_oldest_pending_age_seconds{queue="default"} 0.0' in text  # not due yet
    assert "sqljobs_workers 0.0" in text
    listed = client.get("/api/jobs", params={"state": "pending"}).json()
    assert [j["id"] for j in listed] == [jobs.pending]
    assert len(client.get("/api/jobs", params={"limit": "2"}).json()) == 2


def test_the_oldest_due_age_is_a_gauge_to_alert_on(url: str) -> None:
    clock = Clock()
    app = App(url, clock=clock)
    app.task(name="t")(lambda: None)
    app.enqueue("t")
    clock.advance(0.5)  # the job waits half a second, on the App's clock
    assert (app.stats().oldest_pending_age or 0) > 0.2
    text = _client(create_app(app)).get("/metrics").text
    line = next(x for x in text.splitlines() if x.startswith("sqljobs_oldest_pending_age_seconds{"))
    assert float(line.split()[-1]) > 0.2


def test_json_times_are_iso_8601_utc_and_ages_stay_seconds(app: App) -> None:
    jobs = _jobs(app)
    client = _client(create_app(app))
    dead = app.get_job(jobs.dead)
    assert dead is not None and dead.history, "a dead job has a history to convert"
    body = client.get(f"/api/jobs/{jobs.dead}").json()
    for name in ("run_at", "created_at", "started_at", "finished_at"):
        assert body[name] == iso_utc(getattr(dead, name)), name
        assert datetime.fromisoformat(body[name]).utcoffset() == UTC.utcoffset(None)
    assert body["lease_until"] is None and body["deadline_at"] is None, "a time not set stays null"
    for got, stored in zip(body["history"], dead.history, strict=True):
        assert got["started_at"] == iso_utc(stored["started_at"])
        assert got["ended_at"] == iso_utc(stored["ended_at"])
    assert client.get("/api/jobs").json()[-1]["created_at"] == body["created_at"]
    app.enqueue("fine")  # due now, so the oldest due age is a number
    stats = client.get("/api/stats").json()
    assert isinstance(stats["oldest_pending_age"], float), "an age is a duration: seconds"


def test_the_page_shows_times_in_a_zone_and_arguments_escaped(app: App) -> None:
    app.task(name="report")(lambda *args, **kwargs: None)
    job = app.enqueue("report", ["<b>acme</b>"], {"day": "2026-12-01"}, delay=60)
    found = app.get_job(job.id)
    assert found is not None
    client = _client(create_app(app))
    html = client.get("/jobs").text
    for ts in (found.created_at, found.run_at):
        assert f'<time datetime="{iso_utc(ts)}">{escape(iso_local(ts))}</time>' in html
    assert '<script src="/static/dashboard.js" defer></script>' in html
    script = client.get("/static/dashboard.js").text
    assert "timeZoneName" in script, "the browser rewrites times in the reader's own zone"
    args = preview(found.args, found.kwargs)
    assert args.startswith('"<b>acme</b>"') and escape(args) in html
    assert "<b>acme" not in html, "arguments are escaped"
    assert str(found.created_at) not in html, "no raw Unix times"


def test_actions_retry_and_cancel_without_a_token_on_loopback(app: App) -> None:
    jobs = _jobs(app)
    client = _client(create_app(app))
    assert client.post(f"/api/jobs/{jobs.dead}/retry").json() == {"ok": True}
    assert _state(app, jobs.dead) is JobState.PENDING
    cancelled = client.post(f"/api/jobs/{jobs.pending}/cancel").json()
    assert cancelled == {"ok": True, "was_running": False}
    assert _state(app, jobs.pending) is JobState.CANCELLED
    again = client.post(f"/api/jobs/{jobs.pending}/cancel")
    assert again.status_code == 200, "cancelling is idempotent"
    assert again.json() == {"ok": True, "note": "already cancelled"}
    form = _submit(client, f"/api/jobs/{jobs.pending}/retry")
    assert form.status_code == 303, "the page's own forms come back to the page"
    assert _flash(form.headers["location"]) == {"message": [f"job {jobs.pending} is pending again"]}


def test_every_refusal_says_why(app: App) -> None:
    jobs = _jobs(app)
    client = _client(create_app(app))
    for action in ("retry", "cancel"):
        missing = client.post(f"/api/jobs/999999/{action}")
        assert missing.status_code == 404
        assert missing.json() == {"ok": False, "error": "no job with id 999999"}
    cases = [
        ("retry", jobs.done, "done; only dead or cancelled jobs can be retried"),
        ("retry", jobs.pending, "pending; only dead or cancelled jobs can be retried"),
        ("cancel", jobs.done, "done; only pending, waiting or running jobs can be cancelled"),
        ("cancel", jobs.dead, "dead; only pending, waiting or running jobs can be cancelled"),
    ]
    for action, job_id, reason in cases:
        refused = client.post(f"/api/jobs/{job_id}/{action}")
        assert refused.status_code == 409, (action, job_id)
        assert refused.json() == {"ok": False, "error": f"job {job_id} is {reason}"}
    assert (_state(app, jobs.done), _state(app, jobs.dead)) == (JobState.DONE, JobState.DEAD)

    # a person using the page's form sees the same sentence on the page
    form = _submit(client, f"/api/jobs/{jobs.done}/cancel")
    assert form.status_code == 303
    reason = f"job {jobs.done} is done; only pending, waiting or running jobs can be cancelled"
    assert _flash(form.headers["location"]) == {"error": [reason]}
    assert escape(reason) in client.get(form.headers["location"]).text


def test_the_page_shows_its_flash_messages_escaped(app: App) -> None:
    from sqljobs.dashboard.security import Guard

    asgi = create_app(app, token="s3cret")
    client = _client(asgi, headers={"Authorization": "Bearer s3cret"})
    guard = Guard.create("s3cret", exposed=False, port=None)  # the same secret as asgi's
    signed = {
        "message": "<script>x</script>",
        "error": "<i>no</i>",
        "sig": guard.flash_sig("message", "<script>x</script>"),
    }
    html = client.get("/", params=signed).text
    assert "&lt;script&gt;x&lt;/script&gt;" in html and "<script>x" not in html
    assert "<i>no</i>" not in html and "&lt;i&gt;no" not in html, "the error is not signed"


def test_the_page_offers_only_the_actions_it_would_take(app: App) -> None:
    jobs = _jobs(app)
    client = _client(create_app(app))
    html = client.get("/jobs").text
    assert all("/retry" in row and "/cancel" not in row for row in _rows(html, jobs.dead))
    assert all("/cancel" in row and "/retry" not in row for row in _rows(html, jobs.pending))
    assert [row for row in _rows(html, jobs.done) if "<form" in row] == [], "done: nothing to do"
    assert 'name="token"' not in html, "no token asked for"
    overview = client.get("/").text
    assert 'data-confirm="Retry every dead job (1)?"' in overview, "asks first, with the count"
    assert ">Retry every dead job</button>" in overview
    assert READ_ONLY not in html
    assert all('<input type="hidden" name="csrf"' in row for row in _rows(html, jobs.dead))


def test_a_read_only_dashboard_shows_no_buttons_and_says_why(app: App) -> None:
    jobs = _jobs(app)
    client = _client(create_app(app, read_only=True))
    html = client.get("/").text
    assert "<form" not in html and "<button" not in html
    assert escape(READ_ONLY) in html
    assert len(_rows(html, jobs.dead)) == 1, "the jobs are still listed"
    refused = client.post(f"/api/jobs/{jobs.dead}/retry")
    assert refused.status_code == 403
    assert refused.json() == {"ok": False, "error": READ_ONLY}
    assert _state(app, jobs.dead) is JobState.DEAD
    assert client.get("/api/stats").status_code == 200, "reads stay open"


def test_a_token_guards_actions(app: App) -> None:
    jobs = _jobs(app)
    guarded = _client(create_app(app, token="s3cret", exposed=True))
    for headers in ({}, {"Authorization": "Bearer no"}):
        refused = guarded.post(f"/api/jobs/{jobs.dead}/retry", headers=headers)
        assert refused.status_code == 401 and refused.json()["ok"] is False
        assert BAD_TOKEN in refused.json()["error"] and "--token" in refused.json()["error"]
    assert _state(app, jobs.dead) is JobState.DEAD
    ok = guarded.post("/api/dead/retry", headers={"Authorization": "Bearer s3cret"})
    assert ok.json() == {"ok": True, "retried": 1}
    assert _state(app, jobs.dead) is JobState.PENDING


def test_the_page_form_posts_with_its_csrf_token(app: App) -> None:
    """The form as the page renders it, posted form-encoded as a browser does (this was a
    500 without python-multipart), by a person logged in through the login page."""
    jobs = _jobs(app)
    client = TestClient(create_app(app, token="s3cret"), base_url="http://127.0.0.1")
    login = client.get("/login").text
    csrf = re.search(r'name="csrf" value="([^"]+)"', login)
    assert csrf is not None
    client.post("/login", data={"csrf": csrf[1], "token": "s3cret"})
    row = _rows(client.get("/jobs").text, jobs.pending)[0]
    form = re.search(r'<form method="post" action="([^"]+)">.*?value="([^"]+)"', row)
    assert form is not None and form[1] == f"/api/jobs/{jobs.pending}/cancel"

    right = client.post(form[1], data={"csrf": form[2]}, follow_redirects=False)
    assert right.status_code == 303
    assert _flash(right.headers["location"]) == {"message": [f"job {jobs.pending} cancelled"]}
    assert _state(app, jobs.pending) is JobState.CANCELLED
    back = client.post(form[1], data={"csrf": form[2]})  # following the redirect
    assert back.status_code == 200 and f"job {jobs.pending} was already cancelled" in back.text


_TOO_BIG = "9" * 30
BAD_REQUESTS = [
    # (method, path, query, what the error must mention)
    ("GET", "/api/jobs", {"limit": "-1"}, "limit must be a whole number from 1 to 1000"),
    ("GET", "/api/jobs", {"limit": "0"}, "limit must be a whole number from 1 to 1000"),
    ("GET", "/api/jobs", {"limit": "1001"}, "limit must be a whole number from 1 to 1000"),
    ("GET", "/api/jobs", {"limit": _TOO_BIG}, "limit must be a whole number from 1 to 1000"),
    ("GET", "/api/jobs", {"limit": "9" * 5000}, "limit must be a whole number from 1 to 1000"),
    ("GET", "/api/jobs", {"limit": "abc"}, "limit must be a whole number from 1 to 1000"),
    ("GET", "/api/jobs", {"limit": "1.5"}, "limit must be a whole number from 1 to 1000"),
    ("GET", "/api/jobs", {"limit": ""}, "limit must be a whole number from 1 to 1000"),
    ("GET", "/api/jobs", {"limit": "\uff15"}, "limit must be a whole number from 1 to 1000"),
    ("GET", "/api/jobs", {"state": "bogus"}, "state must be one of pending, waiting, running"),
    ("GET", "/api/jobs", {"state": ""}, "state must be one of"),
    ("GET", "/api/jobs", {"queue": ""}, "queue must be a queue name"),
    ("GET", "/api/jobs", {"queue": "a\x00b"}, "queue must be a queue name"),
    ("GET", "/api/jobs", {"stat": "dead"}, "unknown parameter 'stat': /api/jobs takes state"),
    ("GET", "/api/jobs/abc", {}, "a job id is a whole number"),
    ("GET", "/api/jobs/0", {}, "a job id is a whole number"),
    ("GET", "/api/jobs/-1", {}, "a job id is a whole number"),
    ("GET", f"/api/jobs/{_TOO_BIG}", {}, "a job id is a whole number"),
    ("POST", "/api/jobs/abc/retry", {}, "a job id is a whole number"),
    ("POST", f"/api/jobs/{_TOO_BIG}/retry", {}, "a job id is a whole number"),
    ("POST", f"/api/jobs/{_TOO_BIG}/cancel", {}, "a job id is a whole number"),
    ("POST", "/api/dead/retry", {"queue": ""}, "queue must be a queue name"),
    ("POST", "/api/dead/retry", {"queue": "\x00"}, "queue must be a queue name"),
    ("POST", "/api/dead/retry", {"queu": "x"}, "unknown parameter 'queu': /api/dead/retry"),
    ("GET", "/api/queues", {"queue": "x"}, "unknown parameter 'queue': /api/queues takes no"),
    ("POST", "/api/queues/bad name/pause", {}, "queue name 'bad name' (in the path) is not"),
    ("POST", f"/api/queues/{'q' * 65}/resume", {}, "use 1-64 letters, digits"),
]


@pytest.mark.parametrize(("method", "path", "query", "says"), BAD_REQUESTS)
def test_a_bad_parameter_is_a_400_that_says_what_is_allowed(
    app: App, method: str, path: str, query: dict[str, str], says: str
) -> None:
    app.task(name="t")(lambda: None)
    job = app.enqueue("t")
    client = _client(create_app(app), raise_server_exceptions=False)
    answer = client.request(method, path, params=query)
    assert answer.status_code == 400, answer.text
    body = answer.json()
    assert says in body["error"]
    assert body.get("ok", False) is False and (method == "POST") == ("ok" in body)
    assert _state(app, job.id) is JobState.PENDING, "nothing changed"


# -- control over work in flight -----------------------------------------------------------


def _metric(text: str, name: str, queue: str) -> float:
    line = next(x for x in text.splitlines() if x.startswith(f'{name}{{queue="{queue}"}}'))
    return float(line.split()[-1])


def test_queues_are_paused_and_resumed_and_shown_so(app: App) -> None:
    app.task(name="send", queue="mail")(lambda: None)
    app.enqueue("send")
    app.enqueue("report", queue="reports", known=False)
    client = _client(create_app(app))
    html = client.get("/").text
    for queue in ("mail", "reports"):
        assert f'action="/api/queues/{queue}/pause"' in html
    assert "/resume" not in html and "paused since" not in html
    assert _metric(client.get("/metrics").text, "sqljobs_queue_paused", "mail") == 0.0

    paused = client.post("/api/queues/mail/pause")
    assert paused.status_code == 200 and paused.json() == {"ok": True}
    assert [q.name for q in app.queues() if q.paused] == ["mail"]
    again = client.post("/api/queues/mail/pause")
    assert again.json() == {"ok": True, "note": "already paused"}, "pausing is idempotent"

    html = client.get("/").text
    mail = re.search(r'<tr data-queue="mail">.*?</tr>', html, re.S)
    assert mail is not None and "paused</span> since <time datetime=" in mail[0]
    assert 'action="/api/queues/mail/resume"' in mail[0] and "/pause" not in mail[0]
    assert 'action="/api/queues/reports/pause"' in html
    assert "paused: mail</span>" in html, "the summary line names the paused queues"
    queues = {q["name"]: q for q in client.get("/api/queues").json()}
    assert queues["mail"]["paused"] is True and queues["mail"]["counts"]["pending"] == 1
    paused_at = datetime.fromisoformat(queues["mail"]["paused_at"])
    assert paused_at.utcoffset() == UTC.utcoffset(None)
    assert queues["reports"] == {**queues["reports"], "paused": False, "paused_at": None}
    assert client.get("/api/stats").json()["paused"] == ["mail"]
    metrics = client.get("/metrics").text
    assert _metric(metrics, "sqljobs_queue_paused", "mail") == 1.0
    assert _metric(metrics, "sqljobs_queue_paused", "reports") == 0.0

    form = _submit(client, "/api/queues/mail/resume")
    assert form.status_code == 303
    said = "queue mail resumed: workers take its jobs again"
    assert _flash(form.headers["location"]) == {"message": [said]}
    assert not any(q.paused for q in app.queues())
    assert client.post("/api/queues/mail/resume").json() == {"ok": True, "note": "not paused"}
    assert _metric(client.get("/metrics").text, "sqljobs_queue_paused", "mail") == 0.0


def test_a_paused_queue_with_no_jobs_is_still_shown(app: App) -> None:
    client = _client(create_app(app))
    form = _submit(client, "/api/queues/nightly/pause")
    said = "queue nightly paused: workers take no new jobs from it; running jobs finish"
    assert _flash(form.headers["location"]) == {"message": [said]}
    assert escape(said) in client.get(form.headers["location"]).text
    assert [q["name"] for q in client.get("/api/queues").json()] == ["nightly"]
    assert _metric(client.get("/metrics").text, "sqljobs_queue_paused", "nightly") == 1.0


def test_pausing_needs_the_token_like_every_action(app: App) -> None:
    app.enqueue("send", queue="mail", known=False)
    read_only = _client(create_app(app, read_only=True))
    assert "/api/queues/" not in read_only.get("/").text, "no pause button"
    refused = read_only.post("/api/queues/mail/pause")
    assert refused.status_code == 403 and refused.json() == {"ok": False, "error": READ_ONLY}
    guarded = _client(create_app(app, token="s3cret", exposed=True))
    assert guarded.post("/api/queues/mail/pause").status_code == 401
    assert not any(q.paused for q in app.queues())
    ok = guarded.post("/api/queues/mail/pause", headers={"Authorization": "Bearer s3cret"})
    assert ok.json() == {"ok": True} and app.queues()[0].paused


def test_progress_while_running_and_the_result_when_done(app: App) -> None:
    go_on = threading.Event()

    @app.task
    def export(ctx: JobContext, pages: int) -> dict[str, str]:
        ctx.progress(3, total=pages, note="page <3>")
        go_on.wait(20)
        return {"file": "<b>report</b>.pdf", "pages": "x" * 200}

    handle = export.enqueue(10)
    client = _client(create_app(app))
    with stepped_worker(app) as worker:
        progress = worker.until(lambda: app.job(handle.id).refresh().progress)
        body = client.get(f"/api/jobs/{handle.id}").json()
        assert body["state"] == "running" and body["result"] is None
        assert body["progress"] == {
            "done": 3,
            "total": 10,
            "note": "page <3>",
            "updated_at": iso_utc(progress.updated_at),
        }
        html = client.get("/").text
        running = html.split("<h2>Running jobs</h2>")[1].split("<h2>")[0]
        (row,) = _rows(running, handle.id)
        assert '<progress value="3" max="10"></progress> 3/10 (30%) page &lt;3&gt;' in row
        go_on.set()
        worker.result(handle)

    body = client.get(f"/api/jobs/{handle.id}").json()
    assert body["result"] == {"file": "<b>report</b>.pdf", "pages": "x" * 200}
    assert body["progress"]["done"] == 3, "the last report stays with the job"
    html = client.get("/").text
    assert '<h2>Running jobs</h2>\n<p class="empty">No running jobs.</p>' in html
    (row,) = _rows(client.get("/jobs").text, handle.id)
    shown = json.dumps(body["result"])[:79] + "…"
    assert f"<code>{escape(shown)}</code>" in row, "a long result is cut; the JSON has it all"
    assert "<progress" not in row and "<b>report" not in row


def test_cancelling_a_running_job_says_its_outcome_is_discarded(app: App) -> None:
    started = threading.Event()

    @app.task(lease=0.9)  # on SQLite the worker learns at its heartbeat, every 0.3 s
    def crawl(ctx: JobContext) -> None:
        started.set()
        while not ctx.cancelled:
            started.wait(0.01)

    handle = crawl.enqueue()
    client = _client(create_app(app))
    with stepped_worker(app) as worker:
        worker.until(started.is_set, what="the handler to start")
        assert _rows(client.get("/").text.split("<h2>Running jobs</h2>")[1], handle.id)
        form = _submit(client, f"/api/jobs/{handle.id}/cancel")
        said = _flash(form.headers["location"])["message"][0]
        assert said == (
            f"job {handle.id} cancelled while running: its worker is told to stop within a "
            "heartbeat (the handler sees ctx.cancelled), and its outcome will be discarded"
        )
        worker.until_event("cancelled", job_id=handle.id)
        worker.until_event("discarded", job_id=handle.id)
    assert _state(app, handle.id) is JobState.CANCELLED
    again = client.post(f"/api/jobs/{handle.id}/cancel").json()
    assert again == {"ok": True, "note": "already cancelled"}


def test_a_cancel_by_script_says_whether_a_run_was_cut_short(app: App) -> None:
    started, release = threading.Event(), threading.Event()

    @app.task
    def stubborn() -> None:
        started.set()
        release.wait(20)

    handle = stubborn.enqueue()
    client = _client(create_app(app))
    with stepped_worker(app) as worker:
        worker.until(started.is_set, what="started")
        answer = client.post(f"/api/jobs/{handle.id}/cancel")
        assert answer.json() == {"ok": True, "was_running": True}
        worker.until_event("cancelled", job_id=handle.id)
        release.set()
        worker.until_event("discarded", job_id=handle.id)
    job = app.job(handle.id).refresh()
    assert job.state is JobState.CANCELLED and job.history[-1]["outcome"] == "cancelled"


def test_the_ends_of_each_range_are_taken(app: App) -> None:
    client = _client(create_app(app))
    for limit in ("1", "1000"):
        assert client.get("/api/jobs", params={"limit": limit}).status_code == 200
    biggest = 2**63 - 1
    assert client.get(f"/api/jobs/{biggest}").json() == {"error": f"no job with id {biggest}"}
    assert client.post(f"/api/jobs/{biggest}/cancel").status_code == 404


def test_loopback_is_told_apart() -> None:
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("10.1.2.3")


def _scrape(proc: subprocess.Popen[bytes], port: int, what: str) -> bytes:
    """``/metrics`` of the server ``proc`` starts on ``port``, once it answers."""

    def up() -> bytes | None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=1) as r:
                return bytes(r.read())
        except OSError:
            assert proc.poll() is None, proc.communicate()[1].decode()
            return None

    body: bytes = wait_until(up, timeout=20, what=what)
    return body


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.processes
@pytest.mark.timeout(60)
def test_the_cli_serves_the_dashboard_on_loopback(url: str) -> None:
    App(url).migrate()
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "sqljobs", "--url", url, "dashboard", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        body = _scrape(proc, port, "the dashboard answering")
        assert b"sqljobs_workers" in body
    finally:
        proc.terminate()
        proc.communicate(timeout=10)


@pytest.mark.processes
@pytest.mark.timeout(60)
def test_the_cli_serves_metrics_alone_and_stops_on_sigterm(url: str) -> None:
    app = App(url)
    app.task(name="t")(lambda: None)
    app.enqueue("t", queue="mail")
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "sqljobs", "--url", url, "metrics", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        body = _scrape(proc, port, "the metrics answering").decode()
        assert 'sqljobs_jobs{queue="mail",state="pending"} 1.0' in body
        assert "sqljobs_oldest_pending_age_seconds" in body
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=10)
    assert proc.returncode == 0, err.decode()


def test_metrics_refuses_a_port_in_use(url: str) -> None:
    from click.testing import CliRunner

    from sqljobs.cli import Ctx, cli

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = CliRunner().invoke(cli, ["--url", url, "metrics", "--port", str(port)], obj=Ctx())
    assert result.exit_code == 1 and f"cannot serve metrics on 127.0.0.1:{port}" in result.output
