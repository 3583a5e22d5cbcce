"""sqljobs.testing: the drain runs jobs through a real worker (claims, fencing, retries,
results), a test clock makes delays, backoffs and ticks due without sleeping, the
assertions say what was enqueued, and the pytest plugin's fixtures work in a user's
suite (run here through ``pytester``)."""

from __future__ import annotations

import asyncio
import itertools
import logging
import re
import textwrap
import threading
import time
from datetime import UTC, datetime, timedelta
from importlib import metadata
from pathlib import Path

import pytest

import sqljobs
from sqljobs import App, ConfigurationError, JobState, Retry
from sqljobs.testing import (
    Attempt,
    Clock,
    DrainIncomplete,
    DrainReport,
    assert_enqueued,
    assert_not_enqueued,
    bind,
    enqueued_jobs,
    run_until_empty,
)

from .conftest import PG_ADMIN_URL

pytest_plugins = ["pytester"]

START = datetime(2026, 6, 1, 12, tzinfo=UTC)


def clocked_app(url: str) -> tuple[App, Clock]:
    """An App on ``url`` (either engine: ``url`` is the conftest fixture) and a test clock."""
    clock = Clock(START)
    return App(url, clock=clock), clock


# -- the drain ----------------------------------------------------------------------------


def test_a_drain_runs_jobs_through_real_claims_and_writes_their_results(app: App) -> None:
    seen: list[tuple[str, int]] = []

    @app.task
    def pay(ctx: sqljobs.JobContext, order: str) -> tuple[str, int]:
        seen.append((order, ctx.attempt))
        return order, ctx.attempt  # stored as JSON: a tuple reads back as a list

    first = pay.with_options(key="order-7:pay").enqueue("order-7")
    again = pay.with_options(key="order-7:pay").enqueue("order-7")
    assert (first.id, again.created) == (again.id, False)

    report = app.run_until_empty()

    assert seen == [("order-7", 1)], "one job for one key, run once"
    assert report.done == 1 and report.dead == 0 and report.failed == 0
    assert report.job(first.id).state == "done" and report.job(first.id).attempts == 1
    job = app.get_job(first.id)
    assert job is not None and job.state is JobState.DONE
    assert job.result == ["order-7", 1] and job.worker is not None
    assert job.token == 1, "one claim, fenced by its token"
    assert report.pending == () and not enqueued_jobs(app)


def test_an_async_task_drains_on_the_workers_event_loop(url: str) -> None:
    app, _clock = clocked_app(url)

    @app.task
    async def fetch(url: str) -> int:
        await asyncio.sleep(0)
        return len(url)

    handle = fetch.enqueue("https://example.com")
    assert app.run_until_empty().done == 1 and handle.result(timeout=0) == 19


def test_jobs_that_handlers_enqueue_run_in_the_same_drain(app: App) -> None:
    @app.task
    def leaf(n: int) -> int:
        return n

    @app.task
    def fan_out(n: int) -> None:
        leaf.enqueue_many([(i,) for i in range(n)])

    fan_out.enqueue(3)
    report = app.run_until_empty(concurrency=2)
    assert report.done == 4
    assert sorted(r.task for r in report.jobs.values()) == ["fan_out", "leaf", "leaf", "leaf"]


def test_a_job_waiting_for_its_parent_runs_after_it_in_the_same_drain(app: App) -> None:
    order: list[str] = []

    @app.task
    def step(name: str) -> None:
        order.append(name)

    parent = step.enqueue("parent")
    child = step.with_options(after=[parent]).enqueue("child")
    assert_enqueued(app, step, args=["child"])  # waiting counts as enqueued
    report = app.run_until_empty()
    assert order == ["parent", "child"] and report.job(child.id).state == "done"


