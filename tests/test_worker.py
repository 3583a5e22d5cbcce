"""The worker: threads and async tasks, timeouts, bad inputs, wake-ups, handler context."""

from __future__ import annotations

import asyncio
import collections
import logging
import threading
import time
from typing import Any

import pytest

import sqljobs
import sqljobs.worker
from sqljobs import App, ConfigurationError, JobState, Retry
from sqljobs.backends import WorkerInfo
from sqljobs.backends.base import Claim, DueQuery
from sqljobs.testing import stepped_worker
from sqljobs.worker import EventLog

from .conftest import db_execute, expire_lease, is_pg, placeholder, wait_until, worker_thread


def _state(app: App, job_id: int) -> JobState:
    job = app.get_job(job_id)
    assert job is not None
    return job.state


def test_plain_functions_run_on_threads_and_async_tasks_on_a_loop(app: App) -> None:
    seen: dict[str, str] = {}

    @app.task
    def plain(name: str) -> None:
        seen[name] = threading.current_thread().name

    @app.task
    async def coro(name: str) -> None:
        await asyncio.sleep(0)
        seen[name] = "loop" if asyncio.get_running_loop() else "?"

    ids = [plain.enqueue("a").id, coro.enqueue("b").id]
    with stepped_worker(app, concurrency=2) as worker:
        done = worker.until_event("finished", state="done", count=2)
    assert {e.job_id for e in done} == set(ids)
    assert seen["a"].startswith("sqljobs-") and seen["b"] == "loop"


def test_the_event_loop_skips_a_run_given_up_before_its_batch_started() -> None:
    """``async def`` runs wait for ``start_queued`` (one wake-up for a whole claim); a run
    the coordinator gave up before then (closed) is skipped and reported, freeing its
    slot, never started: its job may be another worker's by then."""
    from types import SimpleNamespace

    from sqljobs.worker.execute import AsyncRunner, LoopTask

    reported: list[tuple[Any, Any]] = []
    landed = threading.Event()

    def report(run: Any, outcome: Any) -> None:
        reported.append((run, outcome))
        landed.set()

    runner = AsyncRunner(report, time.time)
    try:
        job, task = SimpleNamespace(id=7, token=3), SimpleNamespace(store_result=True)
        run: Any = SimpleNamespace(closed=False, job=job, task=task)
        runner.submit(run)
        run.closed = True  # given up (timed out, lease lost) before the batch started
        assert isinstance(run.future, LoopTask) and run.future.task is None
        runner.start_queued()
        assert landed.wait(5), "the skipped run was never reported"
        ((got, outcome),) = reported
        assert got is run and (outcome.job_id, outcome.token) == (7, 3)
        assert run.future.task is None, "a closed run must not start"
    finally:
        runner.stop()


def test_the_event_loop_starts_tasks_eagerly_where_python_can(app: App) -> None:
    """Python 3.12+: the worker's loop makes eager tasks, so a handler that never waits
    runs within its task's creation (no scheduling a job); on 3.11 the default tasks.
    Either way a handler sees its own task as the current one."""
    seen: list[bool] = []
    factories: list[object] = []

    @app.task
    async def which() -> None:
        seen.append(asyncio.current_task() is not None)
        factories.append(asyncio.get_running_loop().get_task_factory())

    which.enqueue()
    with stepped_worker(app, concurrency=2) as worker:
        worker.until_event("finished", state="done")
    assert seen == [True]
    assert factories == [getattr(asyncio, "eager_task_factory", None)]


def test_concurrency_bounds_jobs_in_flight(app: App) -> None:
    running, peak, lock = [0], [0], threading.Lock()

    @app.task
    def busy() -> None:
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        time.sleep(0.02)
        with lock:
            running[0] -= 1

    busy.enqueue_many([() for _ in range(40)])
    with stepped_worker(app, concurrency=3) as worker:
        worker.until_event("finished", state="done", count=40)
    assert peak[0] == 3


