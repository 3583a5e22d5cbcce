"""Fencing, statement by statement: every statement that writes a running job refuses a
stale token.

Each case sets up the same takeover (worker ``old`` claims a job, its lease lapses, the
reaper hands the job back and worker ``new`` claims it under the next token, with the job
waiting in its buffer so that a stale "it began" would show), then makes one call with
``old``'s token that reaches one statement (or one branch of one) on each engine, and
checks that the job's row is exactly what it was and that the call says it wrote
nothing. Deleting the token condition of the statement a case names fails that case
(docs/guarantees.md, 3).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from sqljobs import App, JobState
from sqljobs.backends import WorkerInfo
from sqljobs.backends.base import Claim
from sqljobs.jobs import ClaimedJob, HeldJob, Outcome
from sqljobs.maintenance import Reaper

from ..conftest import db_execute, expire_lease

COVERS = {"finish_and_claim"}

PROGRESS = '{"done": 1, "total": null, "note": "stale", "at": 0}'


@dataclass(frozen=True)
class Write:
    """One call a stale worker could make, and what it answers when it wrote nothing."""

    reaches: str  # the statement (and its part) each engine runs for it
    call: Callable[[Any, HeldJob], Any]
    nothing: Any


def _done(stale: HeldJob, **fields: Any) -> Outcome:
    return Outcome(stale.id, stale.token, JobState.DONE, **fields)


def _in_transaction(backend: Any, stale: HeldJob) -> bool:
    with backend.job_transaction() as conn:
        return bool(backend.finish_in_transaction(conn, _done(stale)))


def _claimed(written_and_claimed: tuple[list[int], list[ClaimedJob]]) -> list[int]:
    return written_and_claimed[0]  # (what it claimed shows in the job's row)


WRITES = {
    "finish-done": Write(
        "sqlite complete_jobs (json_each batch); postgres complete_jobs.done",
        lambda b, s: b.finish_jobs([_done(s)]),
        [],
    ),
    "finish-done-result": Write(
        "sqlite complete_job_with; postgres complete_jobs.done",
        lambda b, s: b.finish_jobs([_done(s, result="1")]),
        [],
    ),
    "finish-done-progress": Write(
        "sqlite complete_job_with; postgres complete_jobs.done",
        lambda b, s: b.finish_jobs([_done(s, progress=PROGRESS)]),
        [],
    ),
    "finish-done-history": Write(
        "sqlite finish_job; postgres finish_jobs",
        lambda b, s: b.finish_jobs([_done(s, history={"attempt": 1, "outcome": "done"})]),
        [],
    ),
    "finish-retry": Write(
        "sqlite finish_job; postgres finish_jobs",
        lambda b, s: b.finish_jobs(
            [Outcome(s.id, s.token, JobState.PENDING, delay=0, error="boom", errors=1)]
        ),
        [],
    ),
    "finish-dead": Write(
        "sqlite finish_job; postgres finish_jobs (and _finish_parents' call of it)",
        lambda b, s: b.finish_jobs([Outcome(s.id, s.token, JobState.DEAD, error="boom")]),
        [],
    ),
    "finish-release": Write(
        "sqlite finish_job; postgres finish_jobs",
        lambda b, s: b.finish_jobs(
            [Outcome(s.id, s.token, JobState.PENDING, delay=0, uncharge=True)]
        ),
        [],
    ),
    "finish-and-claim-done": Write(
        "sqlite complete_jobs; postgres complete_and_claim.done (the hot path)",
        lambda b, s: _claimed(b.finish_and_claim([_done(s)], Claim("old", None, 1))),
        [],
    ),
    "finish-and-claim-done-result": Write(
        "sqlite complete_job_with; postgres complete_and_claim.done",
        lambda b, s: _claimed(b.finish_and_claim([_done(s, result="1")], Claim("old", None, 1))),
        [],
    ),
    "finish-and-claim-retry": Write(
        "sqlite finish_job; postgres finish_jobs",
        lambda b, s: _claimed(
            b.finish_and_claim(
                [Outcome(s.id, s.token, JobState.PENDING, delay=0, error="boom")],
                Claim("old", None, 1),
            )
        ),
        [],
    ),
    "finish-and-claim-limited-done": Write(
        "sqlite complete_jobs; postgres complete_and_hand_over.done",
        lambda b, s: _claimed(
            b.finish_and_claim([_done(s)], Claim("old", None, 1, start_now=1, limited=True))
        ),
        [],
    ),
    "transaction-completion": Write(
        "ctx.transaction()'s finish_in_transaction: sqlite complete_jobs; postgres "
        "complete_jobs.done",
        _in_transaction,
        False,
    ),
    "renew-lease": Write(
        "renew_leases",
        lambda b, s: b.renew_leases("old", [s]),
        set(),
    ),
    "progress": Write(
        "save_progress",
        lambda b, s: b.save_progress([(s, PROGRESS)]),
        set(),
    ),
    "began-alone": Write(
        "mark_started",
        lambda b, s: b.finish_jobs([], started=[s]),
        [],
    ),
    "began-with-claim": Write(
        "sqlite mark_started; postgres claim.began",
        lambda b, s: b.claim_jobs(Claim("old", None, 1, started=[s])),
        [],
    ),
    "began-with-done": Write(
        "sqlite mark_started; postgres complete_jobs.began",
        lambda b, s: b.finish_jobs([_done(s)], started=[s]),
        [],
    ),
    "began-with-finish-and-claim": Write(
        "sqlite mark_started; postgres complete_and_claim.began",
        lambda b, s: _claimed(b.finish_and_claim([_done(s)], Claim("old", None, 1, started=[s]))),
        [],
    ),
    "began-with-limited-claim": Write(
        "sqlite mark_started; postgres complete_and_hand_over.began",
        lambda b, s: _claimed(
            b.finish_and_claim(
                [_done(s)], Claim("old", None, 1, start_now=1, started=[s], limited=True)
            )
        ),
        [],
    ),
}


def _row(app: App, job_id: int) -> tuple[Any, ...]:
    (row,) = db_execute(app, "SELECT * FROM sqljobs_jobs WHERE id = ?", params=(job_id,))
    return tuple(row)


def _taken_over(app: App) -> tuple[ClaimedJob, ClaimedJob]:
    """A job claimed by ``old``, its lease lapsed and reaped, now ``new``'s: claimed into
    ``new``'s buffer (``prefetched``), with a progress report of ``new``'s own."""

    @app.task(lease=30)
    def t() -> None: ...

    job_id = t.enqueue().id
    backend = app.backend
    backend.register_worker(WorkerInfo("old", "host", 1, None, 1, 10.0))  # alive, slow
    (old,) = backend.claim_jobs(Claim("old", None, 1))
    expire_lease(app, job_id)
    (rescued,) = Reaper(backend).run_once()
    assert rescued.state is JobState.PENDING
    (new,) = backend.claim_jobs(Claim("new", None, 1, start_now=0))
    assert (new.id, new.token) == (old.id, old.token + 1)
    assert backend.save_progress([(HeldJob(new.id, new.token), '{"done": 0}')]) == {new.id}
    return old, new


@pytest.mark.parametrize("case", list(WRITES))
def test_a_stale_token_writes_nothing(app: App, case: str) -> None:
    write = WRITES[case]
    old, new = _taken_over(app)
    before = _row(app, new.id)
    answer = write.call(app.backend, HeldJob(old.id, old.token))
    assert _row(app, new.id) == before, f"{case} ({write.reaches}) wrote a stale worker's call"
    assert answer == write.nothing, f"{case} ({write.reaches}) says it wrote"
    job = app.get_job(new.id)
    assert job is not None
    assert (job.state, job.token, job.worker) == (JobState.RUNNING, new.token, "new")


@pytest.mark.parametrize("case", list(WRITES))
def test_the_holders_token_writes(app: App, case: str) -> None:
    """The same call with the holder's token does write (so the stale case above is
    refused by the fence, not by something else about the call)."""
    write = WRITES[case]
    _, new = _taken_over(app)
    before = _row(app, new.id)
    answer = write.call(app.backend, HeldJob(new.id, new.token))
    assert _row(app, new.id) != before, f"{case} ({write.reaches}) wrote nothing"
    if case.startswith("began-"):
        return  # (the call's answer is about its completion or its claim)
    assert answer not in ([], set(), False), f"{case} ({write.reaches}) says it wrote nothing"