def test_a_job_that_a_hook_enqueues_runs_in_the_same_drain(url: str) -> None:
    app, _clock = clocked_app(url)
    ran: list[str] = []

    @app.task
    def signup(user: str) -> None:
        ran.append(f"signup {user}")

    @app.task
    def welcome(user: str) -> None:
        ran.append(f"welcome {user}")

    @app.on("job_done")
    def follow_up(event: sqljobs.JobEvent) -> None:  # told on the worker's hook thread
        if event.task == "signup":
            welcome.enqueue("ada")

    signup.enqueue("ada")
    report = app.run_until_empty()
    assert ran == ["signup ada", "welcome ada"] and report.done == 2


def test_a_retry_succeeds_on_its_third_attempt_with_the_clock_moved_past_each_backoff(
    url: str,
) -> None:
    app, clock = clocked_app(url)
    attempts_at: list[float] = []

    @app.task(retry=Retry(max_attempts=5, base=600, cap=3600, jitter=False))
    def flaky() -> str:
        attempts_at.append(clock())
        if len(attempts_at) < 3:
            raise ConnectionError(f"gateway down ({len(attempts_at)})")
        return "paid"

    job_id = flaky.enqueue().id
    began = time.monotonic()
    report = app.run_until_empty()

    assert time.monotonic() - began < 2, "no sleeping through 30 minutes of backoff"
    assert [a.state for a in report.attempts] == ["pending", "pending", "done"]
    assert report.errors == [
        f"job {job_id} (flaky) attempt 1: ConnectionError: gateway down (1)",
        f"job {job_id} (flaky) attempt 2: ConnectionError: gateway down (2)",
    ]
    assert report.job(job_id) == sqljobs.testing.JobRun(job_id, "flaky", "done", 3, None)
    # the backoffs, without jitter: 600 s then 1200 s, each run exactly when due
    assert [round(b - a) for a, b in itertools.pairwise(attempts_at)] == [600, 1200]
    assert report.advanced == pytest.approx(1800, abs=1)
    job = app.get_job(job_id)
    assert job is not None and job.state is JobState.DONE and job.result == "paid"


def test_a_retry_without_backoff_drains_on_both_backends(app: App) -> None:
    calls: list[int] = []

    @app.task(retry=Retry(max_attempts=3, base=0))
    def flaky(ctx: sqljobs.JobContext) -> None:
        calls.append(ctx.attempt)
        if ctx.attempt < 3:
            raise ValueError("not yet")

    job_id = flaky.enqueue().id
    report = app.run_until_empty()
    assert calls == [1, 2, 3] and report.job(job_id).state == "done" and report.failed == 2


def test_a_dead_job_is_reported_with_its_errors(app: App) -> None:
    @app.task(retry=Retry(max_attempts=2, base=0))
    def hopeless(tenant: str) -> None:
        raise LookupError(f"no tenant {tenant!r}")

    @app.task
    def fine() -> None:
        pass

    dead_id, fine_id = hopeless.enqueue("acme").id, fine.enqueue().id
    report = app.run_until_empty()

    assert (report.done, report.dead, report.failed) == (1, 1, 2)
    run = report.job(dead_id)
    assert (run.state, run.attempts) == ("dead", 2)
    assert run.error is not None and "LookupError: no tenant 'acme'" in run.error
    assert report.job(fine_id).state == "done"
    with pytest.raises(KeyError, match=r"job 999 did not run in this drain; jobs that ran: "):
        report.job(999)
    assert f"job {dead_id} (hopeless) attempt 2: dead (failed 2 of 2 attempts" in str(report)


def test_a_report_takes_each_jobs_attempts_in_attempt_order() -> None:
    """A worker's two claim lanes may report a retry's next attempt first (the other lane
    claimed it once committed): the job is still what its last attempt left it."""
    failed = "LookupError: no tenant 'acme'"
    came = (
        Attempt(2, "fine", 1, "done", None),
        Attempt(1, "hopeless", 2, "dead", f"failed 2 of 2 attempts; last: {failed}"),
        Attempt(3, "fine", 1, "done", None),
        Attempt(1, "hopeless", 1, "pending", failed),
    )
    report = DrainReport(came, (), 0.0)
    assert [(a.job_id, a.attempt) for a in report.attempts] == [(2, 1), (1, 1), (3, 1), (1, 2)]
    assert (report.done, report.dead, report.failed) == (2, 1, 2)
    assert (report.job(1).state, report.job(1).attempts) == ("dead", 2)