def test_a_hung_handler_times_out_is_recorded_and_retried(app: App) -> None:
    release = threading.Event()
    attempts: list[int] = []

    @app.task(timeout=0.2, retry=Retry(max_attempts=2, base=0))
    def hangs(ctx: sqljobs.JobContext) -> None:
        attempts.append(ctx.attempt)
        if ctx.attempt == 1:
            release.wait(10)

    @app.task(timeout=0.2, retry=Retry(max_attempts=1))
    async def hangs_async() -> None:
        await asyncio.sleep(30)

    sync_id, async_id = hangs.enqueue().id, hangs_async.enqueue().id
    with stepped_worker(app, concurrency=1) as worker:
        worker.until_event("finished", async_id, state="dead")
        worker.until_event("finished", sync_id, state="pending")  # the timed-out first attempt
        assert worker.events.of("timed_out", sync_id)
        # the given-up handler still holds the worker's one thread: the retry waits for it
        # instead of a second handler running beside it (never more than `concurrency`)
        assert attempts == [1] and not worker.events.of("started", sync_id)[1:]
        release.set()
        worker.until_event("finished", sync_id, state="done")
        worker.until_event("discarded", sync_id)  # the first attempt's late result
    job = app.get_job(sync_id)
    assert job is not None and attempts == [1, 2]
    assert job.history[0]["outcome"] == "timed_out"
    assert "timed out after 0.2 s" in job.history[0]["error"]
    dead = app.get_job(async_id)
    assert dead is not None and "timed out" in (dead.last_error or "")


def test_a_worker_leaves_jobs_of_tasks_it_lacks_pending_and_charges_no_attempt(url: str) -> None:
    app = App(url)

    @app.task
    def mine() -> None: ...

    theirs = app.enqueue("only_elsewhere", args=[1], known=False).id
    ran = mine.enqueue().id
    events = EventLog()
    with worker_thread(app, on_event=events):
        events.wait("finished", ran, state="done")
    assert not events.of("claimed", theirs)
    assert (
        app.backend.next_due(DueQuery(None, ["mine"])).wait is None
    )  # nothing of its own: it sleeps
    assert app.backend.next_due(DueQuery()).wait is not None
    job = app.get_job(theirs)
    assert job is not None and job.state is JobState.PENDING and job.attempts == 0
    assert job.history == []


def test_a_worker_without_tasks_refuses_to_start(url: str) -> None:
    with pytest.raises(sqljobs.ConfigurationError, match="has no tasks"):
        sqljobs.Worker(App(url))


def test_an_undecodable_payload_ends_dead_with_a_clear_error(app: App) -> None:
    @app.task
    def t() -> None: ...

    job_id = t.enqueue().id
    good_id = t.enqueue().id
    db_execute(app, "UPDATE sqljobs_jobs SET payload = '{not json' WHERE id = ?", params=(job_id,))
    with stepped_worker(app) as worker:
        worker.until_event("finished", job_id, state="dead")
        worker.until_event("finished", good_id, state="done")
    job = app.get_job(job_id)
    assert job is not None and "stored payload cannot be decoded" in (job.last_error or "")


def test_a_drain_timeout_not_shorter_than_the_lease_is_refused(app: App) -> None:
    @app.task(lease=5)
    def t() -> None: ...

    with pytest.raises(ConfigurationError, match="drain_timeout 5 s is not shorter"):
        sqljobs.Worker(app, drain_timeout=5)


def test_the_drain_timeout_is_held_to_the_leases_of_the_tasks_the_worker_runs(
    app: App, caplog: pytest.LogCaptureFixture
) -> None:
    """The App's default_lease (30 s) is no task's lease here: it neither refuses a drain
    timeout of 120 s nor shows in the banner as the shortest lease."""

    @app.task(lease=600)
    def long_lived() -> None: ...

    assert app.default_lease < 120
    worker = sqljobs.Worker(app, drain_timeout=120, install_signal_handlers=False)
    assert worker.shortest_lease == 600 and worker.drain_timeout == 120
    with pytest.raises(ConfigurationError, match="shortest lease of this worker's tasks, 600 s"):
        sqljobs.Worker(app, drain_timeout=600)
    caplog.set_level(logging.INFO, logger="sqljobs.worker")
    with stepped_worker(app, drain_timeout=120) as stepper:
        stepper.until(lambda: any("started on" in r.getMessage() for r in caplog.records))
    banner = next(r.getMessage() for r in caplog.records if "started on" in r.getMessage())
    assert "shortest lease 600 s" in banner and "drain timeout 120 s" in banner


def test_a_local_enqueue_wakes_the_worker_at_once(app: App) -> None:
    started: list[float] = []

    @app.task
    def t(sent: float) -> None:
        started.append(time.perf_counter() - sent)

    events = EventLog()
    with worker_thread(app, poll_interval=30, change_check_interval=30, on_event=events):
        t.enqueue(time.perf_counter())
        events.wait("finished")  # the worker has claimed, run, and now waits idle
        for _ in range(20):
            t.enqueue(time.perf_counter())
        events.wait("finished", count=21, timeout=5)  # far less than the 30 s poll
    assert max(started) < 1.0, "woken by the enqueue, not by the 30 s poll"


