"""Hooks (@app.on) and middleware (@app.middleware, @app.enqueue_middleware), on both
backends: each event once with the right data, a raising hook harmless, middleware order
and what an exception does in it."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

import sqljobs
from sqljobs import App, JobState, payload
from sqljobs.hooks import AttemptInfo, EnqueueInfo, JobEvent, WorkerLifecycle
from sqljobs.testing import stepped_worker


class Recorder:
    """A hook for every event that keeps what it was told and lets a test wait for it."""

    def __init__(self, app: App) -> None:
        self.seen: list[Any] = []
        self._changed = threading.Condition()
        for event in sqljobs.hooks.EVENTS:
            app.on(event, self)

    def __call__(self, data: Any) -> None:
        with self._changed:
            self.seen.append(data)
            self._changed.notify_all()

    def of(self, event: str, job_id: int | None = None) -> list[Any]:
        with self._changed:
            return [
                d
                for d in self.seen
                if d.event == event and job_id in (None, getattr(d, "job_id", None))
            ]

    def wait(self, event: str, job_id: int | None = None, count: int = 1) -> list[Any]:
        with self._changed:
            if not self._changed.wait_for(lambda: len(self.of(event, job_id)) >= count, 10):
                raise AssertionError(f"no {count} {event} for {job_id}; seen {self.seen}")
        return self.of(event, job_id)


def test_each_event_is_told_once_with_what_happened(app: App) -> None:
    told = Recorder(app)
    cancel_me_started = threading.Event()

    @app.task(queue="q1")
    def ok(x: int) -> int:
        return x

    @app.task(retry=sqljobs.Retry(max_attempts=2, base=0.01, cap=0.01))
    def flaky(ctx: sqljobs.JobContext) -> None:
        if ctx.job.attempt == 1:
            raise ValueError("first time")

    @app.task(retry=sqljobs.Retry(max_attempts=1))
    async def doomed() -> None:
        raise KeyError("gone")

    release_hung = threading.Event()

    @app.task(timeout=0.1, retry=sqljobs.Retry(max_attempts=1))
    def hangs() -> None:
        release_hung.wait(10)

    @app.task
    def cancel_me(ctx: sqljobs.JobContext) -> None:
        cancel_me_started.set()
        deadline = time.monotonic() + 10
        while not ctx.cancelled and time.monotonic() < deadline:
            time.sleep(0.005)

    ids = {t.name: t.enqueue().id for t in (flaky, doomed, hangs)}
    ids["ok"] = ok.enqueue(1).id
    assert ok.with_options(key="k").enqueue(2).created
    assert not ok.with_options(key="k").enqueue(2).created  # not a new job: not told
    with stepped_worker(app) as worker:  # hooks are told on their own thread
        worker.until(lambda: told.of("job_done", ids["ok"]), what="job_done of ok")
        worker.until(lambda: told.of("job_done", ids["flaky"]), what="job_done of flaky")
        worker.until(lambda: told.of("job_dead", ids["doomed"]), what="job_dead of doomed")
        worker.until(lambda: told.of("job_dead", ids["hangs"]), what="job_dead of hangs")
        release_hung.set()
        ids["cancel_me"] = cancel_me.enqueue().id
        worker.until(cancel_me_started.is_set, what="cancel_me to start")
        app.cancel(ids["cancel_me"])
        worker.until(lambda: told.of("job_cancelled", ids["cancel_me"]), what="job_cancelled")
    told.wait("worker_stopped")

    enqueued = told.of("job_enqueued")
    assert len(enqueued) == 6 and all(e.attempt == 0 and e.worker_id is None for e in enqueued)
    expected = JobEvent("job_enqueued", ids["ok"], "ok", "q1", 0)
    assert told.of("job_enqueued", ids["ok"]) == [expected]

    (done,) = told.of("job_done", ids["ok"])
    assert (done.task, done.queue, done.attempt, done.worker_id) == ("ok", "q1", 1, worker.id)
    assert done.duration is not None and 0 <= done.duration < 5 and done.error is None

    first, second = told.of("job_started", ids["flaky"])
    assert (first.attempt, second.attempt) == (1, 2)
    (failed,) = told.of("job_failed", ids["flaky"])
    assert failed.will_retry and failed.attempt == 1 and failed.error == "ValueError: first time"
    assert isinstance(failed.exception, ValueError)
    assert [d.attempt for d in told.of("job_done", ids["flaky"])] == [2]
    assert not told.of("job_dead", ids["flaky"])

    (failed,) = told.of("job_failed", ids["doomed"])
    (dead,) = told.of("job_dead", ids["doomed"])
    assert not failed.will_retry and isinstance(dead.exception, KeyError)
    assert dead.error is not None and "KeyError" in dead.error and "1 of 1" in dead.error
    assert told.seen.index(failed) < told.seen.index(dead)

    (timed_out,) = told.of("job_failed", ids["hangs"])
    assert timed_out.exception is None and timed_out.duration == 0.1 and not timed_out.will_retry
    assert "TimeoutError: timed out after 0.1 s" in (timed_out.error or "")
    assert len(told.of("job_dead", ids["hangs"])) == 1

    (cancelled,) = told.of("job_cancelled", ids["cancel_me"])
    assert cancelled.task == "cancel_me" and cancelled.queue == "default"
    assert not told.of("job_done", ids["cancel_me"]) and not told.of("job_failed", ids["cancel_me"])

    (started,) = told.of("worker_started")
    (stopped,) = told.of("worker_stopped")
    assert isinstance(started, WorkerLifecycle) and started.worker_id == worker.id
    assert told.seen.index(stopped) == len(told.seen) - 1  # after every job's events
    assert stopped.counts["done"] == 3 and stopped.counts["dead"] == 2


def test_a_hook_that_raises_is_logged_and_changes_nothing(
    app: App, caplog: pytest.LogCaptureFixture
) -> None:
    later: list[int] = []

    @app.on("job_done")
    def broken(event: JobEvent) -> None:
        raise RuntimeError("hook bug")

    app.on("job_enqueued", broken)
    app.on("job_done", lambda event: later.append(event.job_id))

    @app.task
    def fine() -> str:
        return "ok"

    with caplog.at_level(logging.ERROR, logger="sqljobs.hooks"):
        handle = fine.enqueue()  # the enqueue stands
        # the worker's own on_event (the stepper's log) is still told, beside the hooks
        with stepped_worker(app) as worker:
            assert worker.result(handle) == "ok"
            worker.until_event("finished", handle.id, state="done")
    assert app.get_job(handle.id).state is JobState.DONE  # type: ignore[union-attr]
    assert later == [handle.id]  # the next hook still ran
    messages = [r.getMessage() for r in caplog.records]
    assert any("test_hooks" in m and "broken" in m and "for job_enqueued" in m for m in messages)
    assert any("broken" in m and "for job_done raised" in m for m in messages)


def test_a_wrong_event_or_middleware_is_refused_clearly(tmp_path: Path) -> None:
    app = App(f"sqlite:///{tmp_path / 'jobs.db'}")
    refused = r"unknown hook event 'job_fail': the events are job_enqueued, job_started, "
    with pytest.raises(sqljobs.ConfigurationError, match=refused):
        app.on("job_fail")  # type: ignore[call-overload]
    with pytest.raises(sqljobs.ConfigurationError, match="must be callable"):
        app.on("job_done", 3)  # type: ignore[call-overload]

    def plain(info: AttemptInfo) -> None: ...

    async def asynchronous(info: AttemptInfo) -> None: ...

    too_big = "headers are 9,010 bytes of JSON, over the limit of 8,192"
    with pytest.raises(sqljobs.PayloadError, match=too_big):
        payload.with_headers('{"args":[],"kwargs":{}}', {"big": "x" * 9000})
    with pytest.raises(sqljobs.PayloadError, match="strings to strings; 'n' does not"):
        payload.with_headers('{"args":[],"kwargs":{}}', {"n": 1})  # type: ignore[dict-item]
    with pytest.raises(sqljobs.ConfigurationError, match=r"plain.*generator function"):
        app.middleware(plain)  # type: ignore[arg-type]
    with pytest.raises(sqljobs.ConfigurationError, match="asynchronous is async"):
        app.enqueue_middleware(asynchronous)  # type: ignore[arg-type]
    assert not app.hooks.for_workers and not app.hooks.around_enqueue


def test_middleware_wraps_attempts_in_order_and_decides_with_exceptions(app: App) -> None:
    trail: list[str] = []
    infos: list[AttemptInfo] = []

    @app.enqueue_middleware
    def tag(info: EnqueueInfo) -> Generator[None, Any, None]:
        info.headers["tenant"] = "acme"
        handles = yield
        trail.append(f"enqueued {len(handles)}")

    @app.middleware
    def outer(info: AttemptInfo) -> Generator[None, Any, None]:
        infos.append(info)
        trail.append(f"{info.task}: outer in")
        try:
            value = yield
            trail.append(f"{info.task}: outer out {value}")
        except ValueError as exc:
            trail.append(f"{info.task}: outer swallows {exc}")  # the attempt succeeds

    @app.middleware
    def inner(info: AttemptInfo) -> Generator[None, Any, None]:
        trail.append(f"{info.task}: inner in")
        try:
            yield
        except Exception as exc:
            trail.append(f"{info.task}: inner saw {exc!r} retry={info.would_retry(exc)}")
            raise
        trail.append(f"{info.task}: inner out")

    @app.task
    def returns() -> int:
        trail.append("returns: runs")
        return 7

    @app.task
    async def swallowed() -> None:
        await asyncio.sleep(0)
        raise ValueError("not really")

    @app.task(retry=sqljobs.Retry(max_attempts=1))
    def fails() -> None:
        raise KeyError("really")

    jobs = [returns.enqueue(), swallowed.enqueue(), fails.enqueue()]
    with stepped_worker(app) as worker:
        assert worker.result(jobs[0]) == 7
        assert worker.result(jobs[1]) is None
        with pytest.raises(sqljobs.JobFailed, match="KeyError"):
            worker.result(jobs[2])

    def of(task: str) -> list[str]:
        return [t.split(": ", 1)[1] for t in trail if t.startswith(f"{task}: ")]

    assert trail.count("enqueued 1") == 3
    assert of("returns") == ["outer in", "inner in", "runs", "inner out", "outer out 7"]
    assert of("swallowed") == ["outer in", "inner in", "inner saw ValueError('not really') "
                               "retry=True", "outer swallows not really"]  # fmt: skip
    assert of("fails") == ["outer in", "inner in", "inner saw KeyError('really') retry=False"]
    assert {i.headers["tenant"] for i in infos} == {"acme"}
    assert {(i.attempt, i.queue, i.max_attempts) for i in infos} == {(1, "default", 5),
                                                                     (1, "default", 1)}  # fmt: skip
    shown = app.get_job(jobs[0].id)  # the headers are no argument
    assert shown is not None and (shown.args, shown.kwargs) == ([], {})


def test_a_middleware_that_raises_fails_the_attempt_like_the_handler(app: App) -> None:
    ran: list[str] = []

    @app.middleware
    def broken(info: AttemptInfo) -> Generator[None, Any, None]:
        raise RuntimeError("middleware bug")
        yield

    @app.task(retry=sqljobs.Retry(max_attempts=1))
    def never() -> None:
        ran.append("ran")

    handle = never.enqueue()
    with stepped_worker(app) as worker, pytest.raises(sqljobs.JobFailed, match="middleware bug"):
        worker.result(handle)
    assert ran == []


def test_with_nothing_registered_a_worker_and_an_enqueue_have_nothing_to_run(
    tmp_path: Path,
) -> None:
    app = App(f"sqlite:///{tmp_path / 'jobs.db'}")

    @app.task
    def noop() -> None: ...

    assert sqljobs.Worker(app)._hooks is None  # the per-job path checks for None only
    assert not app.hooks.around_enqueue
    app.on("job_enqueued", print)
    assert app.hooks.around_enqueue and sqljobs.Worker(app)._hooks is None  # not a worker's
    app.on("worker_started", print)
    hooks = sqljobs.Worker(app)._hooks
    assert hooks is not None and not hooks.observes  # no outcome hook: no per-job events


def test_middleware_that_misbehaves_fails_the_call_with_its_name() -> None:
    from sqljobs.hooks import through, through_async

    def twice(info: object) -> Generator[None, Any, None]:
        yield
        yield

    def never(info: object) -> Generator[None, Any, None]:
        return
        yield

    def swallows_all(info: object) -> Generator[None, Any, None]:
        with contextlib.suppress(BaseException):
            yield

    with pytest.raises(RuntimeError, match=r"middleware .*twice yielded more than once"):
        through([twice], None, lambda: 1)
    with pytest.raises(RuntimeError, match=r"middleware .*never returned without yielding"):
        through([never], None, lambda: 1)
    assert through([swallows_all], None, lambda: 1 / 0) is None  # swallowed: it succeeds

    async def cancelled() -> None:
        raise asyncio.CancelledError()

    with pytest.raises(asyncio.CancelledError):  # a cancellation is never swallowed
        asyncio.run(through_async([swallows_all], None, cancelled))


def test_a_worker_forgets_an_attempt_once_it_has_nothing_to_tell_of_it(tmp_path: Path) -> None:
    """What the hooks remember of a begun attempt goes with its last event, also for an
    async attempt that lost its lease (cancelled: no result will ever come back)."""
    from sqljobs.context import JobContext
    from sqljobs.jobs import ClaimedJob
    from sqljobs.worker.events import job_event
    from sqljobs.worker.execute import Running
    from sqljobs.worker.hook_runner import WorkerHooks

    app = App(f"sqlite:///{tmp_path / 'jobs.db'}")

    @app.task
    def noop() -> None: ...

    app.on("job_done", print)
    hooks = WorkerHooks(app.hooks, "w", app.clock)
    assert hooks.observes
    for kind in ("lease_lost", "released", "discarded", "cancelled", "finished"):
        job = ClaimedJob(1, "noop", '{"args":[],"kwargs":{}}', "default", 0, 1, 1, 30.0, 5,
                         0.0, None, None)  # fmt: skip
        run = Running(job, noop, JobContext(job, None), [], {}, 0.0)  # type: ignore[arg-type]
        hooks.call(run)
        assert len(hooks._runs) == 1
        hooks.observe(job_event(kind, job, "w", "done"))
        assert hooks._runs == {}, kind


def test_an_enqueue_that_failed_fails_even_when_a_middleware_swallows_it(app: App) -> None:
    @app.task
    def note(text: str) -> None: ...

    @app.enqueue_middleware
    def swallow(info: object) -> Generator[None, Any, None]:
        with contextlib.suppress(Exception):
            yield

    with pytest.raises(sqljobs.ConfigurationError, match="swallowed the enqueue's error") as raised:
        # the store refuses a connection of the wrong kind: nothing is stored
        note.with_options(connection=object()).enqueue("lost")
    assert isinstance(raised.value.__cause__, Exception)
    assert app.count_jobs().n == 0
    assert note.enqueue("fine").created  # and an enqueue that works goes through it
