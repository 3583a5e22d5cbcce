"""Concurrency limits in one process, on both backends: per task and per key, enforced by
the claim, never charging an attempt, no head-of-line blocking, a crashed claim's slot
coming back with its lease, and clear refusals. Worker processes: test_limits_processes.py.
"""

from __future__ import annotations

import collections
import threading
import time
from typing import Any

import pytest

from sqljobs import App, ConfigurationError, JobState, PayloadError
from sqljobs.backends.base import Claim, DueQuery, WorkerInfo
from sqljobs.backends.ops import claims
from sqljobs.jobs import Outcome
from sqljobs.maintenance import Reaper
from sqljobs.testing import Stepper, stepped_worker

from .conftest import db_execute, expire_lease, is_pg


class Overlap:
    """Counts how many handlers run at once, per key and in all."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.now: collections.Counter[str] = collections.Counter()
        self.most: collections.Counter[str] = collections.Counter()
        self.total = 0
        self.most_total = 0

    def run(self, key: str, seconds: float) -> None:
        with self.lock:
            self.now[key] += 1
            self.total += 1
            self.most[key] = max(self.most[key], self.now[key])
            self.most_total = max(self.most_total, self.total)
        time.sleep(seconds)
        with self.lock:
            self.now[key] -= 1
            self.total -= 1


def test_a_task_limit_holds_with_more_threads_than_slots(app: App) -> None:
    overlap = Overlap()

    @app.task(concurrency=2)
    def export(n: int) -> None:
        overlap.run("export", 0.03)

    handles = export.enqueue_many([(i,) for i in range(12)])
    with stepped_worker(app, concurrency=8) as worker:
        for handle in handles:
            worker.result(handle)
    assert overlap.most["export"] == 2, "the limit was reached, never passed"


def test_a_limit_per_key_holds_each_key_and_lets_keys_run_side_by_side(app: App) -> None:
    overlap = Overlap()

    @app.task(concurrency=2, concurrency_key=lambda tenant, **_: tenant)
    def sync(tenant: str, n: int) -> None:
        overlap.run(tenant, 0.03)

    handles = [sync.enqueue(t, i) for i in range(6) for t in ("acme", "globex", "initech")]
    with stepped_worker(app, concurrency=8) as worker:
        for handle in handles:
            worker.result(handle)
    assert max(overlap.most.values()) == 2
    assert overlap.most_total > 2, "the keys ran side by side"
    job = handles[0].refresh()
    assert job.state is JobState.DONE and job.attempts == 1


def test_a_key_given_at_enqueue_wins_over_the_key_function(app: App) -> None:
    overlap = Overlap()

    @app.task(concurrency=1, concurrency_key=lambda n: f"own-{n}")
    def call(n: int) -> None:
        overlap.run("shared", 0.02)

    handles = [call.with_options(concurrency_key="shared").enqueue(i) for i in range(5)]
    with stepped_worker(app, concurrency=4) as worker:
        for handle in handles:
            worker.result(handle)
    assert overlap.most["shared"] == 1


def test_a_key_at_its_limit_blocks_neither_other_keys_nor_attempts(app: App) -> None:
    """Jobs of a saturated key wait unclaimed (no attempt charged) while a job of another
    key, enqueued after all of them, runs at once."""
    release = threading.Event()

    @app.task(concurrency=1, concurrency_key=lambda tenant, **_: tenant)
    def sync(tenant: str, n: int) -> None:
        if tenant == "busy":
            release.wait(30)

    busy = [sync.enqueue("busy", i) for i in range(40)]
    with stepped_worker(app, concurrency=4) as worker:
        worker.until_event("started", job_id=busy[0].id)
        other = sync.enqueue("calm", 0)
        worker.result(other)
        waiting = busy[1].refresh()
        assert waiting.state is JobState.PENDING and waiting.attempts == 0
        release.set()
        for handle in busy:
            worker.result(handle)


def test_a_claimed_slot_comes_back_when_its_lease_expires(app: App) -> None:
    """A worker that claimed a limited job and died holds its slot until its lease runs
    out; then the reaper frees it and the job runs elsewhere."""

    @app.task(concurrency=1, lease=30)
    def once() -> str:
        return "ran"

    first, second = once.enqueue(), once.enqueue()
    ghost = app.backend.claim_jobs(Claim("ghost", None, 5, limited=True))  # then it dies
    assert [j.id for j in ghost] == [first.id], "the limit let the ghost take one job only"
    assert app.backend.claim_jobs(Claim("other", None, 5, limited=True)) == [], "its slot is held"
    expire_lease(app, first.id)
    Reaper(app.backend).run_once()
    with stepped_worker(app) as worker:
        assert worker.result(first) == "ran" and worker.result(second) == "ran"


def test_unlimited_claims_never_take_limited_jobs(app: App) -> None:
    @app.task(concurrency=1)
    def limited() -> None: ...

    @app.task
    def free() -> None: ...

    limited.enqueue()
    free_id = free.enqueue().id
    claimed = app.backend.claim_jobs(Claim("w", None, 10))  # a worker without limited tasks
    assert [j.id for j in claimed] == [free_id]


def test_a_limit_by_name_from_another_service(url: str) -> None:
    """A process that lacks the task enqueues by name: the catalogue (written by the
    worker that has it) carries the limit; a key function lives in that service's code,
    so a keyed task needs the key with the enqueue."""
    service = App(url)

    @service.task(concurrency=2, concurrency_key=lambda tenant: tenant)
    def sync(tenant: str) -> None: ...

    with stepped_worker(service) as worker:
        worker.until(lambda: service.backend.task_info("sync"), what="the worker's registration")
        other = App(url)
        with pytest.raises(ConfigurationError, match="pass concurrency_key"):
            other.enqueue("sync", args=["acme"])
        handle = other.enqueue("sync", args=["acme"], concurrency_key="acme")
        assert worker.result(handle) is None


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"concurrency": 0}, "concurrency must be an int >= 1"),
        ({"concurrency": True}, "concurrency must be an int >= 1"),
        ({"concurrency_key": lambda x: x}, "concurrency_key needs concurrency=N"),
        ({"concurrency": 2, "concurrency_key": "tenant"}, "must be a function"),
    ],
)
def test_bad_limits_are_refused_where_they_are_declared(
    app: App, options: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigurationError, match=message):
        app.task(**options)(lambda x: None)


def test_bad_keys_are_refused_at_enqueue(app: App) -> None:
    @app.task(concurrency=1, concurrency_key=lambda tenant: None)
    def keyless(tenant: str) -> None: ...

    @app.task(concurrency=1, concurrency_key=lambda tenant: tenant["id"])
    def broken(tenant: str) -> None: ...

    @app.task
    def free(n: int) -> None: ...

    with pytest.raises(PayloadError, match="returned None"):
        keyless.enqueue("acme")
    with pytest.raises(PayloadError, match="concurrency_key function of task 'broken' failed"):
        broken.enqueue("acme")
    with pytest.raises(ConfigurationError, match="has no concurrency limit"):
        free.with_options(concurrency_key="x")
    with pytest.raises(PayloadError, match="over 200"):
        keyless.with_options(concurrency_key="k" * 300).enqueue("acme")
    assert app.stats().total("pending") == 0, "nothing was stored"


def _most_in_a_window(starts: list[float], window: float = 1.0) -> int:
    """The most starts in any half-open window of ``window`` seconds."""
    starts = sorted(starts)
    return max(sum(1 for t in starts[i:] if t - s < window) for i, s in enumerate(starts))


def test_a_rate_spaces_starts_and_no_window_holds_more(app: App) -> None:
    @app.task(rate="5/s")
    def call(n: int) -> None: ...

    handles = call.enqueue_many([(i,) for i in range(12)])
    began = time.monotonic()
    with stepped_worker(app, concurrency=8) as worker:
        for handle in handles:
            worker.result(handle)
    took = time.monotonic() - began
    starts = [h.refresh().started_at or 0.0 for h in handles]
    assert _most_in_a_window(starts) == 5, "bursts of 5 at most, and bursts of 5 happen"
    assert took >= 1.9, f"12 starts at 5/s take two windows at least, took {took:.2f} s"
    # the worker slept until each window opened instead of asking every few milliseconds
    assert worker.counters["claims"] < 60, worker.counters


def test_a_rate_per_key_paces_each_key_apart(app: App) -> None:
    @app.task(rate="3/s", concurrency_key=lambda tenant, **_: tenant)
    def call(tenant: str, n: int) -> None: ...

    handles = [call.enqueue(t, i) for i in range(4) for t in ("acme", "globex")]
    with stepped_worker(app, concurrency=8) as worker:
        for handle in handles:
            worker.result(handle)
    for tenant in ("acme", "globex"):
        starts = [h.refresh().started_at or 0.0 for h in handles if h.refresh().args[0] == tenant]
        assert _most_in_a_window(starts) == 3
    both = [h.refresh().started_at or 0.0 for h in handles]
    assert _most_in_a_window(both) == 6, "the two keys' windows are their own"


@pytest.mark.parametrize("bad", ["14", "14/x", "0/s", "fast", 14, "20000/s"])
def test_a_bad_rate_is_refused(app: App, bad: Any) -> None:
    with pytest.raises(ConfigurationError, match="rate"):
        app.task(rate=bad)(lambda: None)


def test_a_waiting_limited_job_says_why(app: App) -> None:
    @app.task(concurrency=1, concurrency_key=lambda tenant: tenant)
    def sync(tenant: str) -> None: ...

    @app.task(rate="1/m")
    def mail() -> None: ...

    first, second = sync.enqueue("acme"), sync.enqueue("acme")
    sent, held = mail.enqueue(), mail.enqueue()
    tasks = (sync.info, mail.info)  # a live worker runs both: only the limits hold them back
    app.backend.register_worker(WorkerInfo("w", "host", 1, None, 4, 10.0, tasks))
    claimed = app.backend.claim_jobs(Claim("w", None, 10, limited=True))
    assert {j.id for j in claimed} == {first.id, sent.id}
    reason = app.waiting_reason(second.refresh())
    assert reason is not None and "sync:acme is at its limit of 1 running at once" in reason
    reason = app.waiting_reason(held.refresh())
    assert reason is not None and "mail reached its rate of 1/m" in reason
    assert app.waiting_reason(first.refresh()) is None, "a running job waits for nothing"


def test_a_worker_whose_code_lost_the_limit_still_runs_limited_jobs(url: str) -> None:
    """Jobs enqueued by code with a limit, run by a worker whose code has none (a deploy
    that dropped it): they carry their limit, and the worker claims them under it."""
    old = App(url)
    old.task(name="sync", concurrency=1)(lambda n: None)
    handles = [old.enqueue("sync", args=[i]) for i in range(3)]
    new = App(url)
    new.task(name="sync")(lambda n: None)
    with stepped_worker(new) as worker:
        for handle in handles:
            assert worker.result(handle) is None


def test_a_cancelled_buffered_job_gives_its_slot_back(app: App) -> None:
    """With one thread, a buffered job cancelled while the thread is busy must not keep
    the worker from claiming once the thread is free."""
    release = threading.Event()

    @app.task
    def step(name: str) -> str:
        if name == "first":
            release.wait(30)
        return name

    first, second = step.enqueue("first"), step.enqueue("second")
    with stepped_worker(app, concurrency=1, prefetch=1) as worker:
        worker.until_event("claimed", job_id=second.id)
        app.cancel(second.id)
        worker.until_event("cancelled", job_id=second.id)
        release.set()
        assert worker.result(first) == "first"
        later = step.enqueue("later")
        assert worker.result(later) == "later"


class Stubborn:
    """A handler that ignores ctx.cancelled and its timeout: it runs until released, and
    says when each run began and ended."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.lock = threading.Lock()
        self.began: dict[str, float] = {}
        self.ended: dict[str, float] = {}

    def run(self, name: str) -> str:
        with self.lock:
            self.began[name] = time.monotonic()
        if name == "first":
            self.release.wait(30)
        with self.lock:
            self.ended[name] = time.monotonic()
        return name


