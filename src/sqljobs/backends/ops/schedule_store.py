"""Schedule storage, written once over each engine's transaction.

A tick is one transaction: the conditional UPDATE of the schedule row (only the replica
that still finds the tick it read moves it on; on PostgreSQL its row lock makes a racing
replica wait, then find the row moved on), the job's insert, and the note of which job it
was. They commit together or not at all, so a replica killed half-way through loses
nothing and another fires the tick; and as durably as an enqueue (``durable_transaction``:
a worker's own claims and outcomes may commit more cheaply, but a tick is new work).
Different schedules are different rows, so they never wait for one another. A schedule
that is new or resumed is announced: it may fall due before waiting workers would next
look.
"""

from __future__ import annotations

import json
from typing import Any

from ...jobs import NewJob
from ...schedules import Schedule, ScheduleState, Tick, TickOutcome, TickResult
from ..executor import Executor
from ..rows import result, schedule_state


def save_schedule(ex: Executor, schedule: Schedule, next_run_at: float) -> ScheduleState:
    params = {
        **schedule.__dict__,
        "kwargs": json.dumps(schedule.kwargs),
        "next_run_at": next_run_at,
        "now": ex.now(),
    }
    saved = ex.change("save_schedule", params)
    ex.notifier.announce()
    return schedule_state(saved.names, saved.rows[0])


def get_schedule(ex: Executor, name: str) -> ScheduleState | None:
    found = ex.query("get_schedule", {"name": name})
    return schedule_state(found.names, found.rows[0]) if found.rows else None


def list_schedules(ex: Executor) -> list[ScheduleState]:
    found = ex.query("list_schedules")
    return [schedule_state(found.names, row) for row in found.rows]


def upcoming_schedules(ex: Executor, limit: int) -> list[ScheduleState]:
    found = ex.query("upcoming_schedules", {"limit": limit})
    return [schedule_state(found.names, row) for row in found.rows]


def delete_schedule(ex: Executor, name: str) -> bool:
    return ex.change("delete_schedule", {"name": name}).rowcount == 1


def pause_schedule(ex: Executor, name: str) -> bool:
    return ex.change("pause_schedule", {"name": name, "now": ex.now()}).rowcount == 1


def resume_schedule(ex: Executor, name: str, next_run_at: float) -> bool:
    params = {"name": name, "next_run_at": next_run_at, "now": ex.now()}
    resumed = ex.change("resume_schedule", params).rowcount == 1
    ex.notifier.announce()
    return resumed


def fire_schedule(ex: Executor, tick: Tick) -> TickResult:
    params = {
        "name": tick.name,
        "expected": tick.expected,
        "next_run_at": tick.next_run_at,
        "outcome": tick.outcome,
        "skip_if_active": tick.skip_if_active and tick.job is not None,
        "now": ex.now(),
    }

    def work(conn: Any) -> TickResult:
        claimed = result(conn.execute(ex.sql["claim_tick"], params))
        row = claimed.first("last_outcome", "next_run_at")
        if row is None:
            return TickResult(tick.name, claimed=False)
        outcome, stored = row[0], float(row[1])
        if tick.job is None or outcome == TickOutcome.SKIPPED_OVERLAP:
            return TickResult(tick.name, True, outcome, next_run_at=stored)
        (enqueued,) = ex.enqueue_jobs([tick.job], connection=conn)
        record = {"name": tick.name, "job_id": enqueued.id, "run_at": tick.tick_at}
        conn.execute(ex.sql["record_job"], {**record, "outcome": outcome})
        return TickResult(tick.name, True, outcome, enqueued.id, enqueued.created, stored)

    return ex.durable_transaction(work)


def run_schedule_now(ex: Executor, name: str, job: NewJob) -> TickResult | None:
    now = ex.now()

    def work(conn: Any) -> TickResult | None:
        locked = result(conn.execute(ex.sql["lock_for_run_now"], {"name": name, "now": now}))
        row = locked.first("active_job_id")
        if row is None:
            return None
        if row[0] is not None:  # overlap="skip" and a run is pending or running
            return TickResult(name, True, TickOutcome.SKIPPED_OVERLAP, row[0], False)
        (enqueued,) = ex.enqueue_jobs([job], connection=conn)
        params = {"name": name, "job_id": enqueued.id, "run_at": now, "outcome": "run_now"}
        conn.execute(ex.sql["record_job"], params)
        return TickResult(name, True, TickOutcome.RUN_NOW, enqueued.id, enqueued.created)

    return ex.durable_transaction(work)
