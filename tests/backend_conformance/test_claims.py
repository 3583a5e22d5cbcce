"""Atomic claims and fencing, checked at the backend level with real concurrent claimers."""

from __future__ import annotations

import multiprocessing
import time
from collections import Counter

import pytest

import sqljobs
from sqljobs import App, JobState
from sqljobs.backends import WorkerInfo
from sqljobs.backends.base import Claim, DueQuery
from sqljobs.jobs import Due, HeldJob, Outcome
from sqljobs.maintenance import Reaper

from ..conftest import db_execute, expire_lease
from .conftest import new_job

COVERS = {"claim_jobs", "claim_suspect", "next_due"}


def _claim_until_empty(
    url: str, name: str, start: multiprocessing.synchronize.Barrier
) -> list[int]:
    backend = App(url)._open_backend()
    start.wait()  # every claimer starts at the same moment
    got: list[int] = []
    empty = 0
    while empty < 3:
        jobs = backend.claim_jobs(Claim(name, None, 5))
        got += [j.id for j in jobs]
        empty = 0 if jobs else empty + 1
        time.sleep(0.0005)  # stands for running the jobs, so the claimers interleave
    return got


@pytest.mark.processes
@pytest.mark.slow
def test_concurrent_claimers_in_processes_never_take_one_job_twice(app: App) -> None:
    @app.task
    def noop(i: int) -> None: ...

    n, claimers = 3000, 6
    noop.enqueue_many([(i,) for i in range(n)])
    ctx = multiprocessing.get_context("spawn")
    start = ctx.Manager().Barrier(claimers)
    with ctx.Pool(claimers) as pool:
        results = [
            pool.apply_async(_claim_until_empty, (app.url, f"w{i}", start)) for i in range(claimers)
        ]
        per_claimer = [r.get(timeout=120) for r in results]
    claimed = Counter(i for ids in per_claimer for i in ids)
    assert len(claimed) == n, "every job claimed"
    assert max(claimed.values()) == 1, "no job claimed twice"
    assert sum(1 for ids in per_claimer if ids) >= 3, "claimers really ran side by side"


def test_claims_take_priority_then_age_and_respect_run_at_and_queue(app: App) -> None:
    @app.task
    def t(n: int) -> None: ...

    low = t.enqueue(1).id
    high = t.with_options(priority=5).enqueue(2).id
    later = t.with_options(delay=3600, priority=9).enqueue(3).id
    other = t.with_options(queue="other").enqueue(4).id
    backend = app.backend
    claimed = backend.claim_jobs(Claim("w", ["default"], 10))
    assert [j.id for j in claimed] == [high, low]
    assert later not in [j.id for j in claimed] and other not in [j.id for j in claimed]
    assert [j.id for j in backend.claim_jobs(Claim("w", ["default", "other"], 10))] == [other]
    assert all(j.attempt == 1 and j.token == 1 for j in claimed)


def test_a_claim_marks_the_jobs_beyond_those_that_start_at_once_as_buffered(app: App) -> None:
    """The claim itself marks ``prefetched`` the jobs after the first ``start_now`` in claim
    order (a crash of the worker does not blame them), whatever order its rows come in."""

    @app.task
    def t(n: int) -> None: ...

    ids = [t.with_options(priority=n % 3).enqueue(n).id for n in range(7)]
    claimed = app.backend.claim_jobs(Claim("w", None, 5, {"t": 30.0}, start_now=2))
    assert len(claimed) == 5 and set(j.id for j in claimed) <= set(ids)
    marked = {
        job_id
        for (job_id,) in db_execute(
            app, "SELECT id FROM sqljobs_jobs WHERE state = 'running' AND prefetched = true"
        )
    }
    assert marked == {j.id for j in claimed[2:]}, "all but the first two in claim order"
    rest = app.backend.claim_jobs(Claim("w", None, 5, {"t": 30.0}, start_now=0))
    assert len(rest) == 2
    marked = {
        job_id
        for (job_id,) in db_execute(
            app, "SELECT id FROM sqljobs_jobs WHERE state = 'running' AND prefetched = true"
        )
    }
    assert marked == {j.id for j in claimed[2:] + rest}, "start_now=0: every job buffered"