def test_a_delayed_job_runs_once_the_clock_is_moved_and_not_before(url: str) -> None:
    app, clock = clocked_app(url)
    ran_at: list[float] = []

    @app.task
    def remind(user: str) -> None:
        ran_at.append(clock())

    remind.with_options(delay=timedelta(days=1)).enqueue("ada")
    report = run_until_empty(app, until=START + timedelta(hours=23))
    assert ran_at == [] and [j.task for j in report.pending] == ["remind"], "not due yet"
    assert clock.as_datetime() == START + timedelta(hours=23)
    assert_enqueued(app, remind, args=["ada"])

    clock.advance(timedelta(hours=1))
    report = run_until_empty(app, clock=clock)
    assert ran_at == [(START + timedelta(days=1)).timestamp()] and report.done == 1
    assert report.advanced == 0, "due already: the clock was not moved"
    assert_not_enqueued(app, remind)


def test_without_a_clock_a_job_due_after_the_timeout_is_left_pending(app: App) -> None:
    @app.task
    def later() -> None:
        pass

    @app.task
    def now() -> None:
        pass

    later.with_options(delay=3600).enqueue()
    now.enqueue()
    report = app.run_until_empty(timeout=2)
    assert report.done == 1 and [j.task for j in report.pending] == ["later"]
    assert report.advanced == 0, "no test clock: nothing moved"


def test_jobs_of_a_paused_queue_are_left_pending_not_waited_for(app: App) -> None:
    @app.task(queue="mail")
    def send() -> None:
        pass

    app.pause_queue("mail")
    job_id = send.enqueue().id
    report = app.run_until_empty(timeout=2)
    assert report.attempts == () and [j.id for j in report.pending] == [job_id]
    app.resume_queue("mail")
    assert app.run_until_empty().job(job_id).state == "done"


def test_a_periodic_schedule_fires_when_the_clock_passes_its_tick(url: str) -> None:
    app, clock = clocked_app(url)
    ticks: list[float] = []

    @app.periodic(every=timedelta(minutes=10))
    def refresh() -> None:
        ticks.append(clock())

    assert app.run_until_empty().attempts == (), "the first tick is 10 minutes away"
    clock.advance(timedelta(minutes=10))
    assert app.run_until_empty().done == 1
    assert ticks == [(START + timedelta(minutes=10)).timestamp()]

    report = app.run_until_empty(until=START + timedelta(hours=1))  # each tick as itself
    assert report.done == 5 and clock.as_datetime() == START + timedelta(hours=1)
    assert [round(t - ticks[0]) for t in ticks] == [0, 600, 1200, 1800, 2400, 3000]


def test_a_rate_limited_task_drains_with_the_clock_moved_past_each_window(
    url: str,
) -> None:
    app, clock = clocked_app(url)
    started: list[float] = []

    @app.task(rate="1/m")
    def call_api(n: int) -> None:
        started.append(clock())

    call_api.enqueue_many([(n,) for n in range(3)])
    report = app.run_until_empty()
    assert report.done == 3
    assert [round(b - a) for a, b in itertools.pairwise(started)] == [60, 60]
    assert report.advanced == pytest.approx(120, abs=1)


def test_max_jobs_stops_a_task_that_enqueues_itself(url: str) -> None:
    app, _clock = clocked_app(url)

    @app.task
    def forever(n: int) -> None:
        forever.enqueue(n + 1)

    forever.enqueue(0)
    with pytest.raises(DrainIncomplete, match="max_jobs=40 attempts") as caught:
        app.run_until_empty(max_jobs=40)
    assert caught.value.report.done >= 40
    assert re.search(r"\.\.\. 1\d earlier attempts", str(caught.value)), "a long report is cut"


