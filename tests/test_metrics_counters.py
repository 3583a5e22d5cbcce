"""Counters and histograms kept in the database (sqljobs.rollup): what workers tally
reaches the rollup tables, app.throughput() and the Prometheus scrape, on both backends."""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

import sqljobs
from sqljobs.backends.base import Claim, WorkerInfo
from sqljobs.dashboard.metrics import render
from sqljobs.maintenance import Pruner, Reaper, Scheduler
from sqljobs.rollup import BUCKET_BOUNDS, INF, MINUTES_KEPT, Meter, MetricAmount, Series
from sqljobs.testing import Clock, stepped_worker

from .conftest import ROOT, expire_lease

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def a_minute_ago_and_30_s() -> float:
    """A frozen time in the past: every tally falls in its minute, and PostgreSQL, whose
    claims read the server's clock, still finds jobs enqueued then due."""
    return (time.time() // 60 - 1) * 60 + 30


def scrape(app: sqljobs.App) -> Samples:
    """The scrape as {(sample name, labels): value}."""
    out: Samples = {}
    for family in text_string_to_metric_families(render(app).decode()):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def sample(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def test_a_workers_attempts_reach_the_scrape_and_the_minute_they_ended_in(url: str) -> None:
    """Done, retried, dead, cancelled and lease-expired attempts, counted exactly by task
    and outcome, with their histograms, once the worker has flushed (at stop here)."""
    clock = Clock(a_minute_ago_and_30_s())
    app = sqljobs.App(url, clock=clock)
    began = threading.Event()

    @app.task(lease=0.9)  # a heartbeat (and flush) every 0.3 s
    def ok(n: int) -> int:
        return n

    @app.task(retry=sqljobs.Retry(max_attempts=2, base=0))
    def flaky() -> None:
        raise RuntimeError("no luck")

    @app.task
    def slow(ctx: sqljobs.JobContext) -> None:
        began.set()
        deadline = time.monotonic() + 5
        while not ctx.cancelled and time.monotonic() < deadline:
            time.sleep(0.01)  # a handler that checks ctx.cancelled as it works

    @app.task(queue="other")
    def ghostly() -> None: ...

    # a job held by a live worker that let its lease lapse: the rescuer counts it
    ghost_id = ghostly.enqueue().id
    app.backend.register_worker(WorkerInfo("ghost", "host", 1, None, 1, 60.0))
    (held,) = app.backend.claim_jobs(Claim("ghost", None, 1, leases={"ghostly": 30.0}))
    assert held.id == ghost_id
    expire_lease(app, ghost_id)
    ok.enqueue_many([(1,), (2,), (3,)])
    flaky_id = flaky.enqueue().id
    slow_id = slow.enqueue().id

    def state(job_id: int) -> sqljobs.JobState | None:
        job = app.get_job(job_id)
        return None if job is None else job.state

    with stepped_worker(app, concurrency=4) as stepper:
        stepper.until(began.is_set, what="the slow handler to begin")
        app.cancel(slow_id)
        stepper.until(lambda: state(flaky_id) is sqljobs.JobState.DEAD, what="flaky dead")
        stepper.until(lambda: state(ghost_id) is sqljobs.JobState.DONE, what="ghostly rerun")
        stepper.until(lambda: app.stats().counts["default"].get("done", 0) == 3, what="ok x3")
    worker = stepper.worker
    assert not worker._completer.metered, "every sample was tallied or dropped with its outcome"
    samples = scrape(app)
    attempts = {
        (dict(labels)["task"], dict(labels)["outcome"]): value
        for (name, labels), value in samples.items()
        if name == "sqljobs_attempts_total" and value  # every known task's are there, at 0
    }
    assert attempts == {
        ("ok", "done"): 3,
        ("flaky", "retried"): 1,
        ("flaky", "dead"): 1,
        ("slow", "cancelled"): 1,
        ("ghostly", "lease_expired"): 1,
        ("ghostly", "done"): 1,
    }
    assert sample(samples, "sqljobs_lease_expiries_total", queue="other", task="ghostly") == 1
    assert sample(samples, "sqljobs_retries_total", queue="default", task="flaky") == 1
    ok_done = {"queue": "default", "task": "ok", "outcome": "done"}
    duration = "sqljobs_attempt_duration_seconds"
    assert sample(samples, f"{duration}_count", **ok_done) == 3
    assert sample(samples, f"{duration}_bucket", **ok_done, le="+Inf") == 3
    buckets = [sample(samples, f"{duration}_bucket", **ok_done, le=str(b)) for b in BUCKET_BOUNDS]
    assert buckets == sorted(buckets), "buckets count up to their bound"
    # the three runs took time, within what their buckets say of each
    total = sample(samples, f"{duration}_sum", **ok_done)
    assert total > 0
    for bound, within in zip(BUCKET_BOUNDS, buckets, strict=True):
        assert total >= (3 - within) * bound, f"{3 - within} ran over {bound} s: sum {total}"
        assert within < 3 or total <= 3 * bound, f"all ran within {bound} s: sum {total}"
    assert sample(samples, f"{duration}_count", queue="other", task="ghostly",
                  outcome="lease_expired") == 1  # fmt: skip
    wait = "sqljobs_enqueue_to_start_seconds_count"
    assert sample(samples, wait, queue="default", task="ok") == 3
    assert sample(samples, wait, queue="default", task="flaky") == 2
    assert sample(samples, wait, queue="other", task="ghostly") == 1  # the rerun; not the ghost's
    # every attempt ended in the frozen clock's minute
    window = app.throughput(minutes=3)
    minute = clock.now() - 30
    assert [m.minute for m in window] == [minute - 120, minute - 60, minute]
    assert [(m.done, m.failed, m.cancelled) for m in window] == [(0, 0, 0), (0, 0, 0), (4, 3, 1)]
    (other,) = app.throughput(minutes=1, queue="other")
    assert (other.done, other.failed, other.cancelled) == (1, 1, 0)


def test_throughput_has_one_entry_per_minute_and_refuses_bad_windows(url: str) -> None:
    clock = Clock(1_800_000_030.0)  # 30 s into a minute
    app = sqljobs.App(url, clock=clock)
    now_minute = 1_800_000_000
    amounts = [
        MetricAmount("default", "a", "done", Series.ATTEMPTS, INF, 3, now_minute),
        MetricAmount("default", "a", "retried", Series.ATTEMPTS, INF, 1, now_minute),
        MetricAmount("mail", "b", "lease_expired", Series.ATTEMPTS, INF, 2, now_minute - 120),
        MetricAmount("mail", "b", "cancelled", Series.ATTEMPTS, INF, 1, now_minute - 120),
        MetricAmount("mail", "b", "done", Series.DURATION, 0.01, 5, now_minute),  # not attempts
        MetricAmount("mail", "b", "done", Series.ATTEMPTS, INF, 9, now_minute - 3600),  # outside
    ]
    app.backend.add_metric_amounts(amounts)
    app.backend.add_metric_amounts(amounts[:1])  # adds up
    window = app.throughput(minutes=3)
    assert [m.minute for m in window] == [now_minute - 120, now_minute - 60, now_minute]
    assert [(m.done, m.failed, m.cancelled) for m in window] == [(0, 2, 1), (0, 0, 0), (6, 1, 0)]
    assert [(m.done, m.failed) for m in app.throughput(3, queue="mail")] == [(0, 2), (0, 0), (0, 0)]
    assert len(app.throughput()) == 60
    totals = {(a.task, a.outcome, a.series, a.le): a.amount for a in app.metric_totals()}
    assert totals[("a", "done", "attempts", INF)] == 6
    assert totals[("b", "done", "attempts", INF)] == 9  # totals are never by minute
    for bad in (0, 1441, 2.5, "60"):
        with pytest.raises(sqljobs.ConfigurationError, match="minutes must be"):
            app.throughput(bad)  # type: ignore[arg-type]
    with pytest.raises(sqljobs.ConfigurationError, match="queue name"):
        app.throughput(queue="no spaces")
    # the pruner drops minutes older than a day; the totals stay
    clock.advance(MINUTES_KEPT + 60)
    Pruner(app.backend, None).run_once()
    assert sum(m.done for m in app.throughput(minutes=1440)) == 0
    assert {a.amount for a in app.metric_totals() if a.series == "attempts"} == {6, 1, 2, 9}


def test_two_workers_flushing_into_the_same_rows_lose_no_increment(url: str) -> None:
    """Each flush is one transaction of additive upserts, so flushes that race on the
    same rows (same minute, task and outcome) all count."""
    app = sqljobs.App(url, clock=Clock(a_minute_ago_and_30_s()))
    at = app.clock()
    rounds = 25
    backends = [app._open_backend(), app._open_backend()]
    start = threading.Barrier(len(backends))
    errors: list[BaseException] = []

    def flusher(backend: sqljobs.backends.Backend) -> None:
        try:
            meter = Meter()
            start.wait(5)
            for _ in range(rounds):
                meter.attempt("default", "t", "done", at, duration=0.02, wait=0.001)
                meter.attempt("default", "t", "retried", at, duration=2.0)
                assert meter.flush(backend) > 0
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=flusher, args=(b,)) for b in backends]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not errors, errors
    expected = rounds * len(backends)
    (minute,) = app.throughput(minutes=1)
    assert (minute.done, minute.failed) == (expected, expected)
    samples = scrape(app)
    done = {"queue": "default", "task": "t", "outcome": "done"}
    assert sample(samples, "sqljobs_attempt_duration_seconds_count", **done) == expected
    assert sample(samples, "sqljobs_attempt_duration_seconds_bucket", **done, le="0.01") == 0
    assert (
        sample(samples, "sqljobs_attempt_duration_seconds_bucket", **done, le="0.025") == expected
    )
    assert sample(samples, "sqljobs_attempt_duration_seconds_sum", **done) == pytest.approx(
        0.02 * expected
    )
    assert sample(samples, "sqljobs_enqueue_to_start_seconds_count", queue="default", task="t") == (
        expected  # the retried attempts gave no wait
    )


