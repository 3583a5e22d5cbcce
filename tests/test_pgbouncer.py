"""Behind PgBouncer: the conformance suite's core, run through a real pgbouncer.

The core tests (claim, fencing, keys, effects, schedules, shutdown, worker processes) are
imported from their own modules and collected here again, with ``url`` overridden to
reach a fresh database through PgBouncer: in transaction mode with ``?listen=false``
(poll-only mode, which keeps no state on the session), and in session mode with LISTEN.
Then what is particular to the pooler: nothing a client leaves on a server session, and
what the URL option does. See docs/pgbouncer.md.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from sqljobs import App, ConfigurationError, JobContext, idempotent
from sqljobs.backends.base import Claim
from sqljobs.notifiers import postgres as notifiers_postgres
from sqljobs.notifiers.postgres import PostgresNotifier
from sqljobs.url import url_options

from . import (
    test_effects,
    test_enqueue,
    test_processes,
    test_schedules,
    test_shutdown,
)
from .backend_conformance import test_claims
from .conftest import (
    POOLED,
    Runs,
    Spawn,
    database_url,
    db_execute,
    wait_until,
    worker_thread,
)
from .pgbouncer import SERVER_SESSIONS
from .test_effects import bank  # noqa: F401  (a fixture of a test collected below)

TRANSACTION, SESSION = POOLED


@pytest.fixture
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh database through PgBouncer, in the pool mode each test is given."""
    with database_url(request, tmp_path) as pooled_url:
        yield pooled_url


def through(test: Callable[..., None], *cases: Any) -> Callable[..., None]:
    """``test``, from its own module, collected here again on the PgBouncer ``cases``
    (a new function object: marking it leaves the original as it was)."""

    @functools.wraps(test)
    def again(*args: Any, **kwargs: Any) -> None:
        test(*args, **kwargs)

    marked: Callable[..., None] = pytest.mark.parametrize("url", cases, indirect=True)(again)
    return marked


# The core. Transaction mode is where things break, so it gets all of it; session mode,
# a server session per client connection as if direct, gets a real worker process drained
# by SIGTERM and an effect (and LISTEN, below).
BOTH = (TRANSACTION, SESSION)
test_claims_take_priority_then_age_and_respect_run_at_and_queue = through(
    test_claims.test_claims_take_priority_then_age_and_respect_run_at_and_queue,
    TRANSACTION,
)
test_a_stale_worker_cannot_complete_fail_release_or_renew = through(
    test_claims.test_a_stale_worker_cannot_complete_fail_release_or_renew,
    TRANSACTION,
)
test_a_heartbeat_renews_every_held_lease_in_one_call = through(
    test_claims.test_a_heartbeat_renews_every_held_lease_in_one_call, TRANSACTION
)
test_a_second_enqueue_with_the_same_key_returns_the_existing_job = through(
    test_enqueue.test_a_second_enqueue_with_the_same_key_returns_the_existing_job, TRANSACTION
)
test_a_big_enqueue_many_stores_all_in_order_or_nothing = through(
    test_enqueue.test_a_big_enqueue_many_stores_all_in_order_or_nothing, TRANSACTION
)
test_c6_marker_and_charge_in_one_transaction_charge_exactly_once = through(
    test_effects.test_c6_marker_and_charge_in_one_transaction_charge_exactly_once, *BOTH
)
test_replicas_racing_for_one_tick_enqueue_one_job = through(
    test_schedules.test_replicas_racing_for_one_tick_enqueue_one_job, TRANSACTION
)
test_a_worker_thread_syncs_and_runs_periodic_tasks = through(
    test_schedules.test_a_worker_thread_syncs_and_runs_periodic_tasks, TRANSACTION
)
test_jobs_still_running_after_the_drain_are_released_uncharged = through(
    test_shutdown.test_jobs_still_running_after_the_drain_are_released_uncharged, TRANSACTION
)
test_sigterm_finishes_in_flight_jobs_and_claims_no_more = through(
    test_shutdown.test_sigterm_finishes_in_flight_jobs_and_claims_no_more, *BOTH
)
test_processes_share_the_work = through(test_processes.test_processes_share_the_work, TRANSACTION)


def server_sessions(url: str) -> list[psycopg.Connection[tuple[object, ...]]]:
    """One client connection on each of the pool's server sessions: each holds its
    session in an open transaction, so no two of them share one."""
    conns = []
    for _ in range(SERVER_SESSIONS["transaction"]):
        conn = psycopg.connect(url_options(url)[0])  # not autocommit: BEGIN holds it
        conn.execute("SELECT 1")
        conns.append(conn)
    return conns