def test_a_handler_that_does_not_return_fails_the_drain_at_its_timeout(url: str) -> None:
    app, _clock = clocked_app(url)
    release = threading.Event()

    @app.task(lease=1)
    def stuck() -> None:
        release.wait(5)

    stuck.enqueue()
    try:
        with pytest.raises(DrainIncomplete, match=r"still due or running after 0.3 s"):
            app.run_until_empty(timeout=0.3)
    finally:
        release.set()


@pytest.mark.parametrize("url", ["postgres"], indirect=True)
def test_a_clock_is_refused_on_postgresql_told_to_keep_the_servers_saying_why(url: str) -> None:
    app = App(url, clock=Clock(), backend_options={"server_clock": True})

    @app.task
    def noop() -> None:
        pass

    with pytest.raises(ConfigurationError, match=r"server_clock.*server's now\(\).*Leave"):
        app.run_until_empty()


def test_bad_drain_and_clock_input_is_refused_by_name(tmp_path: Path) -> None:
    app, clock = clocked_app(f"sqlite:///{tmp_path / 'jobs.db'}")

    @app.task
    def noop() -> None:
        pass

    with pytest.raises(ConfigurationError, match=r"max_jobs=0"):
        app.run_until_empty(max_jobs=0)
    with pytest.raises(ConfigurationError, match=r"timeout=-1"):
        app.run_until_empty(timeout=-1)
    with pytest.raises(ConfigurationError, match="not from this clock"):
        app.run_until_empty(clock=Clock())
    plain = App(f"sqlite:///{tmp_path / 'plain.db'}")
    plain.task(noop.fn)
    with pytest.raises(ConfigurationError, match=r"until=\.\.\.\) moves a controllable clock"):
        plain.run_until_empty(until=time.time() + 60)
    with pytest.raises(ConfigurationError, match="only moves forward"):
        clock.advance(-1)
    with pytest.raises(ConfigurationError, match="give seconds or a timedelta"):
        clock.advance("1")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="is naive"):
        clock.set(datetime(2026, 1, 1))
    assert clock.set(START - timedelta(days=1)) == (START - timedelta(days=1)).timestamp()


def test_a_drain_logs_what_it_ran(url: str, caplog: pytest.LogCaptureFixture) -> None:
    app, _clock = clocked_app(url)

    @app.task
    def noop() -> None:
        pass

    noop.enqueue()
    with caplog.at_level(logging.INFO, logger="sqljobs.testing"):
        app.run_until_empty()
    assert any(
        r.name == "sqljobs.testing" and "run_until_empty: 1 attempts, 1 jobs done" in r.message
        for r in caplog.records
    )


def test_the_testing_module_names_its_public_api_sorted() -> None:
    names = sqljobs.testing.__all__
    assert names == sorted(names) and all(hasattr(sqljobs.testing, n) for n in names)
    assert sqljobs.testing.DrainIncomplete is sqljobs.DrainIncomplete
    assert issubclass(sqljobs.DrainIncomplete, AssertionError), "a test fails on it"


# -- assertions ---------------------------------------------------------------------------


def test_assert_enqueued_matches_args_kwargs_and_counts(app: App) -> None:
    @app.task
    def send(to: str, *, subject: str = "") -> None:
        pass

    send.enqueue("ada", subject="hi")
    send.with_options(key="bob:hi").enqueue("bob", subject="hi")

    assert len(assert_enqueued(app, send)) == 2
    assert_enqueued(app, "send", args=("ada",), kwargs={"subject": "hi"}, count=1)
    assert_enqueued(app, send, key="bob:hi", queue="default")
    assert_enqueued(app, send, kwargs={"subject": "hi"}, count=2)
    assert_not_enqueued(app, send, args=["carol"])