def test_a_batch_of_attempts_tallies_as_one_call_per_attempt_would() -> None:
    """``Meter.attempts`` (a written batch of completions, the worker's hot path) counts
    what ``Meter.attempt`` would for each, however queues and tasks alternate."""
    from sqljobs.jobs import ClaimedJob

    def job(queue: str, task: str) -> ClaimedJob:
        return ClaimedJob(1, task, "{}", queue, 0, 1, 1, 30.0, 3, 0.0, None, None)

    batch = [
        (job("a", "t"), 0.003, 0.2), (job("a", "t"), None, None), (job("b", "t"), 0.0, -1.0),
        (job("a", "u"), 700.0, 0.01), (job("a", "t"), 0.05, 0.05),
    ]  # fmt: skip
    one_by_one, batched = Meter(), Meter()
    for sampled, duration, wait in batch:
        one_by_one.attempt(sampled.queue, sampled.task, "done", 125.0, duration, wait)
    batched.attempts(batch, "done", 125.0)
    assert batched.take() == one_by_one.take() != []


def test_schedule_lag_is_how_late_a_tick_enqueued_its_job(url: str) -> None:
    clock = Clock(a_minute_ago_and_30_s())
    app = sqljobs.App(url, clock=clock)

    @app.periodic(every=10)
    def tick() -> None: ...

    meter = Meter()
    scheduler = Scheduler(app, app.backend, clock=clock, meter=meter)
    scheduler.sync()  # first tick at +10 s
    clock.advance(10.5)
    assert scheduler.run_once().enqueued == 1
    assert meter.flush(app.backend) > 0
    samples = scrape(app)
    labels = {"queue": "default", "task": "tick"}
    assert sample(samples, "sqljobs_schedule_lag_seconds_count", **labels) == 1
    assert sample(samples, "sqljobs_schedule_lag_seconds_sum", **labels) == pytest.approx(0.5)
    assert sample(samples, "sqljobs_schedule_lag_seconds_bucket", **labels, le="0.5") == 1
    assert sample(samples, "sqljobs_schedule_lag_seconds_bucket", **labels, le="0.25") == 0


