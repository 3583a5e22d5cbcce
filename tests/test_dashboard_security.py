"""The dashboard's security: loopback unless a token is set, the token on every request
once it is, a CSRF token on every action, the Host check against DNS rebinding, read-only
mode, the action log, and redacted arguments. Every refusal says what was wrong."""

from __future__ import annotations

import base64
import logging
import re

import pytest
from click.testing import CliRunner
from markupsafe import escape
from starlette.testclient import TestClient

from sqljobs import App, ConfigurationError, JobState
from sqljobs.cli import cli
from sqljobs.dashboard import check_bind, create_app

LOOPBACK = "http://127.0.0.1"
BAD_TOKEN = "a valid token is required"
BAD_CSRF = "carries no valid CSRF token"
READ_ONLY = "read-only: this dashboard was started with --read-only"
BEARER = {"Authorization": "Bearer s3cret"}


def _basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


def _pending(app: App) -> int:
    app.task(name="later")(lambda: None)
    return app.tasks["later"].with_options(delay=3600).enqueue().id


def _state(app: App, job_id: int) -> JobState:
    job = app.get_job(job_id)
    assert job is not None
    return job.state


def _csrf(client: TestClient, **headers: str) -> str:
    answer = client.get("/api/csrf", headers=headers)
    assert answer.status_code == 200, answer.text
    return str(answer.json()["csrf"])


# -- bind ----------------------------------------------------------------------------


def test_a_bind_beyond_loopback_needs_a_token(app: App) -> None:
    with pytest.raises(
        ConfigurationError, match=re.escape("--token (or set SQLJOBS_DASHBOARD_TOKEN)")
    ):
        check_bind("0.0.0.0", None)
    with pytest.raises(ConfigurationError, match="--token"):
        create_app(app, exposed=True)
    with pytest.raises(ConfigurationError, match="must not be empty"):
        create_app(app, token="")
    check_bind("0.0.0.0", "s3cret")
    check_bind("127.0.0.1", None)
    check_bind("::1", None)


def test_the_cli_refuses_to_start_beyond_loopback_without_a_token() -> None:
    result = CliRunner().invoke(
        cli,
        ["--url", "sqlite:///unused.db", "dashboard", "--host", "0.0.0.0"],
        env={"SQLJOBS_DASHBOARD_TOKEN": None},
    )
    assert result.exit_code == 2, result.output
    assert "--token (or set SQLJOBS_DASHBOARD_TOKEN)" in result.output
    assert "the dashboard on 0.0.0.0 would be reachable beyond this machine" in result.output


# -- authentication ------------------------------------------------------------------


def test_a_token_is_needed_by_every_request_once_set(app: App) -> None:
    job = _pending(app)
    client = TestClient(create_app(app, token="s3cret"), base_url=LOOPBACK)
    for path in ("/api/stats", "/api/jobs", f"/api/jobs/{job}", "/metrics", "/api/csrf"):
        refused = client.get(path)
        assert refused.status_code == 401, path
        assert BAD_TOKEN in refused.json()["error"] and "--token" in refused.json()["error"]
        assert "Bearer" in refused.headers["www-authenticate"]
    page = client.get("/", headers={"Accept": "text/html"}, follow_redirects=False)
    assert page.status_code == 303 and page.headers["location"] == "/login", "a person logs in"
    wrong = [
        {"Authorization": "Bearer nope"},
        _basic("alice", "nope"),
        {"Authorization": "Basic !!"},
    ]
    for headers in wrong:
        assert client.get("/api/stats", headers=headers).status_code == 401, headers
    assert client.get("/api/stats", headers=BEARER).status_code == 200
    assert client.get("/api/stats", headers=_basic("alice", "s3cret")).status_code == 200
    refused = client.post(f"/api/jobs/{job}/cancel")
    assert refused.status_code == 401 and refused.json()["ok"] is False
    assert _state(app, job) is JobState.PENDING


