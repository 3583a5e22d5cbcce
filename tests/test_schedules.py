"""Periodic schedules (issue 5, experiment E5): one run per tick however many replicas run
the scheduler, overlap and misfire policies, DST, per-tenant schedules, definitions that
fail early, and the CLI. Scheduler logic runs under a frozen clock through ``run_once``;
the replica tests use real worker processes and real SIGKILL."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
from collections import Counter
from datetime import UTC, datetime, timedelta
from itertools import pairwise
from pathlib import Path

import pytest

import sqljobs
from sqljobs import App, ConfigurationError, JobState, PayloadError, ScheduleNotFound
from sqljobs.maintenance import Scheduler
from sqljobs.schedules import ScheduleState, tick_key
from sqljobs.testing import Clock, stepped_worker
from sqljobs.worker import EventLog

from .conftest import ROOT, Runs, Spawn, db_execute, is_pg, wait_until

SCHEDULES_APP = "tests.apps.schedules_app:app"


def utc(year: int, month: int, day: int, hour: int = 0, minute: int = 0) -> datetime:
    return datetime(year, month, day, hour, minute, tzinfo=UTC)


def frozen_app(url: str, start: float | datetime) -> tuple[App, Clock]:
    clock = Clock(start)
    return App(url, clock=clock), clock


def state(app: App, name: str) -> ScheduleState:
    found = app.get_schedule(name)
    assert found is not None, f"schedule {name} exists"
    return found


def keys_of(app: App, prefix: str) -> list[str]:
    """Keys of the jobs a schedule enqueued, oldest first."""
    jobs = app.list_jobs(limit=10_000)
    return sorted((j.key for j in jobs if j.key and j.key.startswith(prefix)), reverse=False)


# -- definitions fail early ---------------------------------------------------------------


def test_periodic_forms_register_a_task_and_a_schedule(tmp_path: Path) -> None:
    app = App(f"sqlite:///{tmp_path / 'jobs.db'}")

    @app.periodic("0 3 * * *", tz="UTC", overlap="skip")
    def nightly_cleanup() -> None: ...

    @app.periodic(cron="*/5 * * * *", tz="Europe/Berlin", misfire="skip", queue="cron")
    def five_minutes() -> None: ...

    @app.periodic(every=timedelta(milliseconds=200), kwargs={"n": 3}, priority=7, lease=5)
    def refresh_cache(n: int) -> None: ...

    @app.periodic(cron="@daily")
    def daily() -> None: ...

    assert isinstance(nightly_cleanup, sqljobs.Task) and "nightly_cleanup" in app.tasks
    defined = app.periodic_schedules
    assert defined["nightly_cleanup"].cron == "0 3 * * *"
    assert defined["nightly_cleanup"].overlap == "skip"
    assert defined["five_minutes"].tz == "Europe/Berlin"
    assert defined["five_minutes"].queue == "cron" and app.tasks["five_minutes"].queue == "cron"
    assert defined["refresh_cache"].every == pytest.approx(0.2)
    assert defined["refresh_cache"].kwargs == {"n": 3} and defined["refresh_cache"].priority == 7
    assert app.tasks["refresh_cache"].lease == 5
    assert defined["daily"].cron == "0 0 * * *"
    assert refresh_cache.enqueue(1).created, "a periodic task is an ordinary task too"


@pytest.mark.parametrize(
    ("args", "options", "message"),
    [
        (("61 * * * *",), {}, "'61 * * * *'"),
        (("0 3 * *",), {}, "'0 3 * *'"),
        ((), {"cron": "every day"}, "'every day'"),
        (("0 3 * * *",), {"tz": "Mars/Olympus"}, "'Mars/Olympus'"),
        ((), {}, "give either cron="),
        (("0 3 * * *",), {"every": 5}, "give either cron="),
        (("0 3 * * *",), {"cron": "0 4 * * *"}, "once"),
        ((), {"every": 0}, "every must be > 0"),
        ((), {"every": -1}, "every"),
        ((), {"every": "5s"}, "every must be seconds"),
        ((), {"every": 1, "overlap": "never"}, "overlap must be 'allow' or 'skip'"),
        ((), {"every": 1, "misfire": "later"}, "misfire must be 'catch_up_once'"),
    ],
)
def test_a_bad_periodic_definition_fails_where_it_is_written(
    tmp_path: Path, args: tuple[str, ...], options: dict[str, object], message: str
) -> None:
    app = App(f"sqlite:///{tmp_path / 'jobs.db'}")
    with pytest.raises(ConfigurationError, match=r"@app\.periodic") as info:
        app.periodic(*args, **options)  # type: ignore[arg-type]
    assert message in str(info.value)
    assert not app.tasks and not app.periodic_schedules


def test_periodic_kwargs_must_fit_the_function(tmp_path: Path) -> None:
    app = App(f"sqlite:///{tmp_path / 'jobs.db'}")
    with pytest.raises(ConfigurationError, match="do not fit task report"):

        @app.periodic(every=1, kwargs={"tenant": "acme"})
        def report(day: str) -> None: ...

    assert "report" not in app.tasks, "a failed definition registers nothing"
    with pytest.raises(PayloadError, match="argument 'when'"):

        @app.periodic(every=1, kwargs={"when": datetime.now()})
        def later(when: object) -> None: ...


def test_a_bad_dynamic_schedule_fails_before_anything_is_stored(app: App) -> None:
    @app.task
    def send_report(tenant: str) -> None: ...

    with pytest.raises(ConfigurationError, match="'0 3 \\* \\* \\* \\*  x'"):
        app.schedule(
            "r:acme", cron="0 3 * * * *  x", task="send_report", kwargs={"tenant": "a"}, known=False
        )
    with pytest.raises(ConfigurationError, match="do not fit"):
        app.schedule(
            "r:acme", cron="0 3 * * *", task="send_report", kwargs={"tenantt": "a"}, known=False
        )
    with pytest.raises(ConfigurationError, match="unknown time zone 'Nowhere/Land'"):
        app.schedule(
            "r:acme", every=60, task="send_report", kwargs={}, tz="Nowhere/Land", known=False
        )
    with pytest.raises(PayloadError, match="argument 'tenant'"):
        app.schedule(
            "r:acme", every=60, task="send_report", kwargs={"tenant": object()}, known=False
        )
    with pytest.raises(ConfigurationError, match="task must be a task name"):
        app.schedule("r:acme", every=60, task="", known=False)

    @app.periodic(every=60)
    def in_code() -> None: ...

    with pytest.raises(ConfigurationError, match="defined in code"):
        app.schedule("in_code", every=5, task="in_code", known=False)
    assert [s.name for s in app.list_schedules()] == ["in_code"]


# -- the tick claim ------------------------------------------------------------------------


def test_replicas_racing_for_one_tick_enqueue_one_job(url: str) -> None:
    """Eight schedulers with their own connections fire the same due tick at once."""
    app, clock = frozen_app(url, utc(2026, 5, 1, 12))
    app.schedule("race", every=10, task="t", known=False)
    clock.set(state(app, "race").next_run_at)
    backends = [app._open_backend() for _ in range(8)]
    schedulers = [Scheduler(app, b) for b in backends]
    due = state(app, "race")
    start = threading.Barrier(len(schedulers))
    claimed: list[bool] = []

    def fire(scheduler: Scheduler) -> None:
        tick = scheduler.plan(due, clock.now())
        start.wait()
        claimed.append(scheduler.backend.fire_schedule(tick).claimed)

    threads = [threading.Thread(target=fire, args=(s,)) for s in schedulers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert sorted(claimed) == [False] * 7 + [True]
    assert keys_of(app, "schedule:race:") == [tick_key("race", due.next_run_at)]
    assert state(app, "race").next_run_at == due.next_run_at + 10
    for b in backends:
        b.close()


def test_the_next_tick_is_computed_from_the_tick_not_from_now(url: str) -> None:
    app, clock = frozen_app(url, 1_800_000_000.0)
    app.schedule("steady", every=10, task="t", known=False)
    first = state(app, "steady").next_run_at
    scheduler = Scheduler(app, app.backend)
    clock.set(first + 0.7)  # a late pass, within the misfire grace
    scheduler.run_once()
    assert state(app, "steady").next_run_at == first + 10
    clock.set(first + 10.9)
    scheduler.run_once()
    clock.set(first + 20.0)
    scheduler.run_once()
    assert set(keys_of(app, "schedule:steady:")) == {
        tick_key("steady", first + 10 * i) for i in range(3)
    }
    assert state(app, "steady").last_outcome == "enqueued"


def test_a_short_backlog_fires_each_missed_tick_as_itself(url: str) -> None:
    """A pass late by less than the grace fires every tick it finds due, one job each."""
    app, clock = frozen_app(url, 1_800_000_000.0)
    app.schedule("quick", every=0.2, task="t", known=False)
    first = state(app, "quick").next_run_at
    clock.set(first + 0.9)
    fired = Scheduler(app, app.backend).run_once()
    assert [r.outcome for r in fired.fired] == ["enqueued"] * 5
    assert len(keys_of(app, "schedule:quick:")) == 5
    assert state(app, "quick").next_run_at == pytest.approx(first + 1.0)
    assert fired.next_run_at == pytest.approx(first + 1.0)


# -- overlap and misfire -------------------------------------------------------------------


def test_overlap_skip_enqueues_nothing_while_a_run_is_pending_or_running(url: str) -> None:
    app, clock = frozen_app(url, 1_800_000_000.0)
    app.schedule("exclusive", every=1, task="t", overlap="skip", known=False)
    app.schedule("relaxed", every=1, task="t", known=False)
    scheduler = Scheduler(app, app.backend)
    clock.advance(1)
    scheduler.run_once()
    (first,) = keys_of(app, "schedule:exclusive:")
    first_id = state(app, "exclusive").last_job_id
    clock.advance(1)
    scheduler.run_once()  # the first run is still pending
    assert keys_of(app, "schedule:exclusive:") == [first]
    assert state(app, "exclusive").last_outcome == "skipped_overlap"
    db_execute(app, "UPDATE sqljobs_jobs SET state = 'running' WHERE id = ?", params=(first_id,))
    clock.advance(1)
    scheduler.run_once()  # now it runs
    assert keys_of(app, "schedule:exclusive:") == [first]
    handle = app.run_schedule_now("exclusive")
    assert (handle.id, handle.created) == (first_id, False), "run-now obeys overlap too"
    db_execute(app, "UPDATE sqljobs_jobs SET state = 'done' WHERE id = ?", params=(first_id,))
    clock.advance(1)
    scheduler.run_once()
    assert len(keys_of(app, "schedule:exclusive:")) == 2
    assert state(app, "exclusive").last_outcome == "enqueued"
    assert len(keys_of(app, "schedule:relaxed:")) == 4, "another schedule is never held up"


def test_overlap_skip_waits_for_a_cancelled_run_whose_handler_runs_on(url: str) -> None:
    """A run cancelled while running keeps its lease while its handler runs on (its worker
    renews it): the schedule counts it as running until the worker says it ended."""
    app, clock = frozen_app(url, 1_800_000_000.0)
    app.schedule("exclusive", every=1, task="t", overlap="skip", known=False)
    scheduler = Scheduler(app, app.backend)
    clock.advance(1)
    scheduler.run_once()
    first_id = state(app, "exclusive").last_job_id
    held = (
        "UPDATE sqljobs_jobs SET state = 'cancelled', lease_until = ? WHERE id = ?",
        "UPDATE sqljobs_jobs SET state = 'cancelled', lease_until = to_timestamp(%s) WHERE id = %s",
    )
    until = clock() + 3600.0  # the App's clock reads leases on both engines
    db_execute(app, *held, params=(until, first_id))
    clock.advance(1)
    scheduler.run_once()
    assert state(app, "exclusive").last_outcome == "skipped_overlap"
    handle = app.run_schedule_now("exclusive")
    assert (handle.id, handle.created) == (first_id, False), "run-now obeys it too"
    db_execute(app, "UPDATE sqljobs_jobs SET lease_until = NULL WHERE id = ?", params=(first_id,))
    clock.advance(1)
    scheduler.run_once()
    assert state(app, "exclusive").last_outcome == "enqueued"
    assert len(keys_of(app, "schedule:exclusive:")) == 2


@pytest.mark.parametrize("misfire", ["catch_up_once", "skip"])
def test_misfire_policy_after_ten_seconds_of_downtime(url: str, misfire: str) -> None:
    app, clock = frozen_app(url, 1_800_000_000.0)
    app.schedule("beat", every=1, task="t", misfire=misfire, known=False)
    first = state(app, "beat").next_run_at
    scheduler = Scheduler(app, app.backend)
    clock.set(first)
    scheduler.run_once()
    clock.set(first + 10.5)  # no scheduler ran for ten seconds: ticks first+1 .. first+10
    passed = scheduler.run_once()
    after = state(app, "beat")
    assert after.next_run_at == first + 11, "resumes at the next future tick, on the grid"
    if misfire == "catch_up_once":
        assert [r.outcome for r in passed.fired] == ["caught_up"]
        assert after.last_outcome == "caught_up"
        assert tick_key("beat", first + 1) in keys_of(app, "schedule:beat:")
        assert len(keys_of(app, "schedule:beat:")) == 2, "one run for all missed ticks"
    else:
        assert [r.outcome for r in passed.fired] == ["skipped_misfire"]
        assert after.last_outcome == "skipped_misfire"
        assert len(keys_of(app, "schedule:beat:")) == 1, "no run for missed ticks"
    clock.set(first + 11)
    scheduler.run_once()
    assert tick_key("beat", first + 11) in keys_of(app, "schedule:beat:")


# -- cron and daylight saving time ---------------------------------------------------------


def fire_through(app: App, clock: Clock, name: str, until: datetime) -> list[str]:
    """Jump the frozen clock from tick to tick up to ``until``, firing each; return the
    tick times (UTC ISO) of the jobs enqueued on the way."""
    scheduler = Scheduler(app, app.backend)
    while (due := state(app, name).next_run_at) <= until.timestamp():
        clock.set(due)
        scheduler.run_once()
    prefix = f"schedule:{name}:"
    return [k.removeprefix(prefix) for k in keys_of(app, prefix)]


def test_a_fixed_local_time_across_both_dst_changes(url: str) -> None:
    """02:30 in Berlin does not exist on 2026-03-29 (runs at 03:00 CEST) and happens twice
    on 2026-10-25 (runs once)."""
    app, clock = frozen_app(url, utc(2026, 3, 27, 12))
    app.schedule("berlin", cron="30 2 * * *", tz="Europe/Berlin", task="t", known=False)
    assert fire_through(app, clock, "berlin", utc(2026, 3, 30, 12)) == [
        "2026-03-28T01:30:00+00:00",  # 02:30 CET
        "2026-03-29T01:00:00+00:00",  # the gap: 03:00 CEST
        "2026-03-30T00:30:00+00:00",  # 02:30 CEST
    ]
    clock.set(utc(2026, 10, 23, 12))
    app.schedule(
        "berlin", cron="30 2 * * *", tz="Europe/Berlin", task="t", kwargs={"x": 1}, known=False
    )
    assert state(app, "berlin").next_run_at == utc(2026, 3, 31, 0, 30).timestamp(), (
        "an update that keeps the timing keeps the schedule's place"
    )
    app.unschedule("berlin")
    app.schedule("berlin", cron="30 2 * * *", tz="Europe/Berlin", task="t", known=False)
    autumn = fire_through(app, clock, "berlin", utc(2026, 10, 26, 12))
    assert autumn[-3:] == [
        "2026-10-24T00:30:00+00:00",  # 02:30 CEST
        "2026-10-25T00:30:00+00:00",  # the first 02:30 only
        "2026-10-26T01:30:00+00:00",  # 02:30 CET
    ]


def test_an_hourly_schedule_runs_once_per_real_hour_across_dst(url: str) -> None:
    app, clock = frozen_app(url, utc(2026, 10, 24, 22, 30))
    app.schedule("autumn", cron="0 * * * *", tz="Europe/Berlin", task="t", known=False)
    ticks = fire_through(app, clock, "autumn", utc(2026, 10, 25, 4, 30))
    times = [datetime.fromisoformat(t).timestamp() for t in ticks]
    assert len(times) == 6  # local 01:00, 02:00 CEST, 02:00 CET, 03:00, 04:00, 05:00
    assert {b - a for a, b in pairwise(times)} == {3600.0}
    clock.set(utc(2026, 3, 28, 23, 30))
    app.schedule("spring", cron="0 * * * *", tz="Europe/Berlin", task="t", known=False)
    ticks = fire_through(app, clock, "spring", utc(2026, 3, 29, 3, 30))
    times = [datetime.fromisoformat(t).timestamp() for t in ticks]
    assert len(times) == 4  # local 01:00 CET, then 03:00, 04:00, 05:00 CEST
    assert {b - a for a, b in pairwise(times)} == {3600.0}


# -- dynamic, per-entity schedules ---------------------------------------------------------


def test_a_hundred_tenant_schedules_advance_independently(url: str) -> None:
    """Per-tenant daily reports in five time zones over three days, one of them paused,
    one held by overlap=skip and one broken: the others never notice."""
    zones = ["UTC", "Europe/Berlin", "America/New_York", "Asia/Tokyo", "Australia/Sydney"]
    created = utc(2026, 6, 1, 12, 30)
    app, clock = frozen_app(url, created)

    @app.task
    def send_report(tenant: str) -> None: ...

    tenants = {f"tenant-{i:03d}": zones[i % len(zones)] for i in range(100)}
    for tenant, tz in tenants.items():
        app.schedule(
            f"daily-report:{tenant}",
            cron="0 3 * * *",
            tz=tz,
            task="send_report",
            kwargs={"tenant": tenant},
            overlap="skip" if tenant == "tenant-013" else "allow",
            known=False,
        )
    assert app.pause_schedule("daily-report:tenant-007")
    broken = ("daily-report:tenant-042",)
    db_execute(
        app, "UPDATE sqljobs_schedules SET tz = 'Mars/Olympus' WHERE name = ?", params=broken
    )
    scheduler = Scheduler(app, app.backend, batch=30)
    end = created + timedelta(days=3)
    for hour in range(1, 3 * 24 + 1):  # a pass on every hour: each tick fires on time
        clock.set(created + timedelta(minutes=30, hours=hour - 1))
        scheduler.run_once()

    def local_three_am(tz: str) -> list[float]:  # the oracle: zoneinfo, not cronsim
        where = sqljobs.cron.zone(tz)
        return [datetime(2026, 6, day, 3, tzinfo=where).timestamp() for day in range(1, 7)]

    per_tenant = Counter(j.kwargs["tenant"] for j in app.list_jobs(limit=1000))
    assert per_tenant["tenant-007"] == 0, "paused"
    assert per_tenant["tenant-013"] == 1, "overlap=skip: its first report is still pending"
    assert state(app, "daily-report:tenant-013").last_outcome == "skipped_overlap"
    assert per_tenant["tenant-042"] == 0
    assert (state(app, "daily-report:tenant-042").last_outcome or "").startswith(
        "failed: unknown time zone 'Mars/Olympus'"
    )
    for tenant, tz in tenants.items():
        if tenant in ("tenant-007", "tenant-013", "tenant-042"):
            continue
        ticks = local_three_am(tz)
        fired = [t for t in ticks if created.timestamp() < t <= clock.now()]
        assert per_tenant[tenant] == len(fired) >= 2, tenant
        upcoming = min(t for t in ticks if t > clock.now())
        assert state(app, f"daily-report:{tenant}").next_run_at == upcoming, tenant
    assert clock.now() <= end.timestamp()


def test_schedule_upsert_pause_resume_run_now_and_unschedule(url: str) -> None:
    app, clock = frozen_app(url, 1_800_000_000.0)

    @app.task
    def send_report(tenant: str) -> None: ...

    made = app.schedule("r:acme", every=60, task=send_report, kwargs={"tenant": "acme"})
    assert made.next_run_at == clock.now() + 60 and not made.paused
    assert made.schedule.queue == "default" and made.schedule.source == "dynamic"
    clock.advance(5)
    again = app.schedule(
        "r:acme", every=60, task="send_report", kwargs={"tenant": "ACME"}, known=False
    )
    assert again.next_run_at == made.next_run_at and again.schedule.kwargs == {"tenant": "ACME"}
    retimed = app.schedule(
        "r:acme", every=30, task="send_report", kwargs={"tenant": "ACME"}, known=False
    )
    assert retimed.next_run_at == clock.now() + 30

    assert app.pause_schedule("r:acme") and state(app, "r:acme").paused
    app.schedule("r:acme", every=30, task="send_report", kwargs={"tenant": "acme"}, known=False)
    assert state(app, "r:acme").paused, "an update does not unpause"
    clock.advance(3600)
    assert Scheduler(app, app.backend).run_once().fired == [], "a paused schedule does not fire"
    assert app.resume_schedule("r:acme")
    assert state(app, "r:acme").next_run_at == clock.now() + 30, "resumes afresh, no catch-up"

    handle = app.run_schedule_now("r:acme")
    job = app.get_job(handle.id)
    assert job is not None and handle.created
    assert job.task == "send_report" and job.kwargs == {"tenant": "acme"}
    assert (job.key or "").startswith("schedule:r:acme:now:")
    assert state(app, "r:acme").last_job_id == handle.id
    assert state(app, "r:acme").last_outcome == "run_now"

    assert [s.name for s in app.list_schedules()] == ["r:acme"]
    assert app.unschedule("r:acme") and not app.unschedule("r:acme")
    assert not app.pause_schedule("r:acme") and not app.resume_schedule("r:acme")
    with pytest.raises(ScheduleNotFound, match="no schedule named 'r:acme'"):
        app.run_schedule_now("r:acme")


def test_code_definitions_are_synced_on_first_use_and_keep_their_place(url: str) -> None:
    app, clock = frozen_app(url, 1_800_000_000.0)

    @app.periodic(every=30, kwargs={"n": 1})
    def beat(n: int) -> None: ...

    (listed,) = app.list_schedules()
    assert listed.name == "beat" and listed.schedule.source == "code"
    assert listed.next_run_at == clock.now() + 30
    app.pause_schedule("beat")
    clock.advance(10)
    other, _ = frozen_app(url, clock.now())  # another process starting with the same code

    @other.periodic(every=30, kwargs={"n": 1}, name="beat")
    def beat_elsewhere(n: int) -> None: ...

    other.sync_schedules()
    assert state(app, "beat").next_run_at == listed.next_run_at, "kept its place"
    assert state(app, "beat").paused, "and its paused flag"


# -- worker processes ----------------------------------------------------------------------


def read_runs(path: Path) -> list[tuple[str, int, float, float]]:
    out = []
    for line in path.read_text().splitlines():
        if line.startswith("run "):
            _, key, pid, start, end = line.split()
            out.append((key, int(pid), float(start), float(end)))
    return out


def tick_time(key: str) -> float:
    """The tick a job key names (``schedule:<name>:<ISO time>``; names may hold colons)."""
    match = re.search(r"\d{4}-\d\d-\d\dT[\d:.]+\+00:00$", key)
    assert match, key
    return datetime.fromisoformat(match[0]).timestamp()


@pytest.mark.slow
def test_three_replicas_give_one_run_per_tick(
    app: App, spawn: Spawn, runs: Runs, monkeypatch: pytest.MonkeyPatch
) -> None:
    """E5: 3 worker processes, every=0.2 s, 5 s: 25 runs (75 would be a ticker per replica)."""
    monkeypatch.setenv("SQLJOBS_TEST_PERIODIC", "e5")
    replicas = [spawn("--concurrency", "4", app=SCHEDULES_APP) for _ in range(3)]
    wait_until(lambda: app.stats().workers == 3, timeout=20, what="three live replicas")
    window_start = app.clock()
    window_end = window_start + 5.0
    wait_until(
        lambda: any(s >= window_end + 0.5 for _, _, s, _ in read_runs(runs.path)),
        timeout=20,
        what="runs past the five-second window",
    )
    for proc in replicas:
        proc.send_signal(signal.SIGTERM)
    for proc in replicas:
        assert proc.wait(timeout=20) == 0
    in_window = [r for r in read_runs(runs.path) if window_start <= r[2] < window_end]
    keys = [key for key, _, _, _ in in_window]
    per_replica = Counter(pid for _, pid, _, _ in in_window)
    backend = "postgres" if is_pg(app) else "sqlite"
    print(f"E5 {backend}: {len(in_window)} runs in 5 s, per replica {sorted(per_replica.values())}")
    assert 23 <= len(in_window) <= 27, f"{len(in_window)} runs in 5 s"
    assert len(set(keys)) == len(keys), "no tick ran twice"
    ticks = sorted(tick_time(k) for k in keys)
    gaps = [b - a for a, b in pairwise(ticks)]
    assert all(g == pytest.approx(0.2, abs=1e-3) for g in gaps), f"a tick was lost: {gaps}"


@pytest.mark.slow
def test_overlap_skip_across_replicas_never_overlaps_runs(
    app: App, spawn: Spawn, runs: Runs
) -> None:
    """3 replicas, every=0.2 s, a 0.3 s job, overlap="skip": runs follow one another."""
    app.schedule(
        "exclusive", every=0.2, task="tick", kwargs={"seconds": 0.3}, overlap="skip", known=False
    )
    for _ in range(3):
        spawn("--concurrency", "4", app=SCHEDULES_APP)
    wait_until(lambda: len(read_runs(runs.path)) >= 8, timeout=30, what="eight runs")
    app.pause_schedule("exclusive")
    done = read_runs(runs.path)
    spans = sorted((start, end) for _, _, start, end in done)
    for (_, end), (start, _) in pairwise(spans):
        assert start >= end, f"a run started at {start} while another ran until {end}"
    ticks_elapsed = (spans[-1][0] - spans[0][0]) / 0.2
    assert len(spans) < ticks_elapsed, "ticks that came while a run was busy were skipped"
    assert len({key for key, _, _, _ in done}) == len(done)


def test_a_replica_killed_inside_its_tick_loses_no_tick(
    app: App, spawn: Spawn, runs: Runs, monkeypatch: pytest.MonkeyPatch
) -> None:
    app.schedule("kill", every=0.3, task="tick", known=False)
    monkeypatch.setenv("SQLJOBS_TEST_TICK_LAG", "0.05")  # the survivor comes second to a tick
    survivor = spawn("--concurrency", "2", app=SCHEDULES_APP)
    wait_until(lambda: len(read_runs(runs.path)) >= 2, timeout=20, what="the survivor ticking")
    monkeypatch.delenv("SQLJOBS_TEST_TICK_LAG")
    monkeypatch.setenv("SQLJOBS_TEST_DIE_IN_TICK", "1")
    victim = spawn("--concurrency", "2", app=SCHEDULES_APP)
    assert victim.wait(timeout=20) == -signal.SIGKILL
    (dying,) = [ln.split()[1] for ln in runs.path.read_text().splitlines() if ln[:5] == "dying"]
    wait_until(
        lambda: len([k for k, *_ in read_runs(runs.path) if tick_time(k) > tick_time(dying)]) >= 2,
        timeout=20,
        what="two more ticks after the kill",
    )
    app.pause_schedule("kill")
    keys = [key for key, _, _, _ in read_runs(runs.path)]
    assert keys.count(dying) == 1, "the tick the victim died in ran once, in the survivor"
    assert len(set(keys)) == len(keys)
    ticks = sorted(tick_time(k) for k in keys)
    gaps = [b - a for a, b in pairwise(ticks)]
    assert all(g == pytest.approx(0.3, abs=1e-3) for g in gaps), f"a tick was lost: {gaps}"
    assert survivor.poll() is None


def test_a_worker_thread_syncs_and_runs_periodic_tasks(app: App) -> None:
    ran: list[str | None] = []

    @app.periodic(every=0.05)
    def beat(ctx: sqljobs.JobContext) -> None:
        ran.append(ctx.key)

    with stepped_worker(app, concurrency=2) as worker:
        worker.until(lambda: len(ran) >= 3, what="three periodic runs")
    assert all((k or "").startswith("schedule:beat:") for k in ran)
    assert state(app, "beat").last_outcome == "enqueued"
    assert all(j.state is JobState.DONE for j in app.list_jobs() if j.key in ran)


def test_a_schedule_added_while_a_worker_idles_is_noticed_without_polling(app: App) -> None:
    """The worker looks at the schedule table again when another connection commits (on
    PostgreSQL, a new schedule sends a NOTIFY), not only every poll interval."""
    ran: list[str] = []

    @app.task
    def note(label: str) -> None:
        ran.append(label)

    events = EventLog()
    worker = sqljobs.Worker(app, poll_interval=60.0, install_signal_handlers=False, on_event=events)
    with worker:
        assert worker.run_once().claimed == 0  # the start-up pass: no schedule, nothing due
        app.schedule("late-comer", every=0.1, task="note", kwargs={"label": "x"}, known=False)
        # stepped, the worker sleeps until woken: the 60 s poll never comes within 5 s
        worker.run_until(lambda: len(events.of("finished", state="done")) >= 2, timeout=5)
    assert ran[:2] == ["x", "x"]


# -- command line ------------------------------------------------------------------------


def cli(url: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sqljobs", "--url", url, "schedules", *args],
        env={**os.environ, "COLUMNS": "200"},  # so the table is not folded
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=check,
        timeout=60,
    )


@pytest.mark.processes
@pytest.mark.slow
def test_schedules_command_lists_pauses_resumes_and_runs_now(url: str) -> None:
    app = App(url)
    app.schedule("daily-report:acme", cron="0 3 * * *", tz="Europe/Berlin", task="send_report",
                 kwargs={"tenant": "acme"}, known=False)  # fmt: skip
    app.schedule("refresh", every=0.2, task="refresh_cache", overlap="skip", known=False)
    table = cli(url).stdout
    for text in ("daily-report:acme", "0 3 * * *", "Europe/Berlin", "every 0.2 s", "next run"):
        assert text in table
    listed = {s["name"]: s for s in json.loads(cli(url, "--json").stdout)}
    assert listed["refresh"]["overlap"] == "skip" and listed["refresh"]["paused"] is False

    assert "paused" in cli(url, "pause", "refresh").stdout
    assert json.loads(cli(url, "--json").stdout)[1]["paused"] is True
    assert "resumed" in cli(url, "resume", "refresh").stdout
    made = json.loads(cli(url, "run-now", "daily-report:acme").stdout)
    job = app.get_job(made["id"])
    assert made["created"] and job is not None and job.kwargs == {"tenant": "acme"}
    assert "run_now" in cli(url).stdout

    for command in ("pause", "resume", "run-now"):
        bad = cli(url, command, "nope", check=False)
        assert bad.returncode != 0 and "no schedule named 'nope'" in bad.stderr