def test_another_process_commit_wakes_the_worker_without_polling(app: App) -> None:
    latencies: list[float] = []

    @app.task
    def t(sent: float) -> None:
        latencies.append(time.time() - sent)

    other = App(app.url)  # another connection, as another process would have
    events = EventLog()
    with worker_thread(app, poll_interval=30, on_event=events) as worker:
        for i in range(20):
            other.enqueue("t", args=[time.time()], known=False)
            events.wait("finished", count=i + 1, timeout=5)  # the 30 s poll never came
        claims = worker.counters["claims"]
    assert max(latencies) < 1.0, "woken by the change check, not by the 30 s poll"
    assert claims <= 45


def test_an_idle_worker_does_not_run_claim_queries_in_a_loop(app: App) -> None:
    app.task(name="idle")(lambda: None)
    with worker_thread(app, poll_interval=0.5) as worker:
        wait_until(lambda: worker.counters["claims"] >= 1, what="the first (empty) claim")
        before, polled = worker.counters["claims"], worker.counters["due_checks"]
        # the window: three polls of the idle worker, time enough for a loop to spin
        wait_until(lambda: worker.counters["due_checks"] >= polled + 3, what="three polls")
        idle_claims = worker.counters["claims"] - before
        polls = worker.counters["due_checks"] - polled
    assert idle_claims <= polls, f"{idle_claims} claim queries over {polls} idle polls"


def test_an_idle_workers_poll_reads_next_due_and_claims_what_it_says_is_due(url: str) -> None:
    """The fallback poll of an idle worker asks next_due (a read; on SQLite no write lock)
    instead of claiming, and its scheduler, told by the same answer when the earliest
    schedule falls due, makes no pass of its own: one read a poll (every sixth poll also
    looks for a crashed worker's jobs). A job that announced nothing (this worker hears
    no wake-up) is still found: on PostgreSQL next_due calls it due and the claim
    follows; on SQLite the change counter, read every pass, finds it first."""
    app = App(url, backend_options={"listen": False})
    ran: list[str] = []

    @app.task
    def note(label: str) -> None:
        ran.append(label)

    other = App(url)  # another process, as far as wake-ups go
    with worker_thread(app, poll_interval=0.1, change_check_interval=60) as worker:
        wait_until(lambda: worker.counters["due_checks"] >= 2, what="the first polls")
        scheduler = worker._upkeep.scheduler  # (white box: how often it read the table)
        assert scheduler is not None
        claims, passes = worker.counters["claims"], scheduler.passes
        checks = worker.counters["due_checks"]
        wait_until(lambda: worker.counters["due_checks"] >= checks + 10, what="ten polls")
        assert worker.counters["claims"] == claims, "an idle poll claimed"
        # each answer holds the scheduler's fallback two polls off; a stalled pass that
        # finds both timers overdue runs the scheduler first (a spare read, no harm)
        assert scheduler.passes - passes <= 2, "the scheduler polled beside next_due"
        other.enqueue("note", args=["unannounced"], known=False)
        wait_until(lambda: ran == ["unannounced"], what="the job, found by the poll")
        assert worker.counters["claims"] >= claims + 1