def test_the_login_page_sets_a_cookie_and_logout_clears_it(app: App) -> None:
    client = TestClient(create_app(app, token="s3cret"), base_url=LOOPBACK)
    form = client.get("/login")
    assert form.status_code == 200 and 'type="password"' in form.text
    csrf = re.search(r'name="csrf" value="([^"]+)"', form.text)
    assert csrf is not None
    no_csrf = client.post("/login", data={"token": "s3cret"})
    assert no_csrf.status_code == 403 and BAD_CSRF in no_csrf.text
    wrong = client.post("/login", data={"csrf": csrf[1], "token": "nope"})
    assert wrong.status_code == 401 and "wrong token" in wrong.text
    assert client.get("/api/stats").status_code == 401
    before = client.cookies.get("sqljobs_session")
    right = client.post("/login", data={"csrf": csrf[1], "token": "s3cret"}, follow_redirects=False)
    assert right.status_code == 303 and right.headers["location"] == "/"
    assert client.cookies.get("sqljobs_session") != before, "a fresh session at login"
    for cookie in right.headers.get_list("set-cookie"):
        assert "HttpOnly" in cookie and "SameSite=strict" in cookie, cookie
    page = client.get("/")
    assert page.status_code == 200 and ">Log out</button>" in page.text
    assert client.get("/api/stats").status_code == 200
    logout_csrf = re.search(
        r'action="/logout"><input type="hidden" name="csrf" value="([^"]+)"', page.text
    )
    assert logout_csrf is not None
    assert client.post("/logout", data={}).status_code == 403, "logging out needs the CSRF token"
    client.post("/logout", data={"csrf": logout_csrf[1]})
    assert client.get("/api/stats").status_code == 401


# -- CSRF ----------------------------------------------------------------------------


def test_an_action_without_a_valid_csrf_token_is_refused(app: App) -> None:
    job = _pending(app)
    client = TestClient(create_app(app), base_url=LOOPBACK)
    csrf = _csrf(client)
    other = TestClient(client.app, base_url=LOOPBACK)
    attempts = [
        ("no token", {}, None),
        ("wrong token", {"X-CSRF-Token": "0" * 64}, None),
        ("another session's token", {"X-CSRF-Token": _csrf(other)}, None),
        ("a form without its field", {}, {"x": "1"}),
        ("a form with a wrong field", {}, {"csrf": "forged"}),
    ]
    for what, headers, form in attempts:
        refused = client.post(f"/api/jobs/{job}/cancel", headers=headers, data=form)
        assert refused.status_code == 403, what
        if form is None:
            assert refused.json()["ok"] is False and BAD_CSRF in refused.json()["error"], what
        else:
            assert BAD_CSRF in refused.text and '<a href="/">back</a>' in refused.text, what
    assert _state(app, job) is JobState.PENDING
    cookieless = TestClient(client.app, base_url=LOOPBACK)  # a cross-site post: no cookies
    assert (
        cookieless.post(f"/api/jobs/{job}/cancel", headers={"X-CSRF-Token": csrf}).status_code
        == 403
    )
    ok = client.post(f"/api/jobs/{job}/cancel", headers={"X-CSRF-Token": csrf})
    assert ok.status_code == 200 and _state(app, job) is JobState.CANCELLED
    session = ok.request.headers["cookie"]
    assert "sqljobs_session=" in session
    for cookie in client.get("/api/csrf", headers={"Cookie": ""}).headers.get_list("set-cookie"):
        assert "HttpOnly" in cookie and "SameSite=strict" in cookie, cookie


def test_a_bearer_token_stands_in_for_csrf_but_basic_auth_does_not(app: App) -> None:
    job = _pending(app)
    client = TestClient(create_app(app, token="s3cret"), base_url=LOOPBACK)
    basic = client.post("/api/queues/mail/pause", headers=_basic("alice", "s3cret"))
    assert basic.status_code == 403 and BAD_CSRF in basic.json()["error"], "a browser resends basic"
    assert not any(q.paused for q in app.queues())
    csrf = _csrf(client, **_basic("alice", "s3cret"))
    with_csrf = client.post(
        "/api/queues/mail/pause", headers={**_basic("alice", "s3cret"), "X-CSRF-Token": csrf}
    )
    assert with_csrf.json() == {"ok": True}
    assert client.post(f"/api/jobs/{job}/cancel", headers=BEARER).status_code == 200
    assert _state(app, job) is JobState.CANCELLED


# -- Host ----------------------------------------------------------------------------