def test_a_claim_gives_each_job_the_lease_its_worker_gives_its_task(app: App) -> None:
    """The worker's lease for a task wins over the one the job was enqueued with, whether
    the worker gives all its tasks one lease (SQLite then claims with no lookup a row) or
    each its own; a claim that names no leases keeps the job's."""

    @app.task(lease=30)
    def t(n: int) -> None: ...

    @app.task(lease=30)
    def u(n: int) -> None: ...

    backend = app.backend
    cases = [
        (leases, queues)
        for queues in (None, ["default"], ["default", "other"])
        for leases in ({"t": 7.0}, {"t": 7.0, "u": 7.0}, {"t": 11.0, "u": 13.0}, None)
    ]
    for leases, queues in cases:  # every queue filter: each is a statement of its own
        t.enqueue(1)
        u.enqueue(2)
        began = backend.now()
        claimed = backend.claim_jobs(Claim("w", queues, 5, leases, start_now=5))
        ended = backend.now()
        assert {j.task for j in claimed} == set(leases or ("t", "u")), (leases, queues)
        for job in claimed:
            lease = (leases or {}).get(job.task, 30.0)
            assert job.lease == lease, (leases, queues, job.task)
            ((lease_until,),) = db_execute(
                app,
                "SELECT lease_until FROM sqljobs_jobs WHERE id = ?",
                "SELECT extract(epoch FROM lease_until)::float8 FROM sqljobs_jobs WHERE id = ?",
                (job.id,),
            )
            assert began + lease - 1 <= lease_until <= ended + lease + 1, (leases, queues)
        backend.finish_jobs([Outcome(j.id, j.token, JobState.DONE) for j in claimed])
        leftover = backend.claim_jobs(Claim("w", None, 5))  # u's job when only t was leased
        backend.finish_jobs([Outcome(j.id, j.token, JobState.DONE) for j in leftover])


def test_a_stale_worker_cannot_complete_fail_release_or_renew(app: App) -> None:
    @app.task(lease=30)
    def t() -> None: ...

    job_id = t.enqueue().id
    backend = app.backend
    backend.register_worker(WorkerInfo("old-worker", "host", 1, None, 1, 10.0))  # alive, slow
    (old,) = backend.claim_jobs(Claim("old-worker", None, 1))
    expire_lease(app, job_id)
    (rescued,) = Reaper(backend).run_once()
    assert rescued.state is JobState.PENDING and rescued.lease_expiries == 1
    (new,) = backend.claim_jobs(Claim("new-worker", None, 1))
    assert new.id == old.id and new.token == old.token + 1 and new.attempt == 2

    stale = [
        Outcome(job_id, old.token, JobState.DONE),
        Outcome(job_id, old.token, JobState.PENDING, delay=0, error="boom"),
        Outcome(job_id, old.token, JobState.DEAD, error="boom"),
        Outcome(job_id, old.token, JobState.PENDING, delay=0, uncharge=True),
    ]
    for outcome in stale:
        assert backend.finish_jobs([outcome]) == []
    assert backend.renew_leases("old-worker", [HeldJob(job_id, old.token)]) == set()
    job = app.get_job(job_id)
    assert job is not None
    assert (job.state, job.token, job.worker, job.last_error) == (
        JobState.RUNNING,
        new.token,
        "new-worker",
        rescued.error,
    )
    assert backend.renew_leases("new-worker", [HeldJob(job_id, new.token)]) == {job_id}
    assert backend.finish_jobs([Outcome(job_id, new.token, JobState.DONE)]) == [job_id]
    done = app.get_job(job_id)
    assert done is not None and done.state is JobState.DONE


def test_one_batch_of_completions_writes_exactly_those_still_held(app: App) -> None:
    """Plain completions go out as one statement: in one batch, a fenced-off one is left
    alone, one that others wait for settles them, one with a result stores it, and the
    answer lists the written ones."""

    @app.task(lease=30)
    def t(n: int) -> int:
        return n

    a, b, c, d = (t.enqueue(n).id for n in range(4))
    child = t.with_options(after=[c]).enqueue(9).id
    backend = app.backend
    held = {job.id: job for job in backend.claim_jobs(Claim("old-worker", None, 4))}
    assert set(held) == {a, b, c, d}
    expire_lease(app, b)
    Reaper(backend).run_once()
    (again,) = backend.claim_jobs(Claim("new-worker", None, 1))
    assert again.id == b and again.token == held[b].token + 1
    batch = [
        Outcome(a, held[a].token, JobState.DONE),
        Outcome(b, held[b].token, JobState.DONE),  # fenced off: b is new-worker's now
        Outcome(c, held[c].token, JobState.DONE),  # its child waits for it
        Outcome(d, held[d].token, JobState.DONE, result="3"),
    ]
    assert sorted(backend.finish_jobs(batch)) == [a, c, d]
    states = {i: app.get_job(i) for i in (a, b, c, d, child)}
    assert all(job is not None for job in states.values())
    assert [states[i].state for i in (a, b, c, d)] == [  # type: ignore[union-attr]
        JobState.DONE, JobState.RUNNING, JobState.DONE, JobState.DONE,
    ]  # fmt: skip
    assert states[child].state is JobState.PENDING  # type: ignore[union-attr]
    assert app.job(d).result(timeout=0) == 3


