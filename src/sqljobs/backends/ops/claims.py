"""Claims and outcomes, written once over an :class:`~..executor.Executor`: a crashed
worker's suspect claimed alone, when to look again, outcomes written (fenced, by the
engine's batch statement), what a committed ``ctx.transaction()`` adds, and the rescue of
expired leases. The claim itself is each engine's (its hot path); :class:`LimitedScans`
is the shared rule for when a limited claim may skip its full scan.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

from ...jobs import ClaimedJob, Due, HeldJob, JobState, Outcome
from ..executor import Executor
from ..records import Claim, DueQuery, Rescue
from ..rows import claimed_jobs, expired_job, result

LIMITED_SCAN_PAUSE = 0.25
"""Seconds a worker whose limited jobs hand their slots over goes without the full limited
claim (key locks, counts), once one found no free slot and nothing announced a change
since (see :class:`LimitedScans`)."""


class LimitedScans:
    """When a worker's limited claim may skip the full one (the scan over keys, which counts
    each key's running jobs, and on PostgreSQL locks the keys) and only hand slots over:
    each completed limited job passes its slot to the next due job of its key in the
    completion's own statement, so the key's running count stays what it was and nothing
    needs counting. That is the drain's steady state: every slot taken, each freed one
    handed on. The full claim still runs when the round trip carries no completion (an
    idle worker), carries other outcomes, when a completion could not hand its slot over
    (no heir due: the slot is free for anyone, and announced), when the last full claim
    found free slots (there may be more), when the backend's change marker moved since
    the last full claim (an enqueue, a slot freed elsewhere, another connection's commit
    on SQLite), and at least every ``LIMITED_SCAN_PAUSE`` (what announces nothing: a
    delayed job falling due, a lease the reaper ended)."""

    def __init__(self) -> None:
        self._skip_until = 0.0
        self._marker: int | None = None

    def may_skip(self, outcomes: Sequence[Outcome], marker: int | None) -> bool:
        """Whether a round trip carrying ``outcomes`` may only hand slots over, the change
        marker reading ``marker`` before it."""
        if not outcomes or marker != self._marker or time.monotonic() >= self._skip_until:
            return False
        return all(o.state is JobState.DONE and o.history is None for o in outcomes)

    def scanned(self, claimed: int, wanted: int, marker: int | None) -> None:
        """A full claim, begun with the change marker at ``marker``, took ``claimed`` of
        the ``wanted`` limited jobs besides the heirs of its own completions: fewer, it
        saw every free slot, so skip it for a while."""
        self._marker = marker
        more = claimed >= wanted > 0
        self._skip_until = 0.0 if more else time.monotonic() + LIMITED_SCAN_PAUSE

    def handed_over(self, limited: int, handed: int) -> None:
        """``limited`` limited jobs ended and ``handed`` heirs took their slots: a slot left
        free makes the next round trip a full claim."""
        if handed < limited:
            self._skip_until = 0.0


def claim_suspect(ex: Executor, claim: Claim) -> ClaimedJob | None:
    queues, leases = claim.queues, claim.leases
    params = {
        "worker": claim.worker,
        "now": ex.now(),
        "leases": json.dumps(dict(leases or {})),
        "queues": ex.array(queues) if queues else None,
        "tasks": None if leases is None else ex.array(leases),
    }
    found = ex.change("claim_suspect", params)
    jobs = claimed_jobs(found.names, found.rows)
    return jobs[0] if jobs else None


def next_due(ex: Executor, query: DueQuery) -> Due:
    queues, tasks = query.queues, query.tasks
    sql, params = ex.filtered("next_due", queues, tasks)
    params["now"] = ex.now()
    due = ex.read(lambda conn: result(conn.execute(sql, params)))
    first = due.first("wait", "suspect_wait", "schedule_at")
    wait, suspect_wait, schedule_at = first or (None, None, None)
    if query.limited:  # a delayed limited job: its slot may be free when it falls due
        sql, params = ex.filtered("next_limited_due", queues, tasks)
        params["now"] = ex.now()
        later = ex.read(lambda conn: result(conn.execute(sql, params))).first("wait")
        if later and later[0] is not None:
            wait = later[0] if wait is None else min(wait, later[0])
        opening = ex._next_rate_opening(queues, tasks)
        if opening is not None:
            wait = opening if wait is None else min(wait, opening)
    return Due(
        None if wait is None else float(wait),
        suspect_wait is not None,
        None if schedule_at is None else float(schedule_at),
        None if suspect_wait is None else float(suspect_wait),
    )


def finish_jobs(
    ex: Executor, outcomes: Sequence[Outcome], started: Sequence[HeldJob] = ()
) -> list[int]:
    if not outcomes and not started:
        return []
    return ex.write(lambda conn: ex._finish(conn, outcomes, started))


def finish_in_transaction(ex: Executor, connection: Any, outcome: Outcome) -> bool:
    return bool(ex._finish(connection, [outcome]))


def amend_done_job(ex: Executor, outcome: Outcome) -> bool:
    params = {
        "id": outcome.job_id,
        "token": outcome.token,
        "result": outcome.result,
        "error": outcome.error,
        "traceback": outcome.traceback,
        "history": None if outcome.history is None else json.dumps(outcome.history),
    }
    return bool(ex.change("amend_done_job", params).rows)


def rescue_jobs(ex: Executor, rescue: Rescue) -> list[Outcome]:
    decide, worker, limit = rescue.decide, rescue.worker, rescue.limit
    if worker is None and ex.one_writer and not any_expired(ex):
        return []

    def work(conn: Any) -> list[Outcome]:
        now = ex.now()  # read once the write lock is held: SQLite may have waited
        if worker is None:
            params: dict[str, Any] = {"now": now, "limit": limit}
            found = result(conn.execute(ex.sql["expired_jobs"], params))
        else:
            params = {"worker": worker, "limit": limit}
            found = result(conn.execute(ex.sql["jobs_of_worker"], params))
        has_now = "now" in found.names  # PostgreSQL's: the server's clock, as claims
        clocks = [r[0] for r in found.pick("now")] if has_now else [now] * len(found.rows)
        outcomes = [
            decide(expired_job(found.names, row), at)
            for row, at in zip(found.rows, clocks, strict=True)
        ]
        written = set(ex._finish(conn, outcomes))
        return [o for o in outcomes if o.job_id in written]

    return ex.transaction(work)


def any_expired(ex: Executor) -> bool:
    """Whether any lease has run out, read without the write lock: on an engine with one
    writer the rescue looks first, so a long ``ctx.transaction()`` does not stall it."""
    params = {"now": ex.now()}
    found = ex.read(lambda conn: result(conn.execute(ex.sql["any_expired"], params)))
    return bool(found.rows)