def test_assert_enqueued_fails_listing_what_was_enqueued(app: App) -> None:
    @app.task
    def send(to: str) -> None:
        pass

    @app.task
    def other() -> None:
        pass

    first = send.enqueue("ada")
    with pytest.raises(AssertionError) as caught:
        assert_enqueued(app, send, args=["bob"])
    message = str(caught.value)
    assert message.startswith("expected a job of task 'send' with args=['bob'] enqueued; found")
    assert (
        f"job {first.id} send(args=['ada'], kwargs={{}}) queue='default' state=pending" in message
    )

    with pytest.raises(AssertionError, match=r"expected 2 jobs of task 'send' enqueued; found 1"):
        assert_enqueued(app, send, count=2)

    other_id = other.enqueue().id
    with pytest.raises(AssertionError) as caught:
        assert_enqueued(app, "missing")
    assert "Enqueued (none of that task):" in str(caught.value)
    assert f"job {other_id} other(" in str(caught.value)

    with pytest.raises(AssertionError, match=r"expected no job of task 'send' enqueued; found 1"):
        assert_not_enqueued(app, send)
    with pytest.raises(ConfigurationError, match="count=-1"):
        assert_enqueued(app, send, count=-1)
    with pytest.raises(ConfigurationError, match="is not JSON"):
        assert_enqueued(app, send, args=[object()])

    app.run_until_empty()
    with pytest.raises(AssertionError, match="Nothing is enqueued"):
        assert_enqueued(app, send)


# -- binding a module-level App -----------------------------------------------------------


def test_bind_points_a_module_level_app_at_the_test_database_and_back(
    tmp_path: Path, url: str
) -> None:
    module_app = App(f"sqlite:///{tmp_path / 'service.db'}")

    @module_app.task
    def greet(name: str) -> None:
        pass

    test_url, clock = url, Clock(START)
    with bind(module_app, test_url, clock=clock) as bound:
        assert bound is module_app and bound.url == test_url and bound.clock is clock
        greet.with_options(delay=3600).enqueue("ada")
        report = bound.run_until_empty()
        assert report.done == 1 and report.advanced == pytest.approx(3600, abs=1)
    assert module_app.url == f"sqlite:///{tmp_path / 'service.db'}"
    assert module_app.clock is time.time
    assert enqueued_jobs(module_app) == [], "nothing reached the service's own database"
    with pytest.raises(ConfigurationError), bind(module_app, "mysql://nope"):
        pass


# -- the pytest plugin, in a user's suite ------------------------------------------------


def plugin_args() -> list[str]:
    """Load the plugin by module unless the installed package registers it already."""
    installed = any(ep.name == "sqljobs" for ep in metadata.entry_points(group="pytest11"))
    return [] if installed else ["-p", "sqljobs.testing.plugin"]


USER_TESTS = """
    import sqljobs
    from sqljobs.testing import Clock, assert_enqueued

    def test_fixtures(sqljobs_app, sqljobs_url, sqljobs_clock):
        assert sqljobs_app.url == sqljobs_url and sqljobs_url.startswith("sqlite:///")
        assert isinstance(sqljobs_clock, Clock) and sqljobs_app.clock is sqljobs_clock

        @sqljobs_app.task
        def remind(user: str) -> None:
            pass

        remind.with_options(delay=86400).enqueue("ada")
        assert_enqueued(sqljobs_app, remind, args=["ada"])
        report = sqljobs_app.run_until_empty()
        assert report.done == 1 and report.advanced == 86400

    def test_each_test_gets_a_fresh_database(sqljobs_app):
        assert sqljobs_app.find_jobs().jobs == []
"""