def test_a_heartbeat_renews_every_held_lease_in_one_call(app: App) -> None:
    @app.task(lease=10)
    def t(i: int) -> None: ...

    t.enqueue_many([(i,) for i in range(51)])
    backend = app.backend
    *held, left_out = backend.claim_jobs(Claim("w", None, 51))
    for job in [*held, left_out]:  # every lease run out, so only a renewal can move it
        expire_lease(app, job.id)
    began = backend.now()
    renewed = backend.renew_leases("w", [HeldJob(j.id, j.token) for j in held])
    ended = backend.now()
    assert renewed == {j.id for j in held}
    leases = {j.id: j.lease_until for j in app.list_jobs(limit=100)}
    for job in held:  # a fresh lease of the task's 10 s from the renewal (1 s of clock slack)
        lease_until = leases[job.id]
        assert lease_until is not None and began + 9 <= lease_until <= ended + 11, job.id
    expired = leases[left_out.id]
    assert expired is not None and expired < began, "a job not named is not renewed"


def test_the_reaper_is_safe_to_run_concurrently(app: App) -> None:
    @app.task(lease=30)
    def t(i: int) -> None: ...

    t.enqueue_many([(i,) for i in range(200)])
    held = app.backend.claim_jobs(Claim("gone", None, 200))
    for j in held:
        expire_lease(app, j.id)
    reapers = [Reaper(sqljobs.App(app.url)._open_backend()) for _ in range(3)]
    import threading

    results: list[int] = []
    threads = [
        threading.Thread(target=lambda r=r: results.append(len(r.run_once()))) for r in reapers
    ]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert sum(results) == 200
    assert app.stats().total("pending") == 200
    assert all(j.crashes == 1 for j in app.list_jobs(limit=300))


def test_a_job_of_two_crashed_workers_is_claimed_only_alone(app: App) -> None:
    """A job held by workers that crashed twice waits for ``claim_suspect``: normal
    claims skip it, ``next_due`` says one waits, and it is claimed on its own."""
    backend = app.backend
    made = backend.enqueue_jobs([new_job(backend, "t", 1), new_job(backend, "t", 2)])
    suspect, innocent = backend.claim_jobs(Claim("w", None, 2))
    crashed = Outcome(suspect.id, suspect.token, JobState.PENDING, crashes=2)
    backend.finish_jobs([crashed, Outcome(innocent.id, innocent.token, JobState.DONE)])
    assert backend.claim_jobs(Claim("w", None, 5)) == []
    assert backend.next_due(DueQuery()).suspects
    assert backend.claim_suspect(Claim("other", ["elsewhere"])) is None
    alone = backend.claim_suspect(Claim("w", leases={"t": 45.0}))
    assert alone is not None and alone.id == made[0].id and alone.lease == 45.0
    assert backend.claim_suspect(Claim("w")) is None


def test_next_due_says_when_a_job_of_two_crashed_workers_falls_due(app: App) -> None:
    """``suspect_wait`` counts only what ``claim_suspect`` of the same worker could take:
    a worker that wakes for it then finds it, and one that could not never wakes for it."""
    backend = app.backend
    backend.enqueue_jobs([new_job(backend, "t", 1)])
    (job,) = backend.claim_jobs(Claim("w", None, 1))
    backend.finish_jobs([Outcome(job.id, job.token, JobState.PENDING, delay=20.0, crashes=2)])
    due = backend.next_due(DueQuery(["default"], ["t"]))
    assert due.suspects and due.suspect_wait is not None and 15 < due.suspect_wait <= 20
    assert due.wait is None, "a suspect is not the normal claim's"
    assert backend.next_due(DueQuery(["default"], ["u"])).suspect_wait is None
    assert backend.next_due(DueQuery(["other"])).suspect_wait is None
    db_execute(
        app,
        "UPDATE sqljobs_jobs SET run_at = run_at - 30",
        "UPDATE sqljobs_jobs SET run_at = run_at - interval '30 seconds'",
    )
    wait = backend.next_due(DueQuery()).suspect_wait
    assert wait is not None and wait <= 0
    assert backend.claim_suspect(Claim("w", leases={"t": 30.0})) is not None
    assert backend.next_due(DueQuery()) == Due(None, False, None)


def test_next_due_says_when_a_delayed_job_of_the_workers_tasks_falls_due(app: App) -> None:
    backend = app.backend
    assert backend.next_due(DueQuery()) == Due(None, False, None)
    later = backend.now() + 30
    backend.enqueue_jobs([new_job(backend, "t", 1, run_at=later)])
    backend.enqueue_jobs([new_job(backend, "u", 2, run_at=later - 20, queue="other")])
    due = backend.next_due(DueQuery(["default"], ["t"]))
    assert due.wait is not None and 25 < due.wait <= 30 and not due.suspects
    sooner = backend.next_due(DueQuery())
    assert sooner.wait is not None and sooner.wait <= 10
    assert backend.next_due(DueQuery(["default"], ["u"])).wait is None, "no job of its tasks"
    limited = new_job(backend, "t", 3, run_at=later - 10, limit_key="k", limit_max=1)
    backend.enqueue_jobs([limited])
    wait = backend.next_due(DueQuery(["default"], ["t"], limited=True)).wait
    assert wait is not None and wait <= 20, "a delayed limited job counts when asked"
