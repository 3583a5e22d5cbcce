"""Faults (issue 16): handlers that raise what is not an Exception or end their process, a
disk that fills up under a SQLite queue, a wall clock that jumps, and the durability each
SQLite connection commits with. PostgreSQL's own faults (a server down for long, timeouts,
an exhausted pool) are in test_faults_postgres.py."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import subprocess
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

import sqljobs
from sqljobs import App, BackendError, JobState, Retry
from sqljobs.backends.sqlite import SqliteBackend
from sqljobs.maintenance import Scheduler
from sqljobs.testing import Clock, stepped_worker
from sqljobs.worker import EventLog

from .apps.faults import RAISED
from .conftest import Runs, Spawn, db_execute, wait_until, worker_thread

SQLITE_ONLY = pytest.mark.parametrize("url", ["sqlite"], indirect=True)


def _job(app: App, job_id: int) -> sqljobs.Job:
    job = app.get_job(job_id)
    assert job is not None
    return job


# -- handlers that raise BaseException or end their process ----------------------------


@SQLITE_ONLY  # what a handler raises is the executor's business, the same on both backends
@pytest.mark.parametrize("kind", sorted(RAISED))
def test_an_async_handler_raising_a_base_exception_fails_its_attempt_and_the_loop_goes_on(
    app: App, kind: str
) -> None:
    """On the event loop, as on threads (test_worker.py): SystemExit, KeyboardInterrupt,
    GeneratorExit or a BaseException of the user's own is the attempt's failure, retried,
    then dead with its name; the loop keeps running the next async job."""
    raised = RAISED[kind]

    @app.task(retry=Retry(max_attempts=2, base=0))
    async def exits() -> None:
        raise raised("stop")

    @app.task
    async def fine() -> str:
        return "ok"

    bad = exits.enqueue().id
    with stepped_worker(app, concurrency=1) as worker:
        worker.until_event("finished", bad, state="dead")
        good = fine.enqueue().id
        worker.until_event("finished", good, state="done")
        assert worker.counters["leases_lost"] == 0
    job = _job(app, bad)
    assert job.attempts == 2 and job.crashes == 0
    assert [h["outcome"] for h in job.history] == ["failed", "failed"]
    assert job.last_error is not None and f"{kind}: stop" in job.last_error
    assert job.history[0]["exception"].endswith(kind)


@SQLITE_ONLY
def test_an_async_handler_raising_cancelled_error_itself_fails_its_attempt(app: App) -> None:
    """``CancelledError`` is how the worker cancels an async task it gave up; one the
    handler raises on its own (or lets out of its own cancelled subtask) was taken for
    that and dropped: the job stayed ``running``, its lease renewed, its slot held, for
    ever. It is the attempt's failure now."""

    @app.task(retry=Retry(max_attempts=2, base=0))
    async def cancels_itself() -> None:
        inner = asyncio.ensure_future(asyncio.sleep(10))
        inner.cancel()
        await inner  # its CancelledError comes out of the handler

    @app.task
    async def fine() -> None: ...

    bad = cancels_itself.enqueue().id
    with stepped_worker(app, concurrency=1) as worker:
        worker.until_event("finished", bad, state="dead")
        good = fine.enqueue().id
        worker.until_event("finished", good, state="done")
    job = _job(app, bad)
    assert job.attempts == 2 and [h["outcome"] for h in job.history] == ["failed", "failed"]
    assert job.last_error is not None and "CancelledError" in job.last_error


@SQLITE_ONLY
def test_a_custom_base_exception_on_a_thread_fails_its_attempt(app: App) -> None:
    raised = RAISED["Abort"]

    @app.task(retry=Retry(max_attempts=1))
    def aborts() -> None:
        raise raised("user abort")

    job_id = aborts.enqueue().id
    with stepped_worker(app, concurrency=1) as worker:
        worker.until_event("finished", job_id, state="dead")
    job = _job(app, job_id)
    assert job.last_error == "failed 1 of 1 attempts; last: Abort: user abort"
    assert job.history[0]["exception"] == "tests.apps.faults.Abort"


