"""Concurrency limits across worker processes, on both backends: the running set sampled
from the database never holds more than the limit of one key, and a SIGKILLed worker's
slot comes back after its lease."""

from __future__ import annotations

import collections
import signal
import threading
import time

from sqljobs import App, JobState
from sqljobs.backends.base import Claim

from .conftest import Runs, Spawn, db_execute, wait_until


def _running_by_key(app: App) -> collections.Counter[str]:
    rows = db_execute(
        app,
        "SELECT limit_key, count(*) FROM sqljobs_jobs "
        "WHERE state = 'running' AND limit_key IS NOT NULL GROUP BY limit_key",
    )
    return collections.Counter({key: n for key, n in rows})


def test_three_processes_never_run_more_than_the_limit_of_a_key(
    app: App, spawn: Spawn, runs: Runs
) -> None:
    total, tenants = 600, [f"t{i}" for i in range(10)]
    samples: list[collections.Counter[str]] = []
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            samples.append(_running_by_key(app))
            stop.wait(0.003)

    sampler = threading.Thread(target=sample, daemon=True)
    procs = [spawn("--concurrency", "4", lease=5.0) for _ in range(3)]
    # this process lacks the task: the catalogue its workers write carries the limit, and
    # its key function lives in their code, so the key comes with the enqueue
    wait_until(lambda: app.backend.task_info("sync_tenant"), timeout=20, what="registration")
    for i in range(total):
        tenant = tenants[i % 10]
        args = [tenant, f"j{i}", 0.005]
        app.enqueue("sync_tenant", args=args, concurrency_key=tenant)
        if i == 0:
            sampler.start()
    try:
        wait_until(lambda: app.stats().total("done") == total, timeout=90, what="the drain")
    finally:
        stop.set()
        sampler.join(timeout=5)
    busiest = max((max(s.values(), default=0) for s in samples), default=0)
    print(f"{len(samples)} samples of the running set; most of one key at once: {busiest}")
    assert len(samples) > 20
    assert busiest <= 2, "a key ran more jobs at once than its limit"
    assert any(sum(s.values()) > 2 for s in samples), "keys ran side by side"
    assert max(runs.count("end").values()) == 1
    pids = {pid for _, pid, _ in runs.lines()}
    assert len(pids) >= 2, "the work was shared between processes"
    for proc in procs:
        proc.send_signal(signal.SIGTERM)
    for proc in procs:
        assert proc.wait(timeout=15) == 0


def test_a_killed_workers_slot_comes_back_after_its_lease(
    app: App, spawn: Spawn, runs: Runs
) -> None:
    victim = spawn("--concurrency", "4", lease=2.0)
    wait_until(lambda: app.backend.task_info("sync_tenant"), timeout=20, what="registration")
    held = app.enqueue("sync_tenant", args=["acme", "held", 60.0], concurrency_key="acme")
    other = app.enqueue("sync_tenant", args=["acme", "other", 60.0], concurrency_key="acme")
    wait_until(lambda: runs.count("start")["other"] == 1 and runs.count("start")["held"] == 1,
               timeout=20, what="both slots of acme taken")  # fmt: skip
    # ahead of the two once they are handed back: it shows the slot came back
    waiting = app.enqueue(
        "sync_tenant", args=["acme", "waiting", 0.0], priority=10, concurrency_key="acme"
    )
    victim_claims = app.backend.claim_jobs(Claim("probe", None, 5, limited=True))
    assert victim_claims == [], "the third waits for a slot"
    assert waiting.refresh().state is JobState.PENDING
    victim.send_signal(signal.SIGKILL)
    victim.wait(timeout=10)
    spawn("--concurrency", "4", lease=2.0)
    assert waiting.result(timeout=30) is None, "a slot came back once the lease ran out"
    assert held.refresh().state in (JobState.PENDING, JobState.RUNNING)
    assert other.refresh().state in (JobState.PENDING, JobState.RUNNING)


def test_a_rate_holds_across_three_processes(app: App, spawn: Spawn, runs: Runs) -> None:
    """100 jobs at 20/s: no second holds more than 20 starts, and some second holds all 20
    (read from the start times the claims wrote), so the whole takes at least 4 s."""
    procs = [spawn("--concurrency", "4", lease=5.0) for _ in range(3)]
    wait_until(lambda: app.backend.task_info("paced"), timeout=20, what="registration")
    began = time.monotonic()
    handles = [app.enqueue("paced", args=[f"p{i}"]) for i in range(100)]
    for handle in handles:
        assert handle.result(timeout=30) is None
    took = time.monotonic() - began
    starts = sorted(h.refresh().started_at or 0.0 for h in handles)
    most = max(sum(1 for t in starts[i:] if t - s < 1.0) for i, s in enumerate(starts))
    print(f"100 jobs at 20/s took {took:.2f} s; the busiest second held {most} starts")
    assert most <= 20, "a second held more starts than the rate"
    # the limit is no stricter than it says (the first 20 may start at once)
    assert most == 20, "no second held the 20 starts the rate allows"
    assert took >= (100 - 20) / 20, "faster than the rate allows"
    assert len({pid for _, pid, _ in runs.lines()}) >= 2, "the processes shared the work"
    for proc in procs:
        proc.send_signal(signal.SIGTERM)
    for proc in procs:
        assert proc.wait(timeout=15) == 0