@pytest.mark.parametrize("url", [TRANSACTION], indirect=True)
def test_poll_only_mode_leaves_nothing_on_the_server_sessions(url: str) -> None:
    """A worker's pool (asynchronous commit asked for) leaves no setting and no prepared
    statement on the sessions it used, where the next client of each would find them,
    and its statements keep working however often they run on whichever session."""
    app = App(url)
    backend = app._open_backend(synchronous_commit=False, pool_size=4)

    @app.task
    def t(n: int) -> None: ...

    def busy() -> None:
        for n in range(10):  # past psycopg's prepare threshold (5) on every connection
            t.enqueue(n)
            backend.claim_jobs(Claim("w", None, 1))
            app.stats()

    threads = [threading.Thread(target=busy) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert sum(app.stats().counts["default"].values()) == 40
    conns = server_sessions(url)
    try:
        pids = {conn.execute("SELECT pg_backend_pid()").fetchone() for conn in conns}
        assert len(pids) == len(conns), "each connection on a server session of its own"
        for conn in conns:
            shown = conn.execute(
                "SELECT current_setting('jit'), current_setting('enable_bitmapscan'),"
                " current_setting('synchronous_commit'),"
                " (SELECT count(*) FROM pg_prepared_statements)"
            ).fetchone()
            assert shown == ("on", "on", "on", 0)
    finally:
        for conn in conns:
            conn.close()


@pytest.mark.parametrize("url", [TRANSACTION], indirect=True)
def test_poll_only_workers_are_woken_by_their_own_app_and_by_their_poll(url: str) -> None:
    """No LISTEN behind a transaction pooler: an enqueue wakes the workers of its own
    process at once; a worker elsewhere finds the job at its next poll. In between, an
    idle worker sleeps (it has no change counter to read every few milliseconds)."""
    app = App(url)
    assert not app._open_backend().pushes_changes
    ran: list[str] = []

    @app.task
    def note(label: str) -> None:
        ran.append(label)

    with worker_thread(app, poll_interval=60.0):
        note.enqueue("here")
        wait_until(lambda: ran == ["here"], timeout=5, what="the local wake-up")
    other = App(url)  # another process, as far as wake-ups go
    with worker_thread(app, poll_interval=0.2) as worker:
        wait_until(lambda: worker.counters["due_checks"] >= 1, what="the first poll")
        loops, polled = worker.counters["loops"], worker.counters["due_checks"]
        # the window: three polls, time enough for a loop reading a counter to spin
        wait_until(lambda: worker.counters["due_checks"] >= polled + 3, what="three polls")
        woke = worker.counters["loops"] - loops
        polls = worker.counters["due_checks"] - polled
        assert woke <= 2 * polls, f"an idle poll-only worker woke {woke} times in {polls} polls"
        other.enqueue("note", args=["there"], known=False)
        wait_until(lambda: ran == ["here", "there"], timeout=5, what="the poll")


@pytest.mark.parametrize("url", [TRANSACTION], indirect=True)
def test_a_poll_only_worker_process_finds_new_jobs_at_its_poll(
    app: App, spawn: Spawn, runs: Runs
) -> None:
    """A worker process behind the pooler hears of no enqueue elsewhere: its
    ``--poll-interval`` (5 s by default) is how soon it finds a new job."""
    app.enqueue("record", args=["first"], known=False)
    spawn("--concurrency", "2", "--poll-interval", "0.2")
    wait_until(lambda: runs.count()["first"] == 1, timeout=15, what="the first job")
    enqueued = time.monotonic()
    app.enqueue("record", args=["second"], known=False)
    wait_until(lambda: runs.count()["second"] == 1, timeout=5, what="the second job")
    assert time.monotonic() - enqueued < 2.5, "found at the 0.2 s poll, not the default 5 s"


@pytest.mark.parametrize("url", [TRANSACTION], indirect=True)
def test_a_schema_of_its_own_is_migrated_and_used_through_the_pooler(url: str) -> None:
    """The ``schema`` option sets no search_path: every statement names its schema, so it
    holds behind a transaction pooler, migrations (under a transaction-scoped advisory
    lock) and a handler's idempotency marker included."""
    app = App(url, backend_options={"schema": "jobs"})
    app.migrate()
    charged: list[str] = []

    @app.task
    def pay(ctx: JobContext, order: str) -> None:
        with ctx.transaction() as tx:
            if idempotent(tx, f"{order}:pay"):
                charged.append(order)

    pay.enqueue("o1")
    pay.enqueue("o1")
    with worker_thread(app):
        wait_until(lambda: app.stats().counts["default"]["done"] == 2, what="both runs")
    assert charged == ["o1"]
    assert db_execute(app, "SELECT count(*) FROM jobs.sqljobs_idempotency") == [(1,)]
    assert db_execute(app, "SELECT count(*) FROM public.sqljobs_jobs") == [(0,)]


@pytest.mark.parametrize("url", [SESSION], indirect=True)
def test_session_mode_keeps_listen(url: str) -> None:
    """In session mode the listener's connection keeps its server session, so a NOTIFY
    from another client reaches it, its own probe included."""
    app = App(url)
    backend = app._open_backend()
    assert backend.pushes_changes
    woken = threading.Event()
    backend.subscribe(lambda *_: woken.set())
    notifier = backend.notifier
    assert isinstance(notifier, PostgresNotifier) and notifier.wait_listening(5)
    woken.clear()
    App(url).enqueue("t", args=[1], known=False)
    assert woken.wait(5)
    wait_until(lambda: notifier._probe_due is None, timeout=5, what="the probe's NOTIFY")


@pytest.mark.parametrize("url", [TRANSACTION], indirect=True)
def test_listen_left_on_behind_a_transaction_pooler_is_reported(
    url: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Without ?listen=false, LISTEN through a transaction pooler seems to succeed and
    then hears nothing: the listener's probe finds that out and says what to do."""
    monkeypatch.setattr(notifiers_postgres, "PROBE_WAIT", 0.3)
    caplog.set_level(logging.DEBUG, logger="sqljobs")  # a probe not sent says so at DEBUG
    backend = App(url_options(url)[0])._open_backend()  # the URL without ?listen=false
    assert backend.pushes_changes
    backend.subscribe(lambda *_: None)
    assert backend.notifier.wait_listening(5)
    wait_until(lambda: "add ?listen=false" in caplog.text, timeout=10, what="the warning")


# -- the URL option ------------------------------------------------------------------------


def test_the_url_option_is_taken_out_before_libpq_sees_the_url() -> None:
    assert url_options("postgresql://u@h:6432/db?listen=false") == (
        "postgresql://u@h:6432/db",
        {"listen": False},
    )
    assert url_options("postgresql://u@h/db?sslmode=require&listen=off&host=%2Ftmp") == (
        "postgresql://u@h/db?sslmode=require&host=%2Ftmp",
        {"listen": False},
    )
    assert url_options("postgresql://u@h/db?sslmode=require") == (
        "postgresql://u@h/db?sslmode=require",
        {},
    )


def test_a_bad_url_option_fails_at_definition_and_a_contradiction_at_open() -> None:
    with pytest.raises(ConfigurationError, match="expected true or false"):
        App("postgresql://u@h/db?listen=maybe")
    app = App("postgresql://u@h/db?listen=false", backend_options={"listen": True})
    with pytest.raises(ConfigurationError, match="give it one way"):
        app._open_backend()


def test_the_testing_plugin_keeps_the_url_option(pg_template: str) -> None:
    """``sqljobs_url = postgresql://...?listen=false`` for the pytest plugin: its admin
    connection is given the URL without it, its test database's URL keeps it."""
    from sqljobs.testing.plugin import fresh_database

    from .conftest import PG_ADMIN_URL

    with fresh_database(PG_ADMIN_URL + "?listen=false") as fresh:
        assert fresh.endswith("?listen=false")
        app = App(fresh)
        app.migrate()
        assert not app._open_backend().pushes_changes
        assert app.stats().counts == {}


@pytest.mark.parametrize(
    "message",
    [
        'prepared statement "_pg3_0" does not exist',
        'prepared statement "_pg3_0" already exists',
        'bind message supplies 3 parameters, but prepared statement "_pg3_0" requires 6',
    ],
    ids=["missing", "doubled", "mismatched"],
)
def test_a_prepared_statement_lost_to_a_pooler_says_what_to_do(message: str) -> None:
    """What a transaction pooler does to psycopg's prepared statements when ``listen``
    is left on (each seen through pgbouncer 1.18): the error names the URL option."""
    from sqljobs.backends.postgres import described

    assert described(psycopg.OperationalError(message)).endswith(
        "add ?listen=false to the URL (poll-only mode, which keeps nothing on the session;"
        " see docs/pgbouncer.md)"
    )
    assert described(psycopg.OperationalError("server closed the connection")) == (
        "server closed the connection"
    )