def _marker(app: App) -> Any:
    """An unlimited task: each of its jobs run start to end is a claim pass of the worker."""

    @app.task(name="marker")
    def marker(n: int) -> int:
        return n

    return marker


def _second_waits_for_the_first(
    app: App, stubborn: Stubborn, worker: Stepper, first: int, marker: Any
) -> None:
    """With the first job out of `running` but its handler running on, the worker makes
    claim passes and the second, limited, job stays pending; once the handler returns,
    the second starts, after it."""
    for n in range(3):  # each a claim pass after the first left `running`
        assert worker.result(marker.enqueue(n)) == n
    assert "second" not in stubborn.began, "a second handler started beside the first"
    second = app.get_job(first + 1)
    assert second is not None and second.state is JobState.PENDING
    stubborn.release.set()
    worker.until_event("finished", job_id=first + 1)
    assert stubborn.began["second"] >= stubborn.ended["first"]


def test_a_cancelled_handler_that_runs_on_keeps_its_slot_until_it_returns(app: App) -> None:
    """SPEC: a running job becomes `cancelled` and its concurrency slot is held until its
    handler has ended. A handler that ignores ctx.cancelled keeps it until it returns."""
    stubborn = Stubborn()

    @app.task(concurrency=1, lease=1.0)
    def limited(name: str) -> str:
        return stubborn.run(name)

    first, marker = limited.enqueue("first").id, _marker(app)
    with stepped_worker(app, concurrency=2) as worker:
        worker.until(lambda: "first" in stubborn.began, what="the first handler to begin")
        assert limited.enqueue("second").id == first + 1
        app.cancel(first)
        worker.until_event("cancelled", job_id=first)
        cancelled = app.get_job(first)
        assert cancelled is not None and cancelled.state is JobState.CANCELLED
        held_until = cancelled.lease_until
        assert held_until is not None

        def renewed() -> bool:  # the hold outlives the lease it had: the heartbeat renews it
            job = app.get_job(first)
            return job is not None and (job.lease_until or 0) > held_until + 0.5

        worker.until(renewed, what="the worker to renew the held slot")
        [usage] = app.stats().limits.values()
        assert (usage.running, usage.concurrency) == (1, 1), "stats count the held slot"
        _second_waits_for_the_first(app, stubborn, worker, first, marker)
    job = app.get_job(first)
    assert job is not None and job.lease_until is None, "the slot was given back"