def test_on_loopback_only_loopback_names_are_served(app: App) -> None:
    asgi = create_app(app, port=8080)
    for host in ("127.0.0.1:8080", "localhost:8080", "[::1]:8080", "LOCALHOST:8080", "localhost"):
        assert TestClient(asgi, base_url=f"http://{host}").get("/api/stats").status_code == 200, (
            host
        )
    for host in ("evil.example:8080", "evil.example", "127.0.0.1:9999", "127.0.0.2:8080"):
        refused = TestClient(asgi, base_url=f"http://{host}").get("/api/stats")
        assert refused.status_code == 400, host
        error = refused.json()["error"]
        assert f"Host header {host!r} refused" in error and "DNS rebinding" in error
        assert "http://127.0.0.1:8080/" in error
    post = TestClient(asgi, base_url="http://evil.example:8080").post("/api/dead/retry")
    assert post.status_code == 400, "actions too"
    exposed = create_app(app, token="s3cret", exposed=True, port=8080)
    reached = TestClient(exposed, base_url="http://jobs.example.com").get(
        "/api/stats", headers=BEARER
    )
    assert reached.status_code == 200, "beyond loopback the token guards, not the name"


# -- read-only -----------------------------------------------------------------------


def test_read_only_shows_no_buttons_and_refuses_every_action(app: App) -> None:
    job = _pending(app)
    app.pause_queue("mail")
    client = TestClient(create_app(app, token="s3cret", read_only=True), base_url=LOOPBACK)
    html = client.get("/", headers=BEARER).text
    assert "<form" not in html and "<button" not in html and READ_ONLY in html
    for path in (
        f"/api/jobs/{job}/cancel",
        f"/api/jobs/{job}/retry",
        "/api/dead/retry",
        "/api/queues/default/pause",
        "/api/queues/mail/resume",
    ):
        refused = client.post(path, headers=BEARER)
        assert refused.status_code == 403, path
        assert refused.json() == {"ok": False, "error": refused.json()["error"]}
        assert READ_ONLY in refused.json()["error"], path
    assert _state(app, job) is JobState.PENDING
    assert [q.name for q in app.queues() if q.paused] == ["mail"]


# -- the action log ------------------------------------------------------------------


def test_every_action_is_logged_with_who_what_and_how_many(
    app: App, caplog: pytest.LogCaptureFixture
) -> None:
    @app.task(name="boom")
    def boom() -> None: ...

    dead = [app.enqueue("boom").id for _ in range(3)]
    for job_id in dead:
        app.cancel(job_id)
    guarded = TestClient(create_app(app, token="s3cret"), base_url=LOOPBACK)
    loopback = TestClient(create_app(app), base_url=LOOPBACK)
    with caplog.at_level(logging.INFO, logger="sqljobs.dashboard"):
        guarded.post(f"/api/jobs/{dead[0]}/retry", headers=BEARER)
        loopback.post(f"/api/jobs/{dead[1]}/retry", headers={"X-CSRF-Token": _csrf(loopback)})
        guarded.post(f"/api/jobs/{dead[2]}/retry", headers=_basic("alice", "s3cret"))
        guarded.post("/api/queues/mail/pause", headers=BEARER)
    records = [r for r in caplog.records if r.name == "sqljobs.dashboard"]
    assert [(r.levelno, r.who, r.action) for r in records] == [  # type: ignore[attr-defined]
        (logging.INFO, "bearer token", f"retry job {dead[0]}"),
        (logging.INFO, "loopback", f"retry job {dead[1]}"),
        (logging.WARNING, "user 'alice' (basic auth)", f"retry job {dead[2]}"),
        (logging.INFO, "bearer token", "pause queue 'mail'"),
    ]
    assert records[0].jobs == 1 and "1 job(s) changed" in records[0].getMessage()  # type: ignore[attr-defined]
    assert "refused (403)" in records[2].getMessage() and "CSRF" in records[2].getMessage()
    assert records[3].jobs == 0  # type: ignore[attr-defined]


def test_retrying_every_dead_job_logs_how_many(app: App, caplog: pytest.LogCaptureFixture) -> None:
    app.task(name="t")(lambda: None)
    for _ in range(2):
        app.cancel(app.enqueue("t").id)
    client = TestClient(create_app(app, token="s3cret"), base_url=LOOPBACK)
    with caplog.at_level(logging.INFO, logger="sqljobs.dashboard"):
        answer = client.post("/api/dead/retry", headers=BEARER)
    assert answer.status_code == 200
    (record,) = [r for r in caplog.records if r.name == "sqljobs.dashboard"]
    assert record.jobs == answer.json()["retried"]  # type: ignore[attr-defined]
    assert record.getMessage().startswith(
        "dashboard action retry the dead jobs of every queue by bearer token"
    )