@SQLITE_ONLY
def test_base_exceptions_in_worker_processes_fail_attempts_and_kill_no_process(
    app: App, spawn: Spawn, runs: Runs
) -> None:
    """Under ``--processes``, on threads and on the loop: every kind fails its attempts
    (no crash counted, no child process replaced) and the jobs around them all run."""
    bad = [
        app.enqueue(task, args=[f"{task}-{kind}", kind], known=False).id
        for task in ("raise_base", "raise_base_async")
        for kind in sorted(RAISED)
    ]
    good = [app.enqueue("record", args=[f"ok{i}"], known=False).id for i in range(10)]
    proc = spawn("--processes", "2", "--concurrency", "2", app="tests.apps.faults:app")
    wait_until(lambda: all(_job(app, i).state is JobState.DEAD for i in bad), timeout=30)
    wait_until(lambda: all(_job(app, i).state is JobState.DONE for i in good), timeout=30)
    for job_id in bad:
        job = _job(app, job_id)
        assert job.crashes == 0 and job.attempts == job.max_attempts, job
        assert {h["outcome"] for h in job.history} == {"failed"}
    children = {pid for _, pid, _ in runs.lines()}
    assert len(children) <= 2, "no child process died and was replaced"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=15) == 0


@SQLITE_ONLY
def test_os_exit_in_a_handler_is_a_crash_another_worker_recovers(
    app: App, spawn: Spawn, runs: Runs
) -> None:
    """``os._exit`` ends the worker process at once: nothing is written. The job's lease
    runs out, the surviving worker finds its holder dead, counts a crash and runs it."""
    job_id = app.enqueue("exit_once", args=["quits"], known=False).id
    victim = spawn("--concurrency", "2", lease=1.0, app="tests.apps.faults:app")
    assert victim.wait(timeout=20) == 7, "the handler's os._exit ended its worker"
    assert _job(app, job_id).state is JobState.RUNNING  # nobody could say otherwise
    survivor = spawn("--concurrency", "2", lease=1.0, app="tests.apps.faults:app")
    wait_until(lambda: _job(app, job_id).state is JobState.DONE, timeout=20)
    job = _job(app, job_id)
    assert job.crashes == 1 and job.attempts == 2 and job.errors == 0
    assert [h["outcome"] for h in job.history] == ["crashed"]
    assert runs.count("start")["quits"] == 2 and runs.count("end")["quits"] == 1
    survivor.send_signal(signal.SIGTERM)
    assert survivor.wait(timeout=15) == 0


@SQLITE_ONLY
def test_os_exit_under_processes_is_handed_back_and_the_supervisor_lives(
    app: App, spawn: Spawn, runs: Runs
) -> None:
    job_id = app.enqueue("exit_once", args=["quits"], known=False).id
    others = [app.enqueue("record", args=[f"ok{i}"], known=False).id for i in range(5)]
    proc = spawn("--processes", "2", "--concurrency", "2", app="tests.apps.faults:app")
    wait_until(lambda: _job(app, job_id).state is JobState.DONE, timeout=30)
    wait_until(lambda: all(_job(app, i).state is JobState.DONE for i in others), timeout=30)
    job = _job(app, job_id)
    assert job.crashes == 1 and job.attempts == 2
    assert [h["outcome"] for h in job.history] == ["crashed"]
    assert proc.poll() is None, "the supervisor survived its child's os._exit"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=15) == 0


# -- durability of each SQLite connection ------------------------------------------------

SYNC_LEVELS = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}


@SQLITE_ONLY
def test_each_sqlite_write_commits_at_the_synchronous_level_the_docs_give(app: App) -> None:
    """docs/backends.md: enqueues, ``ctx.transaction()``, effect records and schedule ticks
    commit with ``synchronous=FULL``; a worker's own state changes with ``NORMAL``. Triggers
    read ``pragma_synchronous`` on the connection that writes, inside its transaction."""

    @app.periodic(every=0.1, overlap="skip")
    def often() -> None: ...

    @app.task
    def pay(ctx: sqljobs.JobContext, order: str) -> None:
        with ctx.transaction() as tx:
            tx.execute("INSERT INTO ledger VALUES (?)", (order,))

    @app.task
    def charge(ctx: sqljobs.JobContext, order: str) -> str:
        return sqljobs.perform_once(ctx, f"{order}:charge", lambda key: key)

    app.migrate()
    level = "(SELECT synchronous FROM pragma_synchronous)"
    db_execute(app, "CREATE TABLE ledger (entry TEXT)")
    db_execute(app, "CREATE TABLE probe (what TEXT, level INTEGER)")
    for trigger in (
        "AFTER INSERT ON sqljobs_jobs BEGIN INSERT INTO probe "
        f"SELECT 'enqueue ' || NEW.task, {level}; END",
        "AFTER UPDATE OF state ON sqljobs_jobs WHEN NEW.state = 'done' BEGIN "
        f"INSERT INTO probe SELECT 'done ' || NEW.task, {level}; END",
        f"AFTER INSERT ON ledger BEGIN INSERT INTO probe SELECT 'ledger', {level}; END",
        "AFTER UPDATE OF state ON sqljobs_effects WHEN NEW.state = 'done' BEGIN "
        f"INSERT INTO probe SELECT 'effect', {level}; END",
    ):
        db_execute(app, f"CREATE TRIGGER probe_{abs(hash(trigger))} {trigger}")
    ids = [pay.enqueue("o-1").id, charge.enqueue("o-2").id]
    with stepped_worker(app, concurrency=2) as worker:
        for job_id in ids:
            worker.until_event("finished", job_id, state="done")
        worker.until(lambda: [j for j in app.list_jobs() if j.task == "often"], what="a tick")
    seen = {what: SYNC_LEVELS[n] for what, n in db_execute(app, "SELECT * FROM probe")}
    seen.pop("done often", None)  # (a tick's run may have ended too: NORMAL, as "charge")
    assert seen == {
        "enqueue pay": "FULL",  # the App's own connection
        "enqueue charge": "FULL",
        "enqueue often": "FULL",  # the worker's scheduler, on the worker's connection
        "ledger": "FULL",  # ctx.transaction()
        "effect": "FULL",  # perform_once's record, on the worker's connection
        "done pay": "FULL",  # completed inside its ctx.transaction(): one commit
        "done charge": "NORMAL",  # a worker's own outcome: a loss only re-runs the job
    }