def test_the_grafana_dashboard_queries_only_metrics_a_scrape_has(url: str) -> None:
    app = sqljobs.App(url)

    @app.task
    def t() -> None: ...

    meter = Meter()
    for outcome in ("done", "retried", "lease_expired"):  # one of each the board charts
        meter.attempt("default", "t", outcome, app.clock(), duration=0.1, wait=0.1)
    meter.schedule_lag("default", "t", app.clock(), 0.1)
    meter.flush(app.backend)
    t.enqueue()
    exposed = {name for name, _ in scrape(app)}
    board = json.loads(Path(ROOT, "contrib", "grafana", "sqljobs.json").read_text())
    queried = {
        name
        for panel in board["panels"]
        for target in panel.get("targets", [])
        for name in re.findall(r"\bsqljobs_[a-z_]+", target["expr"])
    }
    assert queried, "the dashboard queries sqljobs metrics"
    assert queried <= exposed, sorted(queried - exposed)
    assert board["title"] and board["uid"]
    assert all(panel.get("title") for panel in board["panels"])


def test_the_rescuer_counts_a_dead_workers_attempt_as_crashed(url: str) -> None:
    app = sqljobs.App(url)

    @app.task
    def t() -> None: ...

    job_id = t.enqueue().id
    (held,) = app.backend.claim_jobs(
        Claim("never-registered", None, 1)
    )  # a worker with no heartbeat
    expire_lease(app, held.id)
    meter = Meter()
    (rescued,) = Reaper(app.backend, meter=meter).run_once()
    assert rescued.job_id == job_id
    assert meter.flush(app.backend) > 0
    samples = scrape(app)
    labels = {"queue": "default", "task": "t"}
    assert sample(samples, "sqljobs_attempts_total", **labels, outcome="crashed") == 1
    assert sample(samples, "sqljobs_lease_expiries_total", **labels) == 0  # a crash is not one
    assert (
        sample(samples, "sqljobs_attempt_duration_seconds_count", **labels, outcome="crashed") == 1
    )
    assert sum(m.failed for m in app.throughput(minutes=2)) == 1


