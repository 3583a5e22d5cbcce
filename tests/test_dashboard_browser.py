"""The dashboard in a real browser: headless Chromium (Debian's), driven by Playwright,
against ``sqljobs dashboard`` served by its own process, with a real worker process
taking jobs, on both backends.

An operator opens the overview, filters to a dead job, opens it and reads its traceback,
retries it and watches it complete; pauses a queue and sees the worker leave it alone;
bulk-cancels the 100 jobs of a filter; and a state-changing request without the CSRF
token is refused. Screenshots of the overview and a job page are written to
``SQLJOBS_SCREENSHOTS`` when it names a folder (``docs/images`` for the README).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sqljobs import App, JobFilter, JobState

from .conftest import ROOT, child_pythonpath, wait_until

APP = "tests.apps.dashboard_app:app"
pytestmark = pytest.mark.browser


def _chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        if os.environ.get("CI") == "true":
            pytest.fail("chromium is not installed: .ci/run installs it (apt-get install chromium)")
        pytest.skip("chromium is not installed (apt-get install chromium)")
    return path


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    sync_api = pytest.importorskip("playwright.sync_api")
    executable = _chromium()
    with sync_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=executable, args=["--no-sandbox"])
        try:
            yield launched
        finally:
            launched.close()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def fixed(tmp_path: Path) -> Path:
    """The file whose existence makes ``charge`` succeed."""
    return tmp_path / "fixed"


@pytest.fixture
def dashboard(url: str, tmp_path: Path, fixed: Path) -> Iterator[str]:
    """``sqljobs dashboard`` in its own process; its base URL."""
    port = _free_port()
    env = dict(
        os.environ, SQLJOBS_URL=url, PYTHONPATH=child_pythonpath(), SQLJOBS_TEST_FIXED=str(fixed)
    )
    log_path = tmp_path / "dashboard.log"
    with log_path.open("wb") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "sqljobs",
                "--app",
                APP,
                "dashboard",
                "--port",
                str(port),
                "--alert-age",
                "30",
            ],
            env=env,
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: _answers(f"{base}/api/stats"), what="the dashboard to answer")
        yield base
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=10)
        print(f"--- dashboard.log\n{log_path.read_text(errors='replace')[-3000:]}")


def _answers(address: str) -> bool:
    try:
        with urllib.request.urlopen(address, timeout=2) as response:
            return bool(response.status == 200)
    except OSError:
        return False


@pytest.fixture
def worker(url: str, tmp_path: Path, fixed: Path) -> Iterator[Callable[[], None]]:
    """Start a ``sqljobs worker`` process for queues billing and mail (not bulk)."""
    procs: list[subprocess.Popen[bytes]] = []

    def start() -> None:
        env = dict(
            os.environ,
            SQLJOBS_URL=url,
            PYTHONPATH=child_pythonpath(),
            SQLJOBS_TEST_FIXED=str(fixed),
        )
        with (tmp_path / "worker.log").open("wb") as out:
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-m", "sqljobs", "--app", APP, "worker",
                     "--queues", "billing,mail"],
                    env=env, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )  # fmt: skip

    yield start
    for proc in procs:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=15)


def _shoot(page: Any, name: str) -> None:
    folder = os.environ.get("SQLJOBS_SCREENSHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(folder) / name), full_page=True)


def test_an_operator_retries_a_dead_job_pauses_a_queue_and_cancels_in_bulk(
    url: str, browser: Any, dashboard: str, worker: Callable[[], None], fixed: Path
) -> None:
    app = App(url)
    worker()
    wait_until(lambda: app.workers(), what="the worker to register")
    dead = app.enqueue("charge", ["acme", "4111-1111-1111-1111"], known=False)
    wait_until(lambda: dead.refresh().state is JobState.DEAD, what="the charge to die")
    for n in range(100):
        app.enqueue("later", [n], known=False)

    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.set_default_timeout(10_000)

    # the overview: the queues and the live worker
    page.goto(dashboard + "/")
    assert page.get_by_role("heading", name="Overview", level=1).is_visible()
    live = page.locator("#live")
    assert "billing" in live.inner_text() and "bulk" in live.inner_text()
    _shoot(page, "dashboard-overview.png")

    # filter to the dead job and open it: its traceback, and no card number anywhere
    page.get_by_role("link", name="Jobs", exact=True).click()
    page.get_by_label("State").select_option("dead")
    page.get_by_role("button", name="Filter").click()
    page.wait_for_url("**/jobs?*state=dead*")
    page.get_by_role("link", name=str(dead.id), exact=True).click()
    page.wait_for_url(f"**/jobs/{dead.id}")
    traceback = page.locator("pre.traceback").inner_text()
    assert "ValueError: no such customer acme" in traceback
    assert "4111" not in page.content()
    _shoot(page, "dashboard-job.png")

    # fix the cause, retry it, and watch it complete (the page refreshes by itself)
    fixed.touch()
    page.locator("form", has=page.get_by_role("button", name="Retry")).first.get_by_role(
        "button", name="Retry"
    ).click()
    page.wait_for_url(f"**/jobs/{dead.id}*")
    page.locator("#live .state.done").first.wait_for(timeout=20_000)
    assert dead.refresh().state is JobState.DONE

    # pause queue mail: the worker leaves a new mail job alone, and takes billing's
    page.goto(dashboard + "/queues")
    row = page.locator("tr", has=page.get_by_role("cell", name="mail", exact=True))
    row.get_by_role("button", name="Pause").click()
    page.locator("tr", has=page.get_by_role("cell", name="mail", exact=True)).get_by_role(
        "button", name="Resume"
    ).wait_for()
    assert "mail" in app.stats().paused
    held = app.enqueue("send", ["ops@example.org"], known=False)
    after = app.enqueue("charge", ["globex", "5500-0000-0000-0004"], known=False)
    wait_until(lambda: after.refresh().state is JobState.DONE, what="billing's job to run")
    assert held.refresh().state is JobState.PENDING  # enqueued first, yet left alone

    # bulk-cancel the 100 jobs of queue bulk, confirming a count of 100
    page.goto(dashboard + "/jobs?queue=bulk")
    page.get_by_role("button", name="Cancel all matching").click()
    page.get_by_role("heading", name="Cancel 100 jobs?").wait_for()
    page.get_by_role("button", name="Cancel 100 jobs").click()
    page.wait_for_url("**/jobs?*queue=bulk*")
    assert app.count_jobs(JobFilter(queue="bulk", state="cancelled")).n == 100
    assert app.count_jobs(JobFilter(queue="bulk", state="pending")).n == 0

    # an action without the CSRF token is refused, from the page itself
    status = page.evaluate(
        "async (id) => (await fetch(`/api/jobs/${id}/cancel`, {method: 'POST'})).status",
        held.id,
    )
    assert status == 403
    assert held.refresh().state is JobState.PENDING
    page.close()


@pytest.mark.parametrize("url", ["sqlite"], indirect=True)  # the browser's side only
def test_pages_fit_a_phone_and_read_in_dark_mode(url: str, browser: Any, dashboard: str) -> None:
    app = App(url)
    for n in range(3):
        app.enqueue("charge", [f"customer-{n}", "4111-1111-1111-1111"], known=False)
    page = browser.new_page(viewport={"width": 390, "height": 800}, color_scheme="dark")
    for path in ("/", "/jobs", "/jobs/1", "/queues", "/schedules", "/workers"):
        page.goto(dashboard + path)
        overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        assert overflow <= 1, f"{path} is {overflow} px wider than a phone"
        text = page.evaluate("getComputedStyle(document.body).color")  # light on dark
        channels = [int(c) for c in text[text.index("(") + 1 : -1].split(",")[:3]]
        assert sum(channels) > 3 * 150, f"{path} is not dark in dark mode: text {text}"
    page.close()


@pytest.mark.parametrize("url", ["sqlite"], indirect=True)  # the browser's side only
def test_live_refresh_waits_while_rows_are_selected_or_the_tab_is_hidden(
    url: str, browser: Any, dashboard: str
) -> None:
    app = App(url)
    for n in range(3):
        app.enqueue("later", [n], known=False)
    page = browser.new_page()
    page.clock.install()  # the page's timers run when the test says, not by the wall clock
    page.goto(dashboard + "/jobs")
    fetched: list[str] = []
    page.on("request", lambda r: fetched.append(r.url) if r.resource_type == "fetch" else None)

    def refreshes_after(ms: int) -> bool:
        fetched.clear()
        page.clock.run_for(ms)
        page.evaluate("new Promise((done) => requestAnimationFrame(done))")  # events in
        return any(u.startswith(dashboard + "/jobs") for u in fetched)

    assert refreshes_after(5_100)  # idle: the live region is fetched again every 5 s
    page.locator("input[name=ids]").first.check()
    assert not refreshes_after(11_000)  # a row is selected: nothing is taken away
    page.locator("input[name=ids]").first.uncheck()
    page.evaluate(
        "Object.defineProperty(document, 'hidden', {configurable: true, get: () => true})"
    )
    assert not refreshes_after(11_000)  # a hidden tab costs the server nothing
    page.evaluate(
        "Object.defineProperty(document, 'hidden', {configurable: true, get: () => false})"
    )
    assert refreshes_after(5_100)
    page.close()