def test_a_timed_out_handler_that_runs_on_keeps_its_slot_until_it_returns(app: App) -> None:
    """A handler past its timeout is given up (the attempt fails and is retried or ends
    dead) but its thread runs on: the slot stays taken until it returns."""
    from sqljobs import Retry

    stubborn = Stubborn()

    @app.task(concurrency=1, lease=30, timeout=0.2, retry=Retry(max_attempts=1))
    def limited(name: str) -> str:
        return stubborn.run(name)

    first, marker = limited.enqueue("first").id, _marker(app)
    with stepped_worker(app, concurrency=2) as worker:
        worker.until(lambda: "first" in stubborn.began, what="the first handler to begin")
        assert limited.enqueue("second").id == first + 1
        worker.until_event("timed_out", job_id=first)
        worker.until(lambda: app.get_job(first).state is JobState.DEAD)  # type: ignore[union-attr]
        _second_waits_for_the_first(app, stubborn, worker, first, marker)
    job = app.get_job(first)
    assert job is not None and job.lease_until is None, "the slot was given back"


# -- limits on whole queues ----------------------------------------------------------------


def test_a_queue_limit_holds_across_its_tasks_and_a_task_limit_wins(app: App) -> None:
    overlap = Overlap()
    app.limit_queue("reports", concurrency=2)

    @app.task(queue="reports")
    def monthly(n: int) -> None:
        overlap.run("reports", 0.03)

    @app.task(queue="reports")
    def weekly(n: int) -> None:
        overlap.run("reports", 0.03)

    @app.task(queue="reports", concurrency=1)
    def yearly(n: int) -> None:  # its own limit, not the queue's
        overlap.run("yearly", 0.03)

    handles = [t.enqueue(i) for i in range(6) for t in (monthly, weekly)]
    own = yearly.enqueue(0)
    assert {h.refresh().limit_key for h in handles} == {"queue:reports"}
    assert own.refresh().limit_key == "yearly"
    with stepped_worker(app, concurrency=8) as worker:
        for handle in [*handles, own]:
            worker.result(handle)
    assert overlap.most["reports"] == 2, "the queue's limit was reached, never passed"


