"""Control over work in flight, in one process on both backends: results and waiting,
cancelling pending and running jobs, pausing queues, progress, retention.

Worker processes, and a waiter in another process, are in test_control_processes.py.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

from sqljobs import (
    App,
    ConfigurationError,
    JobCancelled,
    JobContext,
    JobFailed,
    JobFilter,
    JobNotFound,
    JobState,
    Progress,
    ResultTimeout,
    Retention,
    Retry,
    Worker,
)
from sqljobs.backends.base import Claim
from sqljobs.jobs import HeldJob
from sqljobs.maintenance import Pruner, Reaper
from sqljobs.testing import stepped_worker

from .conftest import db_execute, expire_lease, worker_thread

# -- results -------------------------------------------------------------------------------


def test_a_result_is_stored_and_a_waiting_caller_gets_it(app: App) -> None:
    @app.task
    def double(x: int) -> dict[str, int]:
        return {"twice": 2 * x}

    handle = double.enqueue(21)
    with stepped_worker(app) as worker:
        assert worker.result(handle) == {"twice": 42}
    again = app.job(handle.id)  # a handle for any id, from anywhere
    assert again.result(timeout=0) == {"twice": 42}
    job = again.refresh()
    assert job.state is JobState.DONE and job.result == {"twice": 42} and job.attempts == 1


def test_result_async_waits_without_blocking_the_loop(app: App) -> None:
    @app.task
    async def triple(x: int) -> int:
        return 3 * x

    handle = triple.enqueue(5)

    async def main() -> tuple[int, int]:
        ticks = 0

        async def ticker() -> None:  # runs while result_async waits: the loop is free
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0.001)

        beat = asyncio.create_task(ticker())
        value = await handle.result_async(timeout=10)
        beat.cancel()
        return value, ticks

    with worker_thread(app):
        value, ticks = asyncio.run(main())
    assert value == 15 and ticks > 0


def test_a_dead_job_raises_job_failed_with_its_last_error(app: App) -> None:
    @app.task(retry=Retry(max_attempts=1))
    def broken() -> None:
        raise RuntimeError("the printer is on fire")

    handle = broken.enqueue()
    with stepped_worker(app) as worker, pytest.raises(JobFailed) as failed:
        worker.result(handle)
    assert failed.value.state == "dead" and failed.value.job_id == handle.id
    assert "the printer is on fire" in (failed.value.error or "")


def test_a_value_that_is_not_json_fails_the_attempt_with_a_clear_error(app: App) -> None:
    @app.task(retry=Retry(max_attempts=1))
    def leaky() -> object:
        return object()

    handle = leaky.enqueue()
    with stepped_worker(app) as worker, pytest.raises(JobFailed) as failed:
        worker.result(handle)
    assert "return value of task 'leaky' is not JSON-serialisable" in (failed.value.error or "")
    assert "store_result=False" in (failed.value.error or "")


def test_a_task_can_opt_out_of_storing_its_result(app: App) -> None:
    @app.task(store_result=False)
    def big() -> object:
        return object()  # not even looked at

    handle = big.enqueue()
    with stepped_worker(app) as worker:
        assert worker.result(handle) is None
    assert handle.refresh().state is JobState.DONE


def test_waiting_times_out_and_the_job_goes_on(app: App) -> None:
    @app.task
    def later() -> int:
        return 1

    handle = later.enqueue()
    started = time.monotonic()
    with pytest.raises(ResultTimeout, match=r"job \d+ \(later\) is still pending"):
        handle.result(timeout=0.2)
    assert time.monotonic() - started < 2
    assert isinstance(ResultTimeout("x"), TimeoutError)
    with stepped_worker(app) as worker:
        assert worker.result(handle) == 1


@pytest.mark.parametrize("bad", [-1, float("nan"), "10", True])
def test_a_bad_timeout_is_refused(app: App, bad: Any) -> None:
    with pytest.raises(ConfigurationError, match="timeout"):
        app.job(1).result(timeout=bad)


def test_a_handle_for_a_job_that_does_not_exist(app: App) -> None:
    with pytest.raises(JobNotFound, match="job 999"):
        app.job(999).refresh()
    with pytest.raises(JobNotFound):
        app.job(999).result(timeout=1)
    with pytest.raises(ConfigurationError, match="job id is an integer"):
        app.job("7")  # type: ignore[arg-type]


def test_many_waiters_in_threads_each_get_their_own_result(app: App) -> None:
    @app.task
    def square(x: int) -> int:
        return x * x

    handles = [square.enqueue(i) for i in range(20)]
    got: dict[int, int] = {}

    def wait(i: int) -> None:
        got[i] = handles[i].result(timeout=20)

    threads = [threading.Thread(target=wait, args=(i,)) for i in range(20)]
    for thread in threads:
        thread.start()
    with stepped_worker(app) as worker:  # the waiters block in their threads meanwhile
        worker.until(lambda: not any(t.is_alive() for t in threads), what="every waiter")
    assert got == {i: i * i for i in range(20)}


# -- cancellation --------------------------------------------------------------------------


def test_cancelling_a_pending_job_needs_no_worker_and_charges_nothing(app: App) -> None:
    @app.task
    def send(to: str) -> None:
        raise AssertionError("a cancelled job must never run")

    handle = send.with_options(key="mail:1", key_scope="active").enqueue("ann")
    assert handle.cancel() is True
    job = handle.refresh()
    assert job.state is JobState.CANCELLED and job.attempts == 0 and job.finished_at
    assert app.cancel(handle.id) is False, "cancelling twice is harmless"
    with pytest.raises(JobCancelled, match=f"job {handle.id} \\(send\\) was cancelled"):
        handle.result(timeout=1)
    again = send.with_options(key="mail:1", key_scope="active").enqueue("ann")
    assert again.created and again.id != handle.id, "an 'active' key is free once cancelled"
    assert app.cancel(again.id)
    with Worker(app, install_signal_handlers=False) as worker:
        worker.run_once()
    assert worker.counters["claims"] >= 1 and worker.counters["claimed"] == 0
    with pytest.raises(JobNotFound):
        app.cancel(12345)


def test_a_retained_key_keeps_refusing_after_a_cancel(app: App) -> None:
    @app.task
    def send(to: str) -> None: ...

    first = send.with_options(key="mail:2").enqueue("bob")
    app.cancel(first.id)
    second = send.with_options(key="mail:2").enqueue("bob")
    assert not second.created and second.id == first.id


def test_cancelling_a_running_cooperative_thread_task(app: App) -> None:
    seen: list[str] = []
    started = threading.Event()

    @app.task
    def crawl(ctx: JobContext) -> str:
        started.set()
        for _ in range(3000):
            if ctx.cancelled:
                seen.append("cancelled")
                ctx.check_cancelled()
            time.sleep(0.01)
        return "finished"

    handle = crawl.enqueue()
    with stepped_worker(app) as worker:
        worker.until(started.is_set, what="started")
        assert app.cancel(handle.id)
        worker.until_event("cancelled", job_id=handle.id)
        worker.until_event("discarded", job_id=handle.id)
    assert seen == ["cancelled"]
    job = handle.refresh()
    assert job.state is JobState.CANCELLED and job.errors == 0
    assert job.history[-1]["outcome"] == "cancelled"
    assert worker.counters["cancelled_running"] == 1


def test_cancelling_a_running_async_task_cancels_it(app: App) -> None:
    seen: list[str] = []
    started, cancelled = threading.Event(), threading.Event()

    @app.task
    async def wait_long() -> None:
        started.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            seen.append("CancelledError")
            cancelled.set()
            raise

    handle = wait_long.enqueue()
    with stepped_worker(app) as worker:
        worker.until(started.is_set, what="the handler to start")
        app.cancel(handle.id)
        worker.until_event("cancelled", job_id=handle.id)
        worker.until(cancelled.is_set, what="the handler's coroutine cancelled")
    assert seen == ["CancelledError"]
    assert handle.refresh().state is JobState.CANCELLED


def test_a_task_that_ignores_the_cancel_runs_on_but_its_outcome_is_discarded(app: App) -> None:
    release = threading.Event()
    started = threading.Event()

    @app.task
    def stubborn() -> str:
        started.set()
        release.wait(30)
        return "done anyway"

    handle = stubborn.enqueue()
    with stepped_worker(app) as worker:
        worker.until(started.is_set, what="started")
        app.cancel(handle.id)
        worker.until_event("cancelled", job_id=handle.id)
        release.set()
        worker.until_event("discarded", job_id=handle.id)
    job = handle.refresh()
    assert job.state is JobState.CANCELLED and job.result is None
    assert worker.counters["stale_results"] == 1


def test_a_buffered_job_that_is_cancelled_never_starts(
    app: App, caplog: pytest.LogCaptureFixture
) -> None:
    """Claimed into the worker's buffer behind a running job, then cancelled: it is let
    go without running, and not taken for a handler that will not stop."""
    release = threading.Event()
    ran: list[str] = []

    @app.task
    def step(name: str) -> None:
        ran.append(name)
        if name == "first":
            release.wait(30)

    first, second = step.enqueue("first"), step.enqueue("second")
    options: dict[str, Any] = {"concurrency": 1, "prefetch": 1, "cancel_grace": 0.05}
    with stepped_worker(app, **options) as worker:
        worker.until_event("claimed", job_id=second.id)
        app.cancel(second.id)
        worker.until_event("cancelled", job_id=second.id)
        release.set()
        worker.until_event("finished", job_id=first.id)
    assert ran == ["first"]
    assert second.refresh().state is JobState.CANCELLED
    assert not [r for r in caplog.records if "still runs" in r.getMessage()]


def test_a_running_job_is_found_cancelled_at_the_next_heartbeat(url: str) -> None:
    """A cancel from another App (another process) reaches the worker by its heartbeat
    where nothing pushes (SQLite), and by the notifier where it does."""
    app = App(url)
    started = threading.Event()

    @app.task(lease=0.9)  # a heartbeat every 0.3 s
    def crawl(ctx: JobContext) -> None:
        started.set()
        while not ctx.cancelled:
            time.sleep(0.01)

    handle = crawl.enqueue()
    with stepped_worker(app) as worker:
        worker.until(started.is_set, what="the handler to start")
        other = App(url)
        assert other.cancel(handle.id)
        other.close()
        worker.until_event("cancelled", job_id=handle.id)


def test_cancel_many_by_queue_task_and_state(app: App) -> None:
    @app.task(queue="mail")
    def send(n: int) -> None: ...

    @app.task(queue="other")
    def keep(n: int) -> None: ...

    send.enqueue_many([(i,) for i in range(2500)])  # more than one batch
    kept = keep.enqueue(1)
    assert app.cancel_many(queue="mail", state="pending") == 2500
    assert app.cancel_many(task="send") == 0
    assert app.stats().counts["mail"]["cancelled"] == 2500
    assert kept.refresh().state is JobState.PENDING
    with pytest.raises(ConfigurationError, match="needs a queue, task or state"):
        app.cancel_many()
    with pytest.raises(ConfigurationError, match="'pending', 'waiting', 'running' or None"):
        app.cancel_many(state="done")
    with pytest.raises(ConfigurationError, match="queue name"):
        app.cancel_many(queue="bad queue")


def test_cancel_takes_an_id_a_filter_or_queue_task_and_state(app: App) -> None:
    @app.task(queue="mail")
    def send(n: int) -> None: ...

    handles = send.enqueue_many([(i,) for i in range(5)])
    assert app.cancel(handles[0].id) is True
    assert app.cancel(JobFilter(ids=(handles[1].id, handles[2].id))) == 2
    assert app.cancel(queue="mail", state="pending") == 2
    assert app.cancel(task="send") == 0
    assert app.cancel_job(2**40) is False, "the alias answers False for no such job"
    with pytest.raises(ConfigurationError, match="not both"):
        app.cancel(JobFilter(queue="mail"), state="pending")  # type: ignore[call-overload]
    with pytest.raises(ConfigurationError, match="names one job"):
        app.cancel(handles[0].id, queue="mail")  # type: ignore[call-overload]
    with pytest.raises(ConfigurationError, match="needs a queue, task or state"):
        app.cancel()


# -- pausing queues ------------------------------------------------------------------------


def test_a_paused_queue_is_not_claimed_from_and_resumes(app: App) -> None:
    @app.task(queue="mail")
    def send(n: int) -> None: ...

    @app.task(queue="other")
    def other(n: int) -> None: ...

    before = time.time()
    assert app.pause_queue("mail") is True
    assert app.pause_queue("mail") is False, "pausing twice is harmless"
    (paused_at,) = app.paused_queues().values()  # when: the first pause's time, kept
    assert list(app.paused_queues()) == ["mail"] and paused_at is not None
    assert before - 5 <= paused_at <= time.time() + 5  # the server's clock on PostgreSQL
    held = send.enqueue(1)  # enqueues still succeed
    with stepped_worker(app) as worker:
        elsewhere = other.enqueue(2)  # the worker works: the other queue drains
        assert worker.result(elsewhere) is None
        assert held.refresh().state is JobState.PENDING
        queues = {q.name: q for q in app.queues()}
        assert queues["mail"].paused and not queues["other"].paused
        name, paused, counts, age = queues["mail"]  # a (name, paused, counts, age) tuple
        assert (name, paused, counts["pending"]) == ("mail", True, 1) and age is not None
        assert app.stats().paused == ["mail"]
        assert app.resume_queue("mail") is True
        assert worker.result(held) is None
        worker.until_event("finished", job_id=held.id)
    assert app.resume_queue("mail") is False
    assert worker.counters["claimed"] == 2
    with pytest.raises(ConfigurationError, match="queue name"):
        app.pause_queue("")


def test_schedules_still_enqueue_into_a_paused_queue(app: App) -> None:
    @app.task(queue="mail")
    def digest() -> None: ...

    app.pause_queue("mail")
    app.schedule("digest", every=0.05, task="digest")
    with Worker(app, install_signal_handlers=False) as worker:
        worker.run_until(lambda: app.stats().counts.get("mail", {}).get("pending", 0) >= 1)
        worker.run_once()
    assert worker.counters["claimed"] == 0, "the tick's job waits for the resume"


def test_an_idle_worker_does_not_spin_on_a_paused_queue(app: App) -> None:
    @app.task(queue="mail")
    def send(n: int) -> None: ...

    app.pause_queue("mail")
    send.enqueue(1)
    with Worker(app, install_signal_handlers=False) as worker:
        waits = [worker.run_once().wait for _ in range(3)]
    assert worker.counters["claimed"] == 0
    assert min(waits[1:]) > 0.001, f"a paused backlog must not make the worker spin: {waits}"


# -- progress ------------------------------------------------------------------------------


def test_progress_is_visible_while_the_job_runs_and_kept_at_its_end(app: App) -> None:
    step = threading.Event()
    go_on = threading.Event()

    @app.task
    def export(ctx: JobContext, pages: int) -> int:
        ctx.progress(0, total=pages, note="starting")
        ctx.progress(1, total=pages, note="page 1")
        step.set()
        go_on.wait(10)
        for page in range(2, pages + 1):
            ctx.progress(page, total=pages, note=f"page {page}")
        return pages

    handle = export.enqueue(10)

    def written() -> Progress | None:
        progress = handle.refresh().progress
        return progress if progress is not None and progress.done >= 1 else None

    with stepped_worker(app) as worker:
        worker.until(step.is_set, what="the handler's first page")
        # the worker writes the latest report on its own beat, and tells no one: its
        # write is seen in the job (the first report may have gone out alone)
        progress = worker.until(written, what="the report of page 1 written")
        assert (progress.done, progress.total, progress.note) == (1, 10, "page 1")
        assert str(progress) == "1/10 (10%) page 1"
        go_on.set()
        assert worker.result(handle) == 10
    final = handle.refresh().progress
    assert final is not None and (final.done, final.note) == (10, "page 10")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((-1,), "done=...\\) must be >= 0"),
        ((float("inf"),), "finite number"),
        (("3",), "finite number"),
        ((1, 0), "total=...\\) must be > 0"),
        ((1, 2, 3), "note=...\\) must be a string"),
        ((1, 2, "x" * 1001), "over 1000"),
    ],
)
def test_bad_progress_is_refused_in_the_handler(
    app: App, args: tuple[Any, ...], message: str
) -> None:
    @app.task(retry=Retry(max_attempts=1))
    def report(ctx: JobContext) -> None:
        ctx.progress(*args)

    handle = report.enqueue()
    with stepped_worker(app) as worker, pytest.raises(JobFailed, match=message):
        worker.result(handle)


def test_progress_writes_are_fenced(app: App) -> None:
    """A report from a worker that no longer holds the job is refused, at the backend and
    in a worker that lost its lease."""

    @app.task
    def t() -> None: ...

    backend = app.backend
    job_id = t.enqueue().id
    (first,) = backend.claim_jobs(Claim("w1", None, 1))
    assert backend.save_progress([(HeldJob(job_id, first.token), '{"done": 1}')]) == {job_id}
    expire_lease(app, job_id)
    Reaper(backend).run_once()  # the lease ran out: back to pending, then taken over
    (second,) = backend.claim_jobs(Claim("w2", None, 1))
    assert second.token > first.token
    stale = backend.save_progress([(HeldJob(job_id, first.token), '{"done": 99}')])
    assert stale == set()
    progress = app.job(job_id).refresh().progress
    assert progress is not None and progress.done == 1, "the stale report was not written"
    assert backend.save_progress([(HeldJob(job_id, second.token), '{"done": 2}')]) == {job_id}


def test_a_worker_whose_report_is_refused_tells_its_handler(app: App) -> None:
    started = threading.Event()
    answers: list[bool] = []

    @app.task(lease=30)
    def slow(ctx: JobContext) -> None:
        started.set()
        while not ctx.lease_lost:
            answers.append(ctx.progress(len(answers)))
            time.sleep(0.05)

    handle = slow.enqueue()
    with stepped_worker(app) as worker:
        worker.until(started.is_set, what="the handler to start")
        bumped = time.monotonic()  # as if another worker had taken the job over
        bump = "UPDATE sqljobs_jobs SET token = token + 1 WHERE id = ?"
        db_execute(app, bump, None, (handle.id,))
        worker.until_event("lease_lost", job_id=handle.id)
        # the refused report asked for a heartbeat at once, not at the next one (10 s)
        assert time.monotonic() - bumped < 5
    assert answers and all(answers[:1])


# -- retention -----------------------------------------------------------------------------


def test_each_final_state_is_kept_for_its_own_age(url: str) -> None:
    now = [1_000_000.0]
    app = App(url, clock=lambda: now[0])
    assert app.retention == Retention(done=86400, cancelled=7 * 86400, dead=7 * 86400)
    ids = {state: [app.enqueue("t", known=False).id for _ in range(3)] for state in
           ("done", "cancelled", "dead")}  # fmt: skip
    for state, job_ids in ids.items():
        for job_id in job_ids:
            db_execute(
                app,
                f"UPDATE sqljobs_jobs SET state = '{state}', finished_at = ? WHERE id = ?",
                f"UPDATE sqljobs_jobs SET state = '{state}', finished_at = to_timestamp(?) "
                "WHERE id = ?",
                (now[0], job_id),
            )
    pruner = Pruner(app.backend, app.retention, batch=2)
    now[0] += 86400 + 1
    assert pruner.run_once() == 3
    assert app.stats().total("done") == 0 and app.stats().total("dead") == 3
    now[0] += 6 * 86400
    assert pruner.run_once() == 6
    assert sum(app.stats().total(s) for s in ("done", "dead", "cancelled")) == 0


def test_retention_settings(url: str) -> None:
    assert Retention.of(3600) == Retention(done=3600, cancelled=3600)
    forever = Retention(done=None, cancelled=None, dead=None, keys=None, events=None)
    assert Retention.of(0) == Retention.of(None) == forever
    assert Retention(done=None).ages() == {"cancelled": 7 * 86400.0, "dead": 7 * 86400.0}
    assert "done 1 d" in Retention().describe()
    with pytest.raises(ConfigurationError, match="retention"):
        App(url, retention=-1)
    with pytest.raises(ConfigurationError, match=r"Retention\(dead=\.\.\.\)"):
        Retention(dead="soon")  # type: ignore[arg-type]


def test_the_worker_banner_names_paused_queues_and_the_retention(
    app: App, caplog: pytest.LogCaptureFixture
) -> None:
    @app.task(queue="mail")
    def send() -> None: ...

    app.pause_queue("mail")
    with (
        caplog.at_level("INFO", logger="sqljobs.worker"),
        Worker(app, install_signal_handlers=False),
    ):
        pass
    banner = next(r.getMessage() for r in caplog.records if "started on" in r.getMessage())
    assert "queues all (paused: mail)" in banner
    assert "retention done 1 d, cancelled 7 d, dead 7 d" in banner


def test_a_retention_of_zero_for_one_state_is_refused() -> None:
    """Zero would delete a job the moment it ends (and its result with it): None keeps
    such jobs for ever, a positive age keeps them that long."""
    with pytest.raises(ConfigurationError, match=r"Retention\(dead=\.\.\.\) must be > 0"):
        Retention(dead=0)