# -- a disk that fills up under a SQLite queue ---------------------------------------------


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 2 MB tmpfs of the test's own (mounting needs root): skipped where it cannot be
    mounted, but in CI that fails."""
    where = tmp_path / "disk"
    where.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(where)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        why = f"cannot mount a small tmpfs to fill: {mounted.stderr.strip() or mounted.returncode}"
        if os.environ.get("CI") == "true":
            pytest.fail(why)
        pytest.skip(why)
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def _fill(path: Path) -> None:
    """Write ``path`` until the disk under it refuses another byte."""
    with path.open("wb", buffering=0) as filler:
        for size in (64 * 1024, 4096, 512, 1):
            with contextlib.suppress(OSError):
                while True:
                    filler.write(b"x" * size)
    with contextlib.suppress(OSError), path.open("ab", buffering=0) as filler:
        filler.write(b"x")
        raise AssertionError("the disk still had room")


def test_threads_of_one_process_take_turns_to_write_and_one_kept_waiting_is_told(
    tmp_path: Path,
) -> None:
    """A SQLite write waits for another thread's write of the same process in a queue, not
    in SQLite's busy handler; one kept waiting past the busy timeout gets a clear error, and
    the next write goes through once the lock is free."""
    app = App(f"sqlite:///{tmp_path / 'q.db'}", backend_options={"busy_timeout": 0.3})
    app.migrate()
    backend = app.backend
    assert isinstance(backend, SqliteBackend)
    holding, release = threading.Event(), threading.Event()

    def hold(conn: object) -> None:
        holding.set()
        release.wait(10)

    holder = threading.Thread(target=backend.write, args=(hold,))
    holder.start()
    assert holding.wait(10)
    with pytest.raises(BackendError, match="another thread of this process held the write"):
        backend.write(lambda conn: None)
    release.set()
    holder.join(10)
    assert backend.write(lambda conn: 7) == 7
    app.close()


def test_a_full_disk_fails_enqueues_clearly_loses_nothing_and_the_worker_recovers(
    small_disk: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Jobs fall due while the disk is full: the worker's claims fail, it says why and
    retries; the enqueue that found no room is refused with a message naming the disk.
    Once a file is deleted, everything committed runs."""
    app = App(f"sqlite:///{small_disk / 'jobs.db'}")
    ran: list[int] = []

    @app.task
    def note(n: int) -> None:
        ran.append(n)

    committed = [note.enqueue(i).id for i in range(20)]
    filler = small_disk / "filler"
    events = EventLog()
    with worker_thread(app, concurrency=2, on_event=events):
        for job_id in committed:
            events.wait("finished", job_id, state="done")
        due_later = [note.with_options(delay=0.3).enqueue(50 + i).id for i in range(5)]
        committed += due_later
        _fill(filler)
        refused: BackendError | None = None
        for i in range(2000):  # the WAL may have room for a few before it must grow
            try:
                committed.append(note.enqueue(100 + i).id)
            except BackendError as exc:
                refused = exc
                break
        assert refused is not None, "enqueues went on with the disk full"
        message = str(refused)
        assert "disk" in message and "full" in message and "jobs.db" in message, message
        assert "free space" in message, message
        cause = refused.__cause__
        assert cause is not None and getattr(cause, "sqlite_errorcode", None) == 13  # FULL
        wait_until(
            lambda: any("disk holding" in r.getMessage() for r in caplog.records
                        if r.name == "sqljobs.worker" and r.levelno == logging.WARNING),
            what="the worker to meet the full disk",
        )  # fmt: skip
        assert all(_job(app, i).state is JobState.PENDING for i in due_later)
        filler.unlink()  # space comes back
        late = note.enqueue(9999).id
        for job_id in [*committed, late]:
            events.wait("finished", job_id, state="done", timeout=30)
    assert app.stats().total("done") == len(committed) + 1
    assert len(ran) == len(set(ran)) == len(committed) + 1, "each ran once"