def test_a_short_batchs_question_of_when_to_look_again_waits_until_its_jobs_began(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After a claim that came back short, the worker asks next_due, but only once the
    jobs it started have begun (or DUE_QUESTION_HOLD has passed): asked at once on a lane
    thread (PostgreSQL), the question's round trip took the GIL from the handler threads
    as they woke, and an idle worker's job started 0.1 ms later. Every question is
    checked as it is asked; it still goes out while the job runs, not after it ends.
    (SQLite asks inline, with no hold: its check is that the question still comes.)"""
    app = App(url)
    ran: list[int] = []
    release = threading.Event()

    @app.task
    def note(i: int) -> None:
        ran.append(i)
        if i == 0:
            release.wait(10)

    probe = app._open_backend()
    backend_type = type(probe)
    probe.close()
    original = backend_type.next_due
    asked: list[tuple[bool, bool]] = []  # (its jobs had begun or the hold was over, 0 runs)
    holder: dict[str, sqljobs.Worker] = {}

    def next_due(self: Any, *args: Any, **kwargs: Any) -> Any:
        worker = holder["worker"]
        hold = worker._producer.due_hold  # (white box: until when the question may wait)
        runs = list(worker.inflight.values())
        unbegun = [r for r in runs if r.begun is None and not r.prefetched]
        asked.append((not unbegun or time.monotonic() >= hold, not release.is_set()))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(backend_type, "next_due", next_due)
    with worker_thread(app, concurrency=4) as worker:
        holder["worker"] = worker
        wait_until(lambda: worker.counters["due_checks"] >= 1, what="the first question")
        before = len(asked)
        note.enqueue(0)  # runs until released: the question must not wait for its end
        wait_until(lambda: len(asked) > before, what="the question after 0's claim")
        assert asked[-1][1], "the question waited for the job's end"
        wait_until(lambda: 0 in ran, what="job 0")
        release.set()
        for i in range(1, 6):
            before = len(asked)
            note.enqueue(i)
            wait_until(lambda: i in ran and len(asked) > before, what=f"job {i}, a question")  # noqa: B023
    assert asked and all(ok for ok, _ in asked), asked


def test_the_poll_claims_a_job_it_finds_due_under_a_frozen_clock(url: str) -> None:
    """A test's frozen App clock never reaches "due in 5 ms": a job the poll's next_due
    calls due now is claimed at once, not when that clock moves. (On SQLite the change
    counter finds it too: PostgreSQL is the telling case.)"""
    from sqljobs.testing import Clock

    clock = Clock()
    app = App(url, clock=clock, backend_options={"listen": False})
    ran: list[str] = []

    @app.task
    def note(label: str) -> None:
        ran.append(label)

    other = App(url, clock=clock)  # another process, as far as wake-ups go
    with stepped_worker(app, poll_interval=0.1, change_check_interval=60) as worker:
        worker.until(lambda: worker.counters["due_checks"] >= 2, what="the worker idles")
        other.enqueue("note", args=["found"], known=False)
        worker.until(lambda: ran == ["found"], what="the job, found by the poll")


def test_a_schedule_added_unannounced_fires_when_next_due_says_it_falls_due(url: str) -> None:
    """A worker that hears no announcement (no LISTEN, no wake-up) and whose scheduler
    has nothing to fire still learns of a schedule added elsewhere: its polls' next_due
    answer carries the earliest schedule's time, and the pass comes then. (On SQLite the
    change counter, read every pass, also brings a pass: PostgreSQL is the telling case.)"""
    app = App(url, backend_options={"listen": False})
    ran: list[float] = []

    @app.task
    def tick() -> None:
        ran.append(time.time())

    other = App(url)
    with worker_thread(app, poll_interval=0.2, change_check_interval=60) as worker:
        wait_until(lambda: worker.counters["due_checks"] >= 2, what="the worker idles")
        added = time.time()
        other.schedule("unannounced", task="tick", every=0.5, known=False)
        wait_until(lambda: len(ran) >= 2, what="two ticks of the new schedule")
    assert ran[0] - added < 0.5 + 0.2 + 0.5, "the first tick came a poll after it fell due"


def test_ctx_transaction_commits_effects_with_the_completion(app: App) -> None:
    db_execute(app, "CREATE TABLE accounts (id TEXT PRIMARY KEY, balance INTEGER)")
    db_execute(app, "INSERT INTO accounts VALUES ('1001', 10000)")
    mark = placeholder(app)

    @app.task(lease=30)
    def pay(ctx: sqljobs.JobContext, order_id: str) -> None:
        with ctx.transaction() as tx:
            if sqljobs.idempotent(tx, f"order-{order_id}:pay"):
                tx.execute(
                    f"UPDATE accounts SET balance = balance - 100 WHERE id = {mark}", (order_id,)
                )

    ids = [pay.enqueue("1001").id for _ in range(5)]  # five deliveries of one payment
    with stepped_worker(app) as worker:
        done = worker.until_event("finished", state="done", count=5)
    assert {e.job_id for e in done} == set(ids)
    assert db_execute(app, "SELECT balance FROM accounts") == [(9900,)]


def test_a_lost_lease_rolls_back_the_transaction_and_tells_the_handler(app: App) -> None:
    db_execute(app, "CREATE TABLE effects (n INTEGER)")
    entered, saw_loss = threading.Event(), threading.Event()
    outcome: list[str] = []

    lost = threading.Event()

    @app.task(lease=30)
    def effect(ctx: sqljobs.JobContext) -> None:
        entered.set()
        assert lost.wait(10)  # set by the worker's lease_lost event, below
        assert ctx.lease_lost
        try:
            with ctx.transaction() as tx:
                tx.execute("INSERT INTO effects VALUES (1)")
        except sqljobs.LeaseLost as exc:
            outcome.append(str(exc))
        saw_loss.set()  # the handler is through: what it tried has been decided

    job_id = effect.enqueue().id

    def on_event(event: sqljobs.worker.WorkerEvent) -> None:
        if event.kind == "lease_lost":
            lost.set()

    # one thread, no buffer: the worker has no free slot to take the job back itself once
    # the reaper below hands it back (it raced the other worker for it, and won, in CI)
    with worker_thread(app, on_event=on_event, concurrency=1, prefetch=0) as worker:
        assert entered.wait(10)
        # another worker takes the job over after an (simulated) lease expiry
        expire_lease(app, job_id)
        from sqljobs.maintenance import Reaper

        other = App(app.url)._open_backend()
        other.register_worker(WorkerInfo("other-worker", "h", 1, None, 1, 10.0))
        Reaper(other).run_once()
        (taken,) = other.claim_jobs(Claim("other-worker", None, 1))
        worker.request_heartbeat()
        assert saw_loss.wait(10)
    assert outcome, "the handler's transaction raised LeaseLost"
    assert db_execute(app, "SELECT count(*) FROM effects") == [(0,)]
    job = app.get_job(job_id)
    assert job is not None and job.state is JobState.RUNNING and job.token == taken.token
    assert worker.counters["leases_lost"] == 1


def test_cancelling_a_running_job_tells_its_handler(app: App) -> None:
    entered, stopped = threading.Event(), threading.Event()

    @app.task
    async def long_async() -> None:
        entered.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            stopped.set()
            raise

    job_id = long_async.enqueue().id
    with stepped_worker(app) as worker:
        worker.until(entered.is_set, what="the handler to begin")
        assert app.cancel_job(job_id)
        worker.worker.request_heartbeat()
        worker.until(stopped.is_set, what="the handler to stop")
    assert _state(app, job_id) is JobState.CANCELLED


def _make_suspects(app: App, task: sqljobs.Task, n: int) -> list[int]:
    """Jobs due now that look as if they had been in two workers that crashed."""
    ids = [task.with_options(delay=3600).enqueue(f"suspect{i}").id for i in range(n)]
    for job_id in ids:
        db_execute(
            app,
            "UPDATE sqljobs_jobs SET crashes = 2, run_at = created_at WHERE id = ?",
            params=(job_id,),
        )
    return ids


def test_jobs_from_a_crashed_worker_run_alone(app: App) -> None:
    running: list[str] = []
    overlap: list[tuple[str, ...]] = []
    release = threading.Event()

    @app.task
    def step(name: str) -> None:
        running.append(name)
        overlap.append(tuple(running))
        if name == "long":
            release.wait(10)
        running.remove(name)

    long_id = step.enqueue("long").id
    with stepped_worker(app, concurrency=4, poll_interval=0.2) as worker:
        worker.until_event("started", long_id)
        suspects = _make_suspects(app, step, 2)
        normal = [step.enqueue(f"normal{i}").id for i in range(4)]
        release.set()
        done = worker.until_event("finished", state="done", count=7)
    assert {e.job_id for e in done} == {long_id, *suspects, *normal}
    runs_of_suspects = [o for o in overlap if any(n.startswith("suspect") for n in o)]
    assert runs_of_suspects and all(len(o) == 1 for o in runs_of_suspects), overlap


def test_a_due_suspect_does_not_make_an_idle_worker_spin(app: App) -> None:
    @app.task
    def step(name: str) -> None: ...

    events = EventLog()
    with worker_thread(app, poll_interval=1.0, on_event=events) as worker:
        wait_until(lambda: worker.counters["claims"] >= 1, what="the first (empty) claim")
        suspects = _make_suspects(app, step, 1)
        before, polled = worker.counters["claims"], worker.counters["due_checks"]
        # the window: from the suspect falling due (found at a poll: nothing announced
        # it) until it has run and the worker has polled once more
        events.wait("finished", suspects[0], state="done", timeout=5)
        after_run = worker.counters["due_checks"]
        wait_until(lambda: worker.counters["due_checks"] > after_run, what="a poll after")
        claims = worker.counters["claims"] - before
        polls = worker.counters["due_checks"] - polled
    # a claim per poll, and the one that took the suspect
    assert claims <= polls + 1, f"{claims} claim queries over {polls} polls: it spins"


def test_prefetch_adapts_to_how_long_jobs_run(app: App) -> None:
    @app.task
    def quick() -> None: ...

    @app.task
    def slow() -> None:
        time.sleep(0.1)  # the job's own work

    with stepped_worker(app, concurrency=2) as stepper:
        worker = stepper.worker
        assert worker.prefetch == 2, "before any job ran: as many as concurrency"
        quick.enqueue_many([() for _ in range(50)])
        stepper.until_event("finished", count=50)
        cap = sqljobs.worker.producer.PREFETCH_CAP * 2 * worker.lanes
        assert 2 < worker.prefetch <= cap, "short jobs: more than concurrency, up to the cap"
        # (the runtime measured under load may leave it short of the cap: set it)
        worker.runtime = 0.0001
        assert worker.prefetch == cap, "short jobs: PREFETCH_CAP x concurrency per lane"
        slow.enqueue_many([() for _ in range(12)])
        stepper.until_event("finished", count=62)
        assert worker.prefetch <= 1, "long jobs: nothing waits in a buffer"
    fixed = sqljobs.Worker(app, prefetch=3, install_signal_handlers=False)
    assert fixed.prefetch == 3 and fixed.capacity == 11


@pytest.mark.parametrize("lanes", [None, 3])
def test_claims_in_flight_together_never_hand_out_a_job_twice(app: App, lanes: int | None) -> None:
    """Several claim round trips in flight at once (the PostgreSQL default is two; three
    here on both backends) still give every job to one thread once."""
    ran: collections.Counter[int] = collections.Counter()
    lock = threading.Lock()

    @app.task
    def count(i: int) -> None:
        with lock:
            ran[i] += 1

    count.enqueue_many([(i,) for i in range(3000)])
    with stepped_worker(app, concurrency=4, claim_lanes=lanes) as stepper:
        stepper.until_event("finished", state="done", count=3000)
        worker = stepper.worker
        expected = lanes or (2 if is_pg(app) else 1)
        assert worker.lanes == expected
        # capacity adapts to the measured runtime, so bound each claim by the largest a
        # lane's share of it can ever be, not by the capacity at the end
        cap = worker.config.concurrency * (1 + sqljobs.worker.producer.PREFETCH_CAP * expected)
        assert worker.counters["claims"] >= 3000 / -(-cap // expected)
    assert sorted(ran) == list(range(3000))
    assert set(ran.values()) == {1}, "a job ran twice"
    assert app.stats().total("done") == 3000
    assert worker.counters["stale_results"] == 0


def test_a_retry_claimed_by_another_lane_before_its_first_attempt_is_accounted(
    app: App, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two lanes: lane A writes a job's first failure (a retry) and is held back after its
    commit; lane B claims the retry, which fails for good and is collected, all before A's
    trip is accounted. Each attempt must still get its own ``finished`` event and metrics
    tally: kept by job id alone, the second attempt's entry replaced the first's and one
    of them was lost (a dead job was reported as failed)."""
    a_held, second_collected, second_ended = threading.Event(), threading.Event(), threading.Event()

    @app.task(retry=Retry(max_attempts=2, base=0.3, jitter=False))
    def flaky(ctx: sqljobs.JobContext) -> None:
        if ctx.attempt == 2:
            second_ended.set()
        raise RuntimeError(f"attempt {ctx.attempt}")

    @app.task(priority=9)  # claimed first: it keeps a thread busy so A goes out on a lane
    def holder(flaky_id: int) -> None:
        assert a_held.wait(10), "lane A never carried the first failure"
        job = app.get_job(flaky_id)
        assert job is not None and job.state == "pending"
        wait_until(lambda: app.clock() >= job.run_at, timeout=10)  # the retry is due: B takes it

    flaky_id = flaky.enqueue().id
    holder.enqueue(flaky_id)
    events = EventLog()
    worker = sqljobs.Worker(app, concurrency=2, prefetch=0, claim_lanes=2, poll_interval=0.05,
                            install_signal_handlers=False, on_event=events)  # fmt: skip

    def hold_lane_a(outcomes: Any) -> None:
        """After a lane's write committed: hold the lane that carried the first failure
        until the retry was claimed on the other lane, ran, and was collected (its run
        left ``inflight``: the coordinator took its result)."""
        first_failure = any(o.job_id == flaky_id and o.state is JobState.PENDING for o in outcomes)
        if first_failure and threading.current_thread().name.endswith(("-lane-1", "-lane-2")):
            a_held.set()
            assert second_ended.wait(10), "lane B never claimed the retry"
            wait_until(lambda: flaky_id not in worker.inflight, timeout=10)
            second_collected.set()

    probe = app._open_backend()
    backend_type = type(probe)
    probe.close()
    finish_and_claim, finish_jobs = backend_type.finish_and_claim, backend_type.finish_jobs

    def held_finish_and_claim(self: Any, outcomes: Any, *args: Any, **kwargs: Any) -> Any:
        done = finish_and_claim(self, outcomes, *args, **kwargs)
        hold_lane_a(outcomes)
        return done

    def held_finish_jobs(self: Any, outcomes: Any, *args: Any, **kwargs: Any) -> Any:
        done = finish_jobs(self, outcomes, *args, **kwargs)
        hold_lane_a(outcomes)
        return done

    monkeypatch.setattr(backend_type, "finish_and_claim", held_finish_and_claim)
    monkeypatch.setattr(backend_type, "finish_jobs", held_finish_jobs)
    errors: list[BaseException] = []

    def run() -> None:
        try:
            worker.run()
        except BaseException as exc:  # (a lane's failed assert is raised on the coordinator)
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        # both attempts' ends, whichever trip is accounted first (kept by job id, one of
        # them never came: the wait failed)
        events.wait("finished", flaky_id, count=2, timeout=10)
        assert a_held.is_set() and second_collected.is_set(), "the lanes did not race as planned"
        finished = [(e.attempt, e.state) for e in events.of("finished", flaky_id)]
        assert sorted(finished) == [(1, "pending"), (2, "dead")]
    finally:
        worker.stop()
        thread.join(30)
    assert not thread.is_alive(), "worker did not stop"
    assert not errors, errors
    assert app.get_job(flaky_id).state == "dead"  # type: ignore[union-attr]
    attempts = {
        a.outcome: a.amount
        for a in app.metric_totals()
        if a.task == "flaky" and a.series == "attempts"
    }
    assert attempts == {"retried": 1, "dead": 1}