# -- redaction -----------------------------------------------------------------------


def test_redacted_arguments_are_masked_in_the_page_and_the_json(app: App) -> None:
    @app.task(redact=["card_number", "extra"])
    def charge(customer: str, card_number: str, amount: int = 0, **extra: str) -> None: ...

    positional = charge.with_options(delay=3600).enqueue("acme", "4111-1111", 5).id
    keyword = (
        charge.with_options(delay=3600)
        .enqueue(customer="bob", card_number="5500-0000", cvv="cvv-731")
        .id
    )
    client = TestClient(create_app(app), base_url=LOOPBACK)
    html = client.get("/jobs").text
    listed = client.get("/api/jobs").text
    for shown in (html, listed, client.get(f"/api/jobs/{positional}").text,
                  client.get(f"/api/jobs/{keyword}").text):  # fmt: skip
        # (a cvv of "123" was found in a random CSRF token once: the value is distinctive)
        assert "4111" not in shown and "5500" not in shown and "cvv-731" not in shown
    assert client.get(f"/api/jobs/{positional}").json()["args"] == ["acme", "***", 5]
    body = client.get(f"/api/jobs/{keyword}").json()
    assert body["kwargs"] == {"customer": "bob", "card_number": "***", "cvv": "***"}
    assert escape('"acme", "***", 5') in html, "the page's preview is masked too"
    stored = app.get_job(positional)
    assert stored is not None and stored.args == ["acme", "4111-1111", 5], "only the view hides"


def test_redact_names_parameters_of_the_task(app: App) -> None:
    with pytest.raises(ConfigurationError, match="redact names 'card', not parameters of pay"):
        app.task(name="pay", redact=["card"])(lambda card_number: None)
    with pytest.raises(ConfigurationError, match="redact must be a list of parameter names"):
        app.task(name="pay2", redact="card_number")(lambda card_number: None)


# -- guessing and transport ----------------------------------------------------------


def test_an_address_that_keeps_guessing_the_token_is_turned_away_for_a_while(
    app: App, caplog: pytest.LogCaptureFixture
) -> None:
    from sqljobs.dashboard.security import WrongTokenThrottle

    now = [1000.0]
    throttle = WrongTokenThrottle(allowed=3, window=60.0, clock=lambda: now[0])
    client = TestClient(create_app(app, token="s3cret", throttle=throttle), base_url=LOOPBACK)
    wrong = {"Authorization": "Bearer guess"}
    assert client.get("/api/stats", headers=wrong).status_code == 401
    assert client.get("/api/stats", headers=_basic("eve", "guess2")).status_code == 401
    csrf = client.get("/login").text.split('name="csrf" value="')[1].split('"')[0]
    assert client.post("/login", data={"csrf": csrf, "token": "guess3"}).status_code == 401
    # three wrong tokens: the door is shut, even to the right one, and says for how long
    shut = client.get("/api/stats", headers=BEARER)
    assert shut.status_code == 429 and shut.headers["Retry-After"] == "60"
    assert "too many wrong tokens from this address: wait 60 s" in shut.json()["error"]
    now[0] += 60.0
    assert client.get("/api/stats", headers=BEARER).status_code == 200
    assert "wrong token" in caplog.text


def test_cookies_are_secure_over_https_only(app: App) -> None:
    for base, secure in (("https://127.0.0.1", True), (LOOPBACK, False)):
        answer = TestClient(create_app(app), base_url=base).get("/api/csrf")
        cookie = answer.headers["set-cookie"]
        assert ("; secure" in cookie.lower()) is secure, cookie
        assert "httponly" in cookie.lower() and "samesite=strict" in cookie.lower()


def test_the_throttle_remembers_only_addresses_that_failed_and_at_most_so_many() -> None:
    from sqljobs.dashboard.security import WrongTokenThrottle

    now = [0.0]
    throttle = WrongTokenThrottle(allowed=2, window=60.0, clock=lambda: now[0], max_clients=3)
    for n in range(1000):
        assert throttle.wait(f"10.0.0.{n}") == 0.0  # looking adds nobody
    for n in range(10):
        throttle.failed(f"10.0.1.{n}")
        now[0] += 1.0
    assert len(throttle._failures) <= 3
    throttle.failed("10.0.1.9")
    assert throttle.wait("10.0.1.9") > 0 and throttle.wait("10.0.1.0") == 0.0
