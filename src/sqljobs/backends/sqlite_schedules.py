"""Schedule storage on SQLite, mixed into SqliteBackend so sqlite.py stays about jobs.

A tick is one ``BEGIN IMMEDIATE`` transaction: the conditional UPDATE of the schedule row,
the job's insert and the note of which job it was commit together or not at all, so a
worker killed half-way through loses nothing and another fires the tick.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from ..jobs import EnqueueResult, NewJob
from ..schedules import Schedule, ScheduleState, Tick, TickOutcome, TickResult, state_from_row
from .sqlfile import load_queries

SQ = load_queries("sqljobs.backends.sqlite_sql", "schedules.sql")


class SqliteSchedules:
    """The schedule methods of the Backend protocol, for SQLite."""

    if TYPE_CHECKING:  # provided by SqliteBackend

        def now(self) -> float: ...

        def _write(self) -> AbstractContextManager[sqlite3.Connection]: ...

        def _read(self, sql: str, params: Any = ()) -> list[Any]: ...

        def enqueue_jobs(
            self, jobs: Sequence[NewJob], connection: Any | None = None
        ) -> list[EnqueueResult]: ...

    def save_schedule(self, schedule: Schedule, next_run_at: float) -> ScheduleState:
        params = {
            **schedule.__dict__,
            "kwargs": json.dumps(schedule.kwargs),
            "next_run_at": next_run_at,
            "now": self.now(),
        }
        with self._write() as conn:
            row = conn.execute(SQ["save_schedule"], params).fetchone()
        return state_from_row(row)

    def get_schedule(self, name: str) -> ScheduleState | None:
        rows = self._read(SQ["get_schedule"], {"name": name})
        return state_from_row(rows[0]) if rows else None

    def list_schedules(self) -> list[ScheduleState]:
        return [state_from_row(r) for r in self._read(SQ["list_schedules"])]

    def delete_schedule(self, name: str) -> bool:
        with self._write() as conn:
            return conn.execute(SQ["delete_schedule"], {"name": name}).rowcount == 1

    def pause_schedule(self, name: str) -> bool:
        with self._write() as conn:
            params = {"name": name, "now": self.now()}
            return conn.execute(SQ["pause_schedule"], params).rowcount == 1

    def resume_schedule(self, name: str, next_run_at: float) -> bool:
        with self._write() as conn:
            params = {"name": name, "next_run_at": next_run_at, "now": self.now()}
            return conn.execute(SQ["resume_schedule"], params).rowcount == 1

    def upcoming_schedules(self, limit: int) -> list[ScheduleState]:
        rows = self._read(SQ["upcoming_schedules"], {"limit": limit})
        return [state_from_row(r) for r in rows]

    def fire_schedule(self, tick: Tick) -> TickResult:
        params = {
            "name": tick.name,
            "expected": tick.expected,
            "next_run_at": tick.next_run_at,
            "outcome": tick.outcome,
            "skip_if_active": 1 if tick.skip_if_active and tick.job is not None else 0,
            "now": self.now(),
        }
        with self._write() as conn:
            row = conn.execute(SQ["claim_tick"], params).fetchone()
            if row is None:
                return TickResult(tick.name, claimed=False)
            outcome, stored = row[0], float(row[1])
            if tick.job is None or outcome == TickOutcome.SKIPPED_OVERLAP:
                return TickResult(tick.name, True, outcome, next_run_at=stored)
            (result,) = self.enqueue_jobs([tick.job], connection=conn)
            record = {"name": tick.name, "job_id": result.id, "run_at": tick.tick_at}
            conn.execute(SQ["record_job"], {**record, "outcome": outcome})
        return TickResult(tick.name, True, outcome, result.id, result.created, stored)

    def run_schedule_now(self, name: str, job: NewJob) -> TickResult | None:
        now = self.now()
        with self._write() as conn:
            row = conn.execute(SQ["lock_for_run_now"], {"name": name, "now": now}).fetchone()
            if row is None:
                return None
            if row[0] is not None:  # overlap="skip" and a run is pending or running
                return TickResult(name, True, TickOutcome.SKIPPED_OVERLAP, row[0], False)
            (result,) = self.enqueue_jobs([job], connection=conn)
            params = {"name": name, "job_id": result.id, "run_at": now, "outcome": "run_now"}
            conn.execute(SQ["record_job"], params)
        return TickResult(name, True, TickOutcome.RUN_NOW, result.id, result.created)