def test_claim_lanes_must_be_positive(app: App) -> None:
    app.task(name="any")(lambda: None)
    with pytest.raises(sqljobs.ConfigurationError, match="claim_lanes"):
        sqljobs.Worker(app, claim_lanes=0)


def test_a_completion_in_the_jobs_own_transaction_is_never_taken_for_a_lost_lease(
    app: App,
) -> None:
    """A heartbeat that runs after ``ctx.transaction()`` committed "done" but before the
    worker collected the handler's return finds the job no longer running. That is the
    job's own success: no "lease lost", no discarded result, and never more handlers
    running than ``concurrency`` (the chaos run once saw 32 at concurrency 4)."""
    db_execute(app, "CREATE TABLE effects (job_id INTEGER PRIMARY KEY)")
    mark = placeholder(app)
    live, peak, lock = [0], [0], threading.Lock()

    @app.task(lease=0.3)
    def write(ctx: sqljobs.JobContext) -> None:
        with lock:
            live[0] += 1
            peak[0] = max(peak[0], live[0])
        try:
            with ctx.transaction() as tx:
                tx.execute(f"INSERT INTO effects VALUES ({mark})", (ctx.job_id,))
            time.sleep(0.01)  # work after the commit: the window a heartbeat falls into
        finally:
            with lock:
                live[0] -= 1

    write.enqueue_many([() for _ in range(200)])
    with stepped_worker(app, concurrency=4) as worker:
        worker.until_event("finished", state="done", count=200)
    assert not worker.events.of("lease_lost") and not worker.events.of("discarded")
    assert worker.counters["heartbeats"] >= 3  # heartbeats did run while jobs completed
    assert worker.counters["leases_lost"] == 0
    assert worker.counters["stale_results"] == 0
    assert peak[0] <= 4


