"""The dashboard: backlog health as HTML, JSON and Prometheus metrics from the database;
retry and cancel, behind a token when one is set or when it is exposed beyond loopback."""

from __future__ import annotations

import socket
import subprocess
import sys
import urllib.request

import pytest
from starlette.testclient import TestClient

from sqljobs import App, JobState, Retry
from sqljobs.dashboard import create_app, is_loopback

from .conftest import wait_until, worker_thread


def _with_a_dead_job(app: App) -> tuple[int, int]:
    """One dead job and one pending job; their ids."""

    @app.task(name="boom", retry=Retry(max_attempts=1))
    def boom() -> None:
        raise RuntimeError("boom <script>")

    app.task(name="later")(lambda: None)
    dead = app.enqueue("boom").id
    with worker_thread(app, queues=["default"]):
        wait_until(lambda: app.get_job(dead).state is JobState.DEAD)  # type: ignore[union-attr]
    pending = app.tasks["later"].with_options(delay=3600).enqueue().id
    return dead, pending


def test_the_page_json_and_metrics_agree_with_stats(app: App) -> None:
    dead, pending = _with_a_dead_job(app)
    client = TestClient(create_app(app))
    page = client.get("/")
    assert page.status_code == 200
    assert "boom &lt;script&gt;" in page.text and "<script>" not in page.text, "escaped"
    assert client.get("/api/stats").json() == app.stats().to_dict()
    assert client.get(f"/api/jobs/{dead}").json()["state"] == "dead"
    assert [j["id"] for j in client.get("/api/jobs", params={"state": "dead"}).json()] == [dead]
    assert client.get("/api/jobs/999999").status_code == 404
    assert client.get("/api/jobs", params={"state": "bogus"}).status_code == 400
    text = client.get("/metrics").text
    assert 'sqljobs_jobs{queue="default",state="dead"} 1.0' in text
    assert 'sqljobs_jobs{queue="default",state="pending"} 1.0' in text
    assert 'sqljobs_oldest_pending_age_seconds{queue="default"} 0.0' in text  # not due yet
    assert "sqljobs_workers 0.0" in text
    listed = client.get("/api/jobs", params={"state": "pending"}).json()
    assert [j["id"] for j in listed] == [pending]


def test_the_oldest_due_age_is_a_gauge_to_alert_on(app: App) -> None:
    app.task(name="t")(lambda: None)
    app.enqueue("t")
    wait_until(lambda: (app.stats().oldest_pending_age or 0) > 0.2)
    text = TestClient(create_app(app)).get("/metrics").text
    line = next(x for x in text.splitlines() if x.startswith("sqljobs_oldest_pending_age_seconds{"))
    assert float(line.split()[-1]) > 0.2


def test_actions_retry_and_cancel_without_a_token_on_loopback(app: App) -> None:
    dead, pending = _with_a_dead_job(app)
    client = TestClient(create_app(app))
    assert client.post(f"/api/jobs/{dead}/retry").json() == {"ok": True}
    assert app.get_job(dead).state is JobState.PENDING  # type: ignore[union-attr]
    assert client.post(f"/api/jobs/{pending}/cancel").json() == {"ok": True}
    assert app.get_job(pending).state is JobState.CANCELLED  # type: ignore[union-attr]
    assert client.post(f"/api/jobs/{pending}/cancel").status_code == 409, "already cancelled"
    form = client.post(f"/api/jobs/{pending}/retry", data={"from": "page"}, follow_redirects=False)
    assert form.status_code == 303, "the page's own forms come back to the page"


def test_a_token_guards_actions_and_an_exposed_dashboard_without_one_is_read_only(
    app: App,
) -> None:
    dead, _ = _with_a_dead_job(app)
    guarded = TestClient(create_app(app, token="s3cret", exposed=True))
    assert guarded.post(f"/api/jobs/{dead}/retry").status_code == 401
    assert (
        guarded.post(f"/api/jobs/{dead}/retry", headers={"Authorization": "Bearer no"}).status_code
        == 401
    )
    assert app.get_job(dead).state is JobState.DEAD  # type: ignore[union-attr]
    ok = guarded.post("/api/dead/retry", headers={"Authorization": "Bearer s3cret"})
    assert ok.json() == {"ok": True, "retried": 1}
    assert app.get_job(dead).state is JobState.PENDING  # type: ignore[union-attr]
    open_ = TestClient(create_app(app, exposed=True))
    refused = open_.post(f"/api/jobs/{dead}/cancel")
    assert refused.status_code == 403 and "--token" in refused.json()["error"]
    assert open_.get("/api/stats").status_code == 200, "reads stay open"


def test_loopback_is_told_apart() -> None:
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("10.1.2.3")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


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

        def up() -> bytes | None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=1) as r:
                    return bytes(r.read())
            except OSError:
                assert proc.poll() is None, proc.communicate()[1].decode()
                return None

        body = wait_until(up, timeout=20, what="the dashboard answering")
        assert b"sqljobs_workers" in body
    finally:
        proc.terminate()
        proc.communicate(timeout=10)