def test_a_queue_rate_paces_the_queue(app: App) -> None:
    app.limit_queue("mail", rate="4/s")

    @app.task(queue="mail")
    def send(n: int) -> None: ...

    handles = send.enqueue_many([(i,) for i in range(9)])
    with stepped_worker(app, concurrency=8) as worker:
        for handle in handles:
            worker.result(handle)
    starts = [h.refresh().started_at or 0.0 for h in handles]
    assert _most_in_a_window(starts) == 4


def test_a_queue_limit_reaches_enqueues_by_name_through_the_catalogue(url: str) -> None:
    service = App(url)
    service.limit_queue("mail", concurrency=3, rate="10/m")

    @service.task(queue="mail")
    def send(to: str) -> None: ...

    with stepped_worker(service) as worker:
        worker.until(lambda: service.backend.queue_limit("mail"), what="the worker's record")
        other = App(url)  # neither the task nor the queue's limit is defined here
        handle = other.enqueue("send", args=["a@example.com"])
        job = handle.refresh()
        assert (job.limit_key, job.limit_max, job.rate_max, job.rate_window) == (
            "queue:mail", 3, 10, 60.0,
        )  # fmt: skip
        assert worker.result(handle) is None
    # the limit taken out of the code: the next worker's record clears it
    service.queue_limits.clear()
    with stepped_worker(service) as worker:
        worker.until(lambda: service.backend.queue_limit("mail") is None, what="the clearing")
    assert App(url).enqueue("send", args=["b"]).refresh().limit_key is None


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({}, "needs concurrency=N"),
        ({"concurrency": 0}, "concurrency must be an int >= 1"),
        ({"rate": "fast"}, "queue 'q': rate must read like"),
    ],
)
def test_bad_queue_limits_are_refused(app: App, options: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        app.limit_queue("q", **options)
    with pytest.raises(ConfigurationError, match="queue name"):
        app.limit_queue("bad name", concurrency=1)


def test_stats_the_cli_metrics_and_the_dashboard_show_each_limit_s_backlog(app: App) -> None:
    from click.testing import CliRunner
    from starlette.testclient import TestClient

    from sqljobs.cli import Ctx, cli
    from sqljobs.dashboard import create_app

    app.limit_queue("mail", rate="2/m")

    @app.task(concurrency=1, concurrency_key=lambda tenant: tenant)
    def sync(tenant: str) -> None: ...

    @app.task(queue="mail")
    def send() -> None: ...

    for tenant in ("acme", "acme", "acme", "globex"):
        sync.enqueue(tenant)
    send.enqueue_many([() for _ in range(5)])
    tasks = (sync.info, send.info)
    app.backend.register_worker(WorkerInfo("w", "host", 1, None, 8, 10.0, tasks))
    claimed = app.backend.claim_jobs(Claim("w", None, 10, limited=True))
    assert len(claimed) == 4, "one of each tenant, two of the mail rate"
    limits = app.stats().limits
    assert set(limits) == {"sync:acme", "sync:globex", "queue:mail"}
    acme, globex, mail = limits["sync:acme"], limits["sync:globex"], limits["queue:mail"]
    assert (acme.running, acme.waiting, acme.concurrency, acme.full) == (1, 2, 1, True)
    assert (globex.running, globex.waiting) == (1, 0)
    assert (mail.running, mail.waiting, mail.rate, mail.queue) == (2, 3, "2/m", "mail")
    assert next(iter(limits)) == "queue:mail", "the busiest key first"
    assert app.stats().to_dict()["limits"]["sync:acme"]["waiting"] == 2

    shown = CliRunner(env={"COLUMNS": "100"}).invoke(cli, ["--url", app.url, "stats"], obj=Ctx())
    row = next(line for line in shown.stdout.splitlines() if "sync:acme" in line)
    assert row.split()[1:] == ["default", "1/1", "full", "2", "-"], shown.stdout
    metrics = TestClient(create_app(app), base_url="http://127.0.0.1").get("/metrics").text
    assert 'sqljobs_limit_waiting{key="queue:mail",queue="mail"} 3.0' in metrics
    assert 'sqljobs_limit_running{key="sync:acme",queue="default"} 1.0' in metrics
    page = TestClient(create_app(app), base_url="http://127.0.0.1").get("/").text
    assert "<h2>Limits</h2>" in page and "sync:globex" in page


def test_a_claim_buffers_limited_jobs_only_when_asked_and_within_free_slots(app: App) -> None:
    """A worker that knows its jobs are short may put limited jobs in its buffer (each
    holds a slot there): never more than a key's free slots, marked ``prefetched``."""

    @app.task(concurrency=3, concurrency_key=lambda tenant: tenant)
    def sync(tenant: str) -> None: ...

    for tenant in "aaaaabbbbb":
        sync.enqueue(tenant)
    backend, leases = app.backend, {"sync": 30.0}
    backend.register_worker(WorkerInfo("w", "host", 1, None, 8, 10.0, (sync.info,)))
    strict = backend.claim_jobs(Claim("w", None, 10, leases, start_now=2, limited=True))
    assert len(strict) == 2, "without a buffer allowance: only for the idle threads"
    buffered = backend.claim_jobs(Claim("w", None, 10, leases, 1, (), True, limited_buffer=8))
    assert len(buffered) == 4, "3 slots a key, 2 taken: 4 more in all"
    running = db_execute(app, "SELECT limit_key, count(*) FROM sqljobs_jobs "
                              "WHERE state = 'running' GROUP BY limit_key")  # fmt: skip
    assert sorted(running) == [("sync:a", 3), ("sync:b", 3)]
    marked = db_execute(app, "SELECT count(*) FROM sqljobs_jobs WHERE state = 'running' "
                             "AND prefetched = true")  # fmt: skip
    assert marked[0][0] == 3, "all but the one that starts at once wait in the buffer"


def test_a_key_at_its_limit_is_no_reason_to_look_again_soon(app: App) -> None:
    """A due job waiting for a slot is claimed when a completion announces the slot, so
    the question of when to look again does not name it (on PostgreSQL the empty rate
    question once answered "now", and an idle worker claimed every 5 ms)."""

    @app.task(concurrency=1)
    def export(n: int) -> None: ...

    export.enqueue(1), export.enqueue(2)
    assert len(app.backend.claim_jobs(Claim("w", None, 5, limited=True))) == 1
    assert app.backend.next_due(DueQuery(None, ["export"], limited=True)).wait is None


def test_a_finished_job_hands_its_slot_to_its_key_s_next_job(
    app: App, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once a full claim found no free slot, a limited job that ends passes its slot to
    the next due job of its key in its completion's statement, with no key lock and no
    count: the key's running jobs stay at its limit, never above it."""
    monkeypatch.setattr(claims, "LIMITED_SCAN_PAUSE", 60.0)  # a slow machine keeps to it

    @app.task(concurrency=2, concurrency_key=lambda tenant: tenant)
    def sync(tenant: str) -> None: ...

    a = [sync.enqueue("a").id for _ in range(4)]
    b = sync.enqueue("b").id
    backend, leases = app.backend, {"sync": 30.0}
    # the change marker stands still: a listener that connects, or an enqueue's trailing
    # NOTIFY arriving, between the claims below would move it and rightly ask for a scan
    monkeypatch.setattr(backend, "change_marker", lambda: 0)
    first = backend.claim_jobs(Claim("w", None, 10, leases, limited=True))
    assert sorted(j.id for j in first) == sorted([a[0], a[1], b])
    assert backend.claim_jobs(Claim("w", None, 10, leases, limited=True)) == [], "no slot free"

    def no_full_claim(*_: object) -> None:
        raise AssertionError("the full claim ran: every slot could be handed over")

    monkeypatch.setattr(backend, "_scan_limited", no_full_claim)
    ended = [Outcome(j.id, j.token, JobState.DONE) for j in first if j.id != b]
    written, heirs = backend.finish_and_claim(ended, Claim("w", None, 10, leases, limited=True))
    assert sorted(written) == [a[0], a[1]]
    assert [j.id for j in heirs] == [a[2], a[3]], "a's slots went to a's next jobs"
    assert _running(app) == [("sync:a", 2), ("sync:b", 1)]
    assert all(j.attempt == 1 for j in heirs)


def test_a_slot_is_handed_over_to_no_job_of_a_lower_limit_or_a_rate(
    app: App, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An heir whose limit is lower than the ended job's (a limit lowered in the code) or
    that carries a rate goes through the full claim, which counts: a lowered limit is not
    overrun and a rate's start is written down."""
    monkeypatch.setattr(claims, "LIMITED_SCAN_PAUSE", 60.0)

    @app.task(concurrency=2)
    def export(n: int) -> None: ...

    ids = [export.enqueue(i).id for i in range(4)]
    backend, leases = app.backend, {"export": 30.0}
    first = backend.claim_jobs(Claim("w", None, 10, leases, limited=True))
    assert backend.claim_jobs(Claim("w", None, 10, leases, limited=True)) == []
    db_execute(app, "UPDATE sqljobs_jobs SET limit_max = 1 WHERE id = ?", params=(ids[2],))
    done = [Outcome(first[0].id, first[0].token, JobState.DONE)]
    _, heirs = backend.finish_and_claim(done, Claim("w", None, 10, leases, limited=True))
    assert heirs == [], "one runs, and the next job allows one at a time"
    assert _running(app) == [("export", 1)]

    db_execute(app, "UPDATE sqljobs_jobs SET limit_max = 2, rate_max = 100, rate_window = 1 "
                    "WHERE id IN (?, ?)", params=(ids[2], ids[3]))  # fmt: skip
    done = [Outcome(first[1].id, first[1].token, JobState.DONE)]
    _, heirs = backend.finish_and_claim(done, Claim("w", None, 10, leases, limited=True))
    heirs += backend.claim_jobs(Claim("w", None, 10, leases, limited=True))
    assert sorted(j.id for j in heirs) == [ids[2], ids[3]]
    starts = db_execute(app, "SELECT count(*) FROM sqljobs_starts")
    assert starts[0][0] == 2, "the rate was counted: both starts are written down"


def test_a_drain_of_short_jobs_keeps_every_key_to_its_limit(app: App) -> None:
    """Short jobs, many per key: the worker hands slots over from job to job (its steady
    state), and no key ever runs more than its limit."""
    overlap = Overlap()

    @app.task(concurrency=1, concurrency_key=lambda tenant, n: tenant)
    def tick(tenant: str, n: int) -> None:
        overlap.run(tenant, 0.0005)

    handles = tick.enqueue_many([(t, i) for i in range(60) for t in "abcd"])
    with stepped_worker(app, concurrency=8) as worker:
        for handle in handles:
            worker.result(handle)
    assert max(overlap.most.values()) == 1
    assert overlap.most_total > 1, "the keys ran side by side"


def _running(app: App) -> list[Any]:
    """Running jobs per limit key."""
    return sorted(db_execute(app, "SELECT limit_key, count(*) FROM sqljobs_jobs "
                                  "WHERE state = 'running' GROUP BY limit_key"))  # fmt: skip


def test_the_pruner_deletes_starts_older_than_any_window(app: App) -> None:
    """A key no claim looks at any more keeps its starts until the pruner takes them."""
    from sqljobs.maintenance import Pruner

    now = app.backend.now()
    for key, at in (("old", now - 7200), ("old", now - 3700), ("fresh", now - 10)):
        db_execute(app, f"INSERT INTO sqljobs_starts (limit_key, started_at) VALUES "
                        f"('{key}', {_when(app, at)})")  # fmt: skip
    Pruner(app.backend, None).run_once()
    assert db_execute(app, "SELECT limit_key FROM sqljobs_starts") == [("fresh",)]


def _when(app: App, at: float) -> str:
    """A Unix time as the starts table stores it on this backend."""
    return f"to_timestamp({at})" if is_pg(app) else repr(at)