@pytest.mark.parametrize("raised", [SystemExit(3), KeyboardInterrupt(), GeneratorExit()])
def test_a_handler_raising_a_base_exception_fails_its_attempt_and_the_worker_goes_on(
    app: App, raised: BaseException
) -> None:
    @app.task(retry=Retry(max_attempts=2, base=0))
    def exits() -> None:
        raise raised

    @app.task
    def fine() -> None: ...

    bad = exits.enqueue().id
    with stepped_worker(app, concurrency=1) as worker:
        worker.until_event("finished", bad, state="dead")
        good = fine.enqueue().id  # the worker's one thread survived both attempts
        worker.until_event("finished", good, state="done")
    job = app.get_job(bad)
    assert job is not None and job.attempts == 2
    assert [h["outcome"] for h in job.history] == ["failed", "failed"]
    assert type(raised).__name__ in (job.last_error or "")


def test_a_worker_logs_its_banner_every_failed_attempt_and_a_summary(
    app: App, caplog: pytest.LogCaptureFixture
) -> None:
    @app.task(retry=Retry(max_attempts=2, base=0.5, cap=0.5))
    def flaky(order: str) -> None:
        raise ValueError(f"no stock for {order}")

    job_id = flaky.enqueue("o-1").id
    with (
        caplog.at_level(logging.DEBUG, logger="sqljobs"),
        stepped_worker(app, concurrency=2) as worker,
    ):
        worker.until_event("finished", job_id, state="dead")
    records = [r for r in caplog.records if r.name == "sqljobs.worker"]
    banner = next(r for r in records if "started on" in r.getMessage())
    assert banner.levelno == logging.INFO
    assert "concurrency 2" in banner.getMessage() and "flaky" in banner.getMessage()
    retried = [
        r for r in records if r.levelno == logging.WARNING and "attempt 1/2" in r.getMessage()
    ]
    assert len(retried) == 1
    text = retried[0].getMessage()
    assert f"job {job_id} (flaky)" in text and "ValueError: no stock for o-1" in text
    assert "retry in" in text
    assert retried[0].job_id == job_id and retried[0].task == "flaky"  # type: ignore[attr-defined]
    dead = [r for r in records if r.levelno == logging.ERROR and "is dead" in r.getMessage()]
    assert len(dead) == 1 and "Traceback" in dead[0].getMessage()
    summary = next(r for r in records if "stopped after" in r.getMessage())
    assert "1 dead" in summary.getMessage() and "1 retried" in summary.getMessage()


