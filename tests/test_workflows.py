"""Durable workflows on every engine, through real workers driven by the test clock:
replayed steps, durable sleeps and waits, events, child jobs, step retries, values that
replay the same, changed code detected, and what is refused."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import sqljobs
from sqljobs import App, ConfigurationError, JobFailed, JobState, Retry, Workflow
from sqljobs.testing import Clock, stepped_worker
from sqljobs.url import url_options

from .conftest import is_pg

START = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


def clocked(url: str) -> tuple[App, Clock]:
    clock = Clock(START)
    return App(url, clock=clock), clock


def state(app: App, job_id: int) -> JobState:
    job = app.get_job(job_id)
    assert job is not None
    return job.state


def test_a_workflow_runs_each_finished_step_once_across_sleeps_and_waits(url: str) -> None:
    app, clock = clocked(url)
    ran: list[str] = []

    @app.task
    def ship(order: str) -> str:
        ran.append(f"ship {order}")
        return f"label-{order}"

    @app.task
    def size(photo: str) -> int:
        return len(photo)

    @app.workflow(queue="orders")
    def fulfil(wf: Workflow, order: str) -> dict[str, Any]:
        charge = wf.step("charge", _charge, ran)
        wf.sleep(timedelta(days=1))
        answer = wf.wait_for(f"approved:{order}", timeout=timedelta(days=7))
        label = wf.run(ship.s(order))
        sizes = wf.gather([size.s(p) for p in ("a", "bb", "ccc")])
        return {"charge": charge, "answer": answer, "label": label, "sizes": sizes}

    handle = fulfil.enqueue("o-17")
    app.run_until_empty(clock=clock, until=clock() + 3600)
    job = app.get_job(handle.id)
    assert job is not None and job.state is JobState.WAITING and job.attempts == 0
    assert app.waiting_reason(job) == "workflow sleeps until 2026-12-02T09:00:00+00:00"
    clock.advance(timedelta(days=1).total_seconds())
    app.run_until_empty(clock=clock, until=clock() + 3600)
    assert "waits for event 'approved:o-17'" in (app.waiting_reason(app.get_job(handle.id)) or "")  # type: ignore[arg-type]
    app.emit("approved:o-17", {"by": "ada"})
    app.run_until_empty(clock=clock)
    assert handle.result(timeout=1) == {
        "charge": 42, "answer": {"by": "ada"}, "label": "label-o-17", "sizes": [1, 2, 3],
    }  # fmt: skip
    assert ran == ["charge", "ship o-17"], "no finished step ran again"
    history = app.workflow_history(handle.id)
    assert [(s.kind, s.name, s.state) for s in history] == [
        ("step", "charge", "done"),
        ("sleep", "sleep", "done"),
        ("wait", "approved:o-17", "done"),
        ("run", "run:ship", "done"),
        ("gather", "gather:size", "done"),
    ]
    assert history[0].value == 42 and history[2].value == {"by": "ada"}
    assert all(s.started_at is not None and s.ended_at is not None for s in history)
    (listed,) = app.workflows()
    assert (listed.id, listed.state, listed.steps) == (handle.id, "done", 5)


def _charge(ran: list[str]) -> int:
    ran.append("charge")
    return 42


def test_a_wait_times_out_with_none_and_an_early_event_is_not_lost(url: str) -> None:
    app, clock = clocked(url)

    @app.workflow
    def approve(wf: Workflow, name: str) -> list[Any]:
        return [wf.wait_for(name, timeout=3600), wf.wait_for(name, timeout=60)]

    app.emit("early", "first")  # before the workflow even starts
    early = approve.enqueue("early")
    late = approve.enqueue("late")
    app.run_until_empty(clock=clock)
    assert early.result(timeout=1) == ["first", None], "the second wait timed out"
    assert late.result(timeout=1) == [None, None]
    assert clock() == START.timestamp() + 3600 + 60, "the drain moved to each timeout"


def test_one_name_s_events_are_taken_in_order_each_once(url: str) -> None:
    app, clock = clocked(url)

    @app.workflow
    def collect(wf: Workflow) -> list[Any]:
        return [wf.wait_for("tick") for _ in range(3)]

    handle = collect.enqueue()
    app.run_until_empty(clock=clock)
    for i in range(3):
        app.emit("tick", i)
    app.run_until_empty(clock=clock)
    assert handle.result(timeout=1) == [0, 1, 2]


def test_an_event_emitted_in_a_transaction_that_rolls_back_never_arrives(url: str) -> None:
    app, clock = clocked(url)

    @app.workflow
    def wait(wf: Workflow) -> Any:
        return wf.wait_for("go")

    handle = wait.enqueue()
    app.run_until_empty(clock=clock)
    conn = _connect(url)
    try:
        app.emit("go", "never", connection=conn)
        conn.rollback()
        app.run_until_empty(clock=clock)
        assert state(app, handle.id) is JobState.WAITING
        app.emit("go", "once", connection=conn)
        conn.commit()
    finally:
        conn.close()
    app.run_until_empty(clock=clock)
    assert handle.result(timeout=1) == "once"


def _connect(url: str) -> Any:
    """A connection of the caller's own on the queue's database, in a transaction."""
    if is_pg(url):
        import psycopg

        return psycopg.connect(url_options(url)[0])
    return sqlite3.connect(url.removeprefix("sqlite:///"))


def test_a_transaction_step_commits_once_though_the_workflow_retries(url: str) -> None:
    app, clock = clocked(url)
    fails = [1]
    mark = "?" if not is_pg(url) else "%s"

    @app.workflow(retry=Retry(max_attempts=3, base=0))
    def book(wf: Workflow) -> int:
        with wf.transaction("reserve") as tx:
            tx.execute("CREATE TABLE IF NOT EXISTS held (sku TEXT)")
            tx.execute(f"INSERT INTO held VALUES ({mark})", ("sku-1",))
        if fails:
            fails.pop()
            raise RuntimeError("after the transaction")
        with wf.transaction("count") as tx:
            (n,) = tx.execute("SELECT count(*) FROM held").fetchone()
        return int(wf.step("n", lambda: n))

    handle = book.enqueue()
    app.run_until_empty(clock=clock)
    assert handle.result(timeout=1) == 1, "the replayed block's insert was rolled back"
    job = app.get_job(handle.id)
    assert job is not None and job.attempts == 2


def test_a_step_retries_on_its_own_schedule_without_repeating_earlier_steps(url: str) -> None:
    app, clock = clocked(url)
    calls: list[str] = []

    def flaky() -> str:
        calls.append("flaky")
        if len([c for c in calls if c == "flaky"]) < 3:
            raise ConnectionError("warehouse down")
        return "ok"

    @app.workflow
    def order(wf: Workflow) -> str:
        wf.step("first", lambda: calls.append("first"))
        return wf.step("flaky", flaky, retry=Retry(max_attempts=5, base=60, jitter=False))

    handle = order.enqueue()
    report = app.run_until_empty(clock=clock)
    assert handle.result(timeout=1) == "ok"
    assert calls == ["first", "flaky", "flaky", "flaky"]
    assert clock() > START.timestamp() + 60, "each retry waited durably"
    assert report.dead == 0

    @app.workflow
    def hopeless(wf: Workflow) -> None:
        wf.step("never", _raise, retry=Retry(max_attempts=2, base=1))

    dead = hopeless.enqueue()
    app.run_until_empty(clock=clock)
    job = app.get_job(dead.id)
    assert job is not None and job.state is JobState.DEAD
    assert "step 'never' failed 2 time(s): ValueError: no" in (job.last_error or "")
    with pytest.raises(JobFailed):
        dead.result(timeout=1)


def _raise() -> None:
    raise ValueError("no")


def test_a_failed_child_raises_in_the_workflow_which_may_catch_it(url: str) -> None:
    app, clock = clocked(url)

    @app.task(retry=Retry(max_attempts=1))
    def broken() -> None:
        raise ValueError("child broke")

    @app.workflow
    def parent(wf: Workflow) -> str:
        try:
            wf.run(broken.s())
        except JobFailed as exc:
            return f"caught: {exc}"
        return "not raised"

    handle = parent.enqueue()
    app.run_until_empty(clock=clock)
    assert "caught: job" in handle.result(timeout=1)
    assert "child broke" in handle.result(timeout=1)


def test_now_uuid_and_random_replay_the_same(url: str) -> None:
    app, clock = clocked(url)
    seen: list[tuple[Any, ...]] = []

    @app.workflow
    def values(wf: Workflow) -> list[str]:
        got = (wf.now(), wf.uuid(), wf.random())
        seen.append(got)
        wf.sleep(30)
        return [str(v) for v in got]

    handle = values.enqueue()
    app.run_until_empty(clock=clock)
    assert len(seen) == 2 and seen[0] == seen[1], "the replay saw the first run's values"
    assert seen[0][0] == START and 0 <= seen[0][2] < 1
    assert handle.result(timeout=1) == [str(v) for v in seen[0]]


def test_changed_code_fails_the_attempt_and_keeps_the_history(url: str) -> None:
    app, clock = clocked(url)
    version = ["v1"]

    @app.workflow(retry=Retry(max_attempts=1))
    def evolving(wf: Workflow) -> None:
        wf.step(f"first-{version[0]}", lambda: 1)
        wf.sleep(60)

    handle = evolving.enqueue()
    app.run_until_empty(clock=clock, until=clock() + 1)
    version[0] = "v2"
    app.run_until_empty(clock=clock)
    job = app.get_job(handle.id)
    assert job is not None and job.state is JobState.DEAD
    assert "WorkflowChanged" in (job.last_error or "")
    assert "step first-v1" in (job.last_error or "") and "step first-v2" in (job.last_error or "")
    assert [s.name for s in app.workflow_history(handle.id)] == ["first-v1", "sleep"]


def test_an_async_workflow_runs_on_the_loop(url: str) -> None:
    app, clock = clocked(url)

    @app.task
    async def double(x: int) -> int:
        return 2 * x

    async def fetch(x: int) -> int:
        await asyncio.sleep(0)
        return x + 1

    @app.workflow
    async def pipeline(wf: Workflow, x: int) -> int:
        y = await wf.step_async("fetch", fetch, x)
        await wf.sleep_async(10)
        return int(await wf.run_async(double.s(y)))

    handle = pipeline.enqueue(20)
    app.run_until_empty(clock=clock)
    assert handle.result(timeout=1) == 42


def test_a_parked_workflow_can_be_cancelled(url: str) -> None:
    app, clock = clocked(url)

    @app.workflow
    def waits(wf: Workflow) -> None:
        wf.wait_for("never")

    handle = waits.enqueue()
    app.run_until_empty(clock=clock)
    assert state(app, handle.id) is JobState.WAITING
    assert app.cancel(handle.id)
    assert state(app, handle.id) is JobState.CANCELLED
    app.emit("never", None)
    assert state(app, handle.id) is JobState.CANCELLED, "an event wakes no cancelled job"


def _not_a_workflow(order: str) -> None: ...


def test_bad_workflow_input_is_refused_by_name(url: str) -> None:
    app, clock = clocked(url)
    with pytest.raises(ConfigurationError, match=r"first parameter must be annotated sqljobs"):
        app.workflow(_not_a_workflow)  # type: ignore[arg-type]

    @app.workflow(retry=Retry(max_attempts=1))
    def negative(wf: Workflow) -> None:
        wf.sleep(-1)

    handle = negative.enqueue()
    app.run_until_empty(clock=clock)
    job = app.get_job(handle.id)
    assert job is not None and "wf.sleep(duration) must be >= 0 seconds" in (job.last_error or "")
    with pytest.raises(ConfigurationError, match=r"app.emit\(event\)"):
        app.emit("")
    with pytest.raises(sqljobs.PayloadError):
        app.emit("x", object())
    with pytest.raises(ConfigurationError, match="state must be one of"):
        app.workflows(state="sleeping")
    with pytest.raises(ConfigurationError, match=r"runs in a worker.*negative.enqueue"):
        negative()


def test_cancelling_a_workflow_cancels_its_children_that_have_not_ended(url: str) -> None:
    app, clock = clocked(url)

    @app.task
    def quick() -> int:
        return 1

    @app.task(queue="elsewhere")  # no drain below serves it: it stays pending
    def later() -> None: ...

    @app.workflow
    def fan(wf: Workflow) -> list[Any]:
        return wf.gather([quick.s(), later.s()])

    handle = fan.enqueue()
    app.run_until_empty(clock=clock, queues=["default"])
    (step,) = app.workflow_history(handle.id)
    quick_id, later_id = step.detail["children"]
    assert (state(app, quick_id), state(app, later_id)) == (JobState.DONE, JobState.PENDING)
    assert app.cancel(handle.id)
    assert state(app, handle.id) is JobState.CANCELLED
    assert (state(app, quick_id), state(app, later_id)) == (JobState.DONE, JobState.CANCELLED)


def test_old_events_are_pruned_after_their_retention(url: str) -> None:
    from sqljobs.maintenance import Pruner

    clock = Clock(START)
    app = App(url, clock=clock, retention=sqljobs.Retention(events=60))
    app.emit("old", 1)
    clock.advance(61)
    app.emit("new", 2)
    Pruner(app.backend, app.retention).run_once()
    assert app.backend.first_event("old", 0) is None
    kept = app.backend.first_event("new", 0)
    assert kept is not None and kept.payload == "2"


def test_hooks_hear_a_workflow_end_once_and_no_failure_for_its_parks(url: str) -> None:
    app, clock = clocked(url)
    heard: list[str] = []
    for event in ("job_started", "job_done", "job_failed"):
        app.on(event)(lambda e, name=event: heard.append(name))

    @app.workflow
    def flow(wf: Workflow) -> None:
        wf.sleep(60)
        wf.sleep(60)

    flow.enqueue()
    app.run_until_empty(clock=clock)
    assert heard == ["job_started"] * 3 + ["job_done"]
    attempts = {m.outcome: m.amount for m in app.metric_totals() if m.series == "attempts"}
    assert attempts == {"parked": 2, "done": 1}


def test_a_parked_workflow_frees_its_concurrency_slot(url: str) -> None:
    app, clock = clocked(url)

    @app.workflow(concurrency=1, priority=5)
    def one_at_a_time(wf: Workflow, n: int) -> int:
        wf.step("before", lambda: n)
        wf.sleep(60)
        return n

    first, second = one_at_a_time.enqueue(1), one_at_a_time.enqueue(2)
    app.run_until_empty(clock=clock, until=clock() + 1)
    assert [state(app, h.id) for h in (first, second)] == [JobState.WAITING] * 2, (
        "the first one's park let the second one run"
    )
    app.run_until_empty(clock=clock)
    assert [first.result(timeout=1), second.result(timeout=1)] == [1, 2]
    job = app.get_job(first.id)
    assert job is not None and job.priority == 5 and job.limit_key is not None


def test_a_workflow_redacts_its_arguments_as_a_task_does(url: str) -> None:
    from sqljobs.redaction import redact_job

    app, _ = clocked(url)

    @app.workflow(redact=["card"])
    def pay(wf: Workflow, order: str, card: str) -> None: ...

    handle = pay.enqueue("o-1", "4111")
    job = app.get_job(handle.id)
    assert job is not None
    shown = redact_job(pay, job)
    assert shown.args == ["o-1", "***"]


def test_an_event_emitted_after_the_timeout_is_too_late(url: str) -> None:
    app, clock = clocked(url)

    @app.workflow
    def approve(wf: Workflow) -> Any:
        return wf.wait_for("ok", timeout=60)

    handle = approve.enqueue()
    app.run_until_empty(clock=clock, until=clock() + 1)
    clock.advance(3600)  # no worker woke it in time
    app.emit("ok", "late")
    app.run_until_empty(clock=clock)
    assert handle.result(timeout=1) is None
    (step,) = app.workflow_history(handle.id)
    assert step.detail.get("timed_out") is True


def test_a_step_returns_on_its_first_run_what_a_replay_returns(url: str) -> None:
    app, clock = clocked(url)
    seen: list[Any] = []

    @app.workflow
    def pair(wf: Workflow) -> None:
        seen.append(wf.step("pair", lambda: (1, {2: "two"})))
        wf.sleep(60)

    pair.enqueue()
    app.run_until_empty(clock=clock)
    assert seen == [[1, {"2": "two"}]] * 2, "as JSON keeps it, on both runs"


def test_a_child_s_key_is_retained_whatever_its_signature_says(url: str) -> None:
    app, clock = clocked(url)

    @app.task
    def child(x: int) -> int:
        return 2 * x

    @app.workflow
    def parent(wf: Workflow) -> int:
        return int(wf.run(child.with_options(key_scope="active").s(1)))

    handle = parent.enqueue()
    app.run_until_empty(clock=clock)
    assert handle.result(timeout=1) == 2
    (step,) = app.workflow_history(handle.id)
    kid = app.get_job(step.detail["children"][0])
    assert kid is not None and kid.key == f"wf:{handle.id}:0:0:child"
    assert kid.key_scope == "retained", "a replay after the child ended finds it"


def test_a_workflow_as_a_group_callback_gets_its_results_once(url: str) -> None:
    app, clock = clocked(url)

    @app.task
    def part(n: int) -> int:
        return n

    @app.workflow
    def total(wf: Workflow, parts: list[int]) -> int:
        doubled = wf.run(part.s(2 * sum(parts)))
        return int(doubled)

    group = app.group([part.s(1), part.s(2)], then=total.s())
    app.run_until_empty(clock=clock)
    assert group.result(timeout=1) == 6, "its arguments were not rewritten a second time"


@pytest.mark.parametrize("url", ["postgres"], indirect=True)
def test_an_emit_in_a_snapshot_transaction_is_refused(url: str) -> None:
    import psycopg

    app, _ = clocked(url)
    with psycopg.connect(url_options(url)[0]) as conn:
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        with pytest.raises(psycopg.errors.FeatureNotSupported, match="READ COMMITTED"):
            app.emit("x", connection=conn)


def test_children_are_not_started_by_a_workflow_cancelled_meanwhile(url: str) -> None:
    app, clock = clocked(url)

    @app.task
    def ship() -> None: ...

    @app.workflow(retry=Retry(max_attempts=1))
    def cancelled_midway(wf: Workflow) -> None:
        app.cancel(wf.id)  # (as an operator's cancel landing just before the children)
        wf.run(ship.s())

    handle = cancelled_midway.enqueue()
    app.run_until_empty(clock=clock)
    assert state(app, handle.id) is JobState.CANCELLED
    assert app.find_jobs(sqljobs.JobFilter(task="ship")).jobs == [], "no child was left"


@pytest.mark.parametrize("wait", ["sleep", "wait_for", "step retry"])
def test_a_workflow_woken_by_a_clock_ahead_goes_on_under_a_clock_behind(
    url: str, wait: str
) -> None:
    """The scheduler's pass on one host makes a parked workflow due when its wake time has
    passed by that host's clock; a worker whose clock runs behind takes it up. The wait
    counts as over (the job fell due at its wake time, and the claim found that passed),
    so the first resume goes on: it does not park again to be woken again at once. On
    PostgreSQL claims read the server's clock; on SQLite the claiming worker's, so there
    the worker behind takes the workflow up once its own clock has reached the wake time.
    """
    base = float(int(time.time()))  # near the server's clock, which PostgreSQL's claims read
    behind, ahead = Clock(base - 10), Clock(base)
    options = {"server_clock": True} if is_pg(url) else {}
    worker_app = App(url, clock=behind, backend_options=options)
    scheduler_app = App(url, clock=ahead, backend_options=options)
    runs: list[str] = []
    failed: list[int] = []

    def flaky() -> str:
        if not failed:
            failed.append(1)
            raise RuntimeError("once")
        return "ok"

    @worker_app.workflow(name="skewed")
    def skewed(wf: Workflow) -> Any:
        runs.append("run")
        if wait == "sleep":
            wf.sleep(2)
            return "slept"
        if wait == "wait_for":
            return wf.wait_for("never", timeout=2)
        return wf.step("flaky", flaky, retry=Retry(max_attempts=3, base=2, jitter=False))

    handle = skewed.enqueue()
    with stepped_worker(worker_app, scheduler=False) as worker:  # (wakes nothing itself)
        worker.until(lambda: state(worker_app, handle.id) is JobState.WAITING)  # for 2 s
        assert scheduler_app.backend.wake_workflows(ahead()) == 1, "due by the clock ahead"
        if not is_pg(url):  # the claim reads the worker's clock: it waits for the wake time
            behind.advance(2)
        worker.until(lambda: state(worker_app, handle.id) in (JobState.WAITING, JobState.DONE))
    assert state(worker_app, handle.id) is JobState.DONE, "the resume parked it again"
    assert runs == ["run", "run"], "one run parked it, the first resume went on"
    assert handle.result(timeout=1) == {"sleep": "slept", "wait_for": None}.get(wait, "ok")
    scheduler_app.close()
    worker_app.close()