def test_the_plugin_gives_a_sqlite_app_and_clock_per_test(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SQLJOBS_TEST_URL", raising=False)  # a developer's own setting
    pytester.makepyfile(test_user=textwrap.dedent(USER_TESTS))
    result = pytester.runpytest(*plugin_args(), "-q")
    result.assert_outcomes(passed=2)


SERVICE = """
    import sqljobs

    app = sqljobs.App("sqlite:///service-own.db")

    @app.task
    def welcome(user: str) -> None:
        pass
"""

SERVICE_TESTS = """
    import os
    from service import app, welcome
    from sqljobs.testing import assert_enqueued

    def test_the_service_app_is_bound(sqljobs_app, sqljobs_url):
        assert sqljobs_app is app and app.url == sqljobs_url
        welcome.enqueue("ada")
        assert_enqueued(app, welcome, args=["ada"])
        assert app.run_until_empty().done == 1

    def test_and_given_back_after(sqljobs_app):
        assert sqljobs_app.find_jobs().jobs == []

    def test_never_touching_its_own_database():
        assert app.url == "sqlite:///service-own.db"
        assert not os.path.exists("service-own.db")
"""


def test_the_plugin_binds_the_users_module_level_app(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SQLJOBS_TEST_URL", raising=False)
    pytester.makepyfile(service=textwrap.dedent(SERVICE))
    pytester.makepyfile(test_service=textwrap.dedent(SERVICE_TESTS))
    pytester.makeini("[pytest]\nsqljobs_app = service:app\n")
    pytester.syspathinsert()
    result = pytester.runpytest(*plugin_args(), "-q")
    result.assert_outcomes(passed=3)


def test_the_plugin_refuses_bad_settings_by_name(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SQLJOBS_TEST_URL", raising=False)
    pytester.makepyfile(service="not_an_app = 42\n")
    pytester.makepyfile(test_it="def test_app(sqljobs_app):\n    pass\n")
    pytester.syspathinsert()
    result = pytester.runpytest(*plugin_args(), "-q", "--sqljobs-url=sqlite:///x.db")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*give a PostgreSQL URL (leave it unset for a SQLite file*"])
    result = pytester.runpytest(*plugin_args(), "-q", "--sqljobs-app=service")
    result.stdout.fnmatch_lines(["*sqljobs_app: expected MODULE:ATTR, got 'service'*"])
    result = pytester.runpytest(*plugin_args(), "-q", "--sqljobs-app=service:not_an_app")
    result.stdout.fnmatch_lines(["*sqljobs_app: 'service:not_an_app' is 42, not a sqljobs.App*"])


PG_TESTS = """
    from sqljobs import Retry
    from sqljobs.testing import assert_enqueued

    def test_on_postgresql(sqljobs_app, sqljobs_url):
        assert sqljobs_url.startswith("postgresql://") and sqljobs_app.url == sqljobs_url

        @sqljobs_app.task(retry=Retry(max_attempts=2, base=0))
        def ping() -> str:
            return "pong"

        handle = ping.enqueue()
        assert_enqueued(sqljobs_app, ping)
        assert sqljobs_app.run_until_empty().done == 1
        assert handle.result(timeout=5) == "pong"

    def test_the_clock_drives_postgresql_too(sqljobs_app, sqljobs_clock):
        assert sqljobs_app.clock is sqljobs_clock

        @sqljobs_app.task
        def remind(user: str) -> None:
            pass

        remind.with_options(delay=86400).enqueue("ada")
        report = sqljobs_app.run_until_empty()
        # (timestamptz keeps microseconds: the run_at read back is that close)
        assert report.done == 1 and abs(report.advanced - 86400) < 1e-5
"""


@pytest.mark.postgres
def test_the_plugin_gives_a_fresh_postgresql_database_per_test(
    pytester: pytest.Pytester, pg_template: str
) -> None:
    pytester.makepyfile(test_pg=textwrap.dedent(PG_TESTS))
    result = pytester.runpytest(*plugin_args(), "-q", "-rs", f"--sqljobs-url={PG_ADMIN_URL}")
    result.assert_outcomes(passed=2)