# -- a wall clock that jumps -------------------------------------------------------------

START = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)


def _holding_worker(app: App, clock: Clock) -> tuple[sqljobs.Worker, int, threading.Event]:
    """A stepped worker running one job whose handler waits to be released."""
    release, began = threading.Event(), threading.Event()

    @app.task(lease=30)
    def hold() -> None:
        began.set()
        release.wait(20)

    job_id = hold.enqueue().id
    worker = sqljobs.Worker(app, concurrency=1, install_signal_handlers=False)
    worker.start()
    worker.run_until(began.is_set)
    return worker, job_id, release


def _peer(app: App) -> sqljobs.Worker:
    """Another worker on the same database whose reaper is always due."""
    peer = sqljobs.Worker(app, concurrency=1, install_signal_handlers=False, reap_interval=1e-6)
    peer.start()
    peer.run_once()
    return peer


@pytest.mark.parametrize("step", [timedelta(hours=3), -timedelta(hours=3)], ids=["ahead", "back"])
def test_a_wall_clock_jump_expires_no_healthy_lease(tmp_path: Path, step: timedelta) -> None:
    """Leases and worker liveness are wall-clock times (on SQLite, the App's clock). After
    a jump forward every lease looks expired and every worker dead: a peer's reaper that
    runs before the holder's next heartbeat would take healthy jobs as crashes. A worker
    that sees the clock jump heartbeats at once and holds its reaper for a lease, so live
    workers renew first. After a jump back leases look longer; the next heartbeat renews
    them from the new time."""
    clock = Clock(START)
    app = App(f"sqlite:///{tmp_path / 'jobs.db'}", clock=clock)
    holder, job_id, release = _holding_worker(app, clock)
    peer = _peer(app)
    try:
        clock.set(START + step)
        peer.run_once()  # it notices the jump first: its reaper must wait
        holder.run_once()  # and the holder heartbeats at the new time
        peer.run_once()
        job = _job(app, job_id)
        assert job.state is JobState.RUNNING and job.attempts == 1
        assert job.lease_until is not None and clock() < job.lease_until <= clock() + 30
        release.set()
        holder.run_until(lambda: _job(app, job_id).state is JobState.DONE)
    finally:
        release.set()
        for worker in (holder, peer):
            worker.stop()
            with contextlib.suppress(Exception):
                worker.run_until(lambda w=worker: w.run_once().stopped, timeout=5)  # type: ignore[misc]
            worker.close()
    job = _job(app, job_id)
    assert job.crashes == 0 and job.lease_expiries == 0 and job.history == []
    assert holder.counters["leases_lost"] == 0


def test_schedules_fire_once_per_slot_when_the_clock_jumps(tmp_path: Path) -> None:
    """Forward by five hours: one catch-up run (``misfire="catch_up_once"``), not three
    hundred. Back by three hours: nothing fires again until the clock reaches the next
    slot not yet fired: the slots between were run already, each once."""
    clock = Clock(START)
    app = App(f"sqlite:///{tmp_path / 'jobs.db'}", clock=clock)

    @app.periodic(every=60)
    def minutely() -> None: ...

    scheduler = Scheduler(app, app.backend, clock=clock)
    scheduler.sync()
    clock.advance(60)
    assert scheduler.run_once().enqueued == 1
    clock.advance(timedelta(hours=5))
    assert scheduler.run_once().enqueued == 1, "one run for the missed ticks"
    assert scheduler.run_once().enqueued == 0
    resumed = clock()
    clock.set(resumed - timedelta(hours=3).total_seconds())
    for _ in range(3):
        clock.advance(timedelta(hours=1) - timedelta(seconds=10))
        assert scheduler.run_once().enqueued == 0, "slots already fired do not fire again"
    clock.set(resumed + 60)
    assert scheduler.run_once().enqueued == 1
    keys = [j.key for j in app.list_jobs(limit=100)]
    assert len(keys) == len(set(keys)) == 3