class RefusingOnce:
    """Stands in for a backend whose database refuses the first flush (then the test
    passes the real one)."""

    def __init__(self) -> None:
        self.calls = 0

    def add_metric_amounts(self, amounts: list[MetricAmount]) -> None:
        self.calls += 1
        raise sqljobs.BackendError("database is locked")


def test_a_refused_flush_keeps_its_tallies_for_the_next(
    url: str, caplog: pytest.LogCaptureFixture
) -> None:
    app = sqljobs.App(url)
    meter = Meter()
    meter.attempt("default", "t", "done", app.clock(), duration=0.2, wait=0.1)
    refusing = RefusingOnce()
    with caplog.at_level(logging.WARNING, logger="sqljobs.rollup"):  # whatever set before
        assert meter.flush(refusing) == 0  # type: ignore[arg-type]
    assert refusing.calls == 1 and meter.pending
    assert "kept for the next flush" in caplog.text
    meter.attempt("default", "t", "done", app.clock(), duration=0.2)
    assert meter.flush(app.backend) > 0 and not meter.pending
    totals = {(a.series, a.le): a.amount for a in app.metric_totals()}
    assert totals[("attempts", INF)] == 2
    assert totals[("duration", 0.25)] == 2
    assert totals[("duration_sum", INF)] == pytest.approx(0.4)
    assert totals[("wait", 0.1)] == 1


def test_a_worker_counts_the_lag_of_every_tick_it_fires(url: str) -> None:
    app = sqljobs.App(url)

    @app.periodic(every=0.2)
    def tick() -> None: ...

    with stepped_worker(app) as worker:
        worker.until(lambda: app.stats().counts.get("default", {}).get("done", 0) >= 2)
    fired = len(app.list_jobs(queue="default"))
    samples = scrape(app)
    labels = {"queue": "default", "task": "tick"}
    assert sample(samples, "sqljobs_schedule_lag_seconds_count", **labels) == fired
    assert sample(samples, "sqljobs_attempts_total", **labels, outcome="done") >= 2


def test_every_family_has_its_series_from_the_first_scrape(url: str) -> None:
    """Before any worker has flushed (a fresh database), each known task's counters and
    histograms are there at zero, as are its queue's gauges: a dashboard's rate or quantile
    is 0 or empty, not "no data". An app that registers no task (``sqljobs metrics
    --url``) learns them from the catalogue and the schedules a worker writes."""
    app = sqljobs.App(url)

    @app.task(queue="mail")
    def send() -> None: ...

    @app.periodic(every=3600)
    def tick() -> None: ...

    def has(samples: Samples, name: str, **labels: str) -> bool:
        return samples.get((name, frozenset(labels.items()))) == 0.0

    mail = {"queue": "mail", "task": "send"}
    first = scrape(app)
    for outcome in ("done", "retried", "dead", "cancelled", "lease_expired", "crashed"):
        assert has(first, "sqljobs_attempts_total", **mail, outcome=outcome)
    assert has(first, "sqljobs_retries_total", **mail)
    assert has(first, "sqljobs_lease_expiries_total", **mail)
    for le in ("0.005", "+Inf"):
        assert has(first, "sqljobs_enqueue_to_start_seconds_bucket", **mail, le=le)
        assert has(first, "sqljobs_attempt_duration_seconds_bucket", **mail, outcome="done", le=le)
    assert has(first, "sqljobs_enqueue_to_start_seconds_count", **mail)
    assert has(first, "sqljobs_schedule_lag_seconds_count", queue="default", task="tick")
    assert has(first, "sqljobs_jobs", queue="mail", state="pending")
    assert has(first, "sqljobs_oldest_pending_age_seconds", queue="mail")
    assert has(first, "sqljobs_jobs_count_capped", queue="mail", state="done")
    bare = sqljobs.App(url)

    def learnt(samples: Samples) -> bool:
        return (
            has(samples, "sqljobs_attempts_total", **mail, outcome="done")
            and has(samples, "sqljobs_enqueue_to_start_seconds_count", **mail)
            and has(samples, "sqljobs_schedule_lag_seconds_count", queue="default", task="tick")
        )

    assert not learnt(scrape(bare))
    with stepped_worker(app) as worker:  # it writes its catalogue and schedules as it starts
        worker.until(lambda: learnt(scrape(bare)))
    bare.close()
    app.close()