def test_a_stepped_worker_reports_each_pass_and_each_jobs_life(app: App) -> None:
    """Worker.run_once() is one pass of the coordinator; the on_event hook says what
    happened to each job, in order: claimed, started, finished (once written)."""

    @app.task
    def hello(n: int) -> None: ...

    ids = [hello.enqueue(i).id for i in range(3)]
    events = EventLog()
    worker = sqljobs.Worker(app, concurrency=2, install_signal_handlers=False, on_event=events)
    with pytest.raises(ConfigurationError, match="start"):
        worker.run_once()
    with worker:
        first = worker.run_once()
        assert first.claimed >= 1 and not first.stopped
        worker.run_until(lambda: len(events.of("finished")) == 3, timeout=10)
    for job_id in ids:
        kinds = [e.kind for e in events.events if e.job_id == job_id]
        assert kinds == ["claimed", "started", "finished"], kinds
        assert _state(app, job_id) is JobState.DONE
    assert worker.stopped.is_set()
    assert app.stats().workers == 0  # closed: unregistered


def test_an_on_event_hook_that_raises_is_logged_and_the_worker_goes_on(
    app: App, caplog: pytest.LogCaptureFixture
) -> None:
    @app.task
    def t() -> None: ...

    def broken(event: sqljobs.worker.WorkerEvent) -> None:
        raise RuntimeError("hook bug")

    job_id = t.enqueue().id
    with sqljobs.Worker(app, install_signal_handlers=False, on_event=broken) as worker:
        worker.run_until(lambda: _state(app, job_id) is JobState.DONE, timeout=10)
    assert any("on_event hook raised" in r.getMessage() for r in caplog.records)


def test_a_second_ctx_transaction_in_one_attempt_is_a_clear_mistake(app: App) -> None:
    errors: list[BaseException] = []

    @app.task
    def twice(ctx: sqljobs.JobContext) -> None:
        with ctx.transaction():
            pass
        try:
            with ctx.transaction():
                pass
        except ConfigurationError as exc:
            errors.append(exc)

    job_id = twice.enqueue().id
    with stepped_worker(app) as worker:
        worker.until_event("finished", job_id, state="done")
    assert len(errors) == 1 and "already completed by an earlier" in str(errors[0])
