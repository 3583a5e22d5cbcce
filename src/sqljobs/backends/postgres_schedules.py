"""Schedule storage on PostgreSQL, mixed into PostgresBackend so postgres.py stays about jobs.

A tick is one transaction: the conditional UPDATE of the schedule row (its row lock makes a
racing replica wait, then find the row moved on), the job's insert with its NOTIFY, and
the note of which job it was. A worker killed half-way through holds nothing once its
connection drops; another replica then fires the tick. Different schedules are different
rows, so they never wait for one another.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import cached_property
from typing import TYPE_CHECKING, Any

from ..jobs import NewJob
from ..schedules import Schedule, ScheduleState, Tick, TickOutcome, TickResult, state_from_row
from .postgres_parts import PostgresPart
from .sqlfile import load_queries

if TYPE_CHECKING:
    import psycopg

_QUERIES = load_queries("sqljobs.backends.postgres_sql", "schedules.sql")
_COLUMNS = (
    "s.name, s.task, s.kwargs, s.cron, s.every, s.tz, s.overlap, s.misfire, s.queue, "
    "s.priority, s.source, extract(epoch FROM s.next_run_at)::float8, "
    "extract(epoch FROM s.last_run_at)::float8, s.last_job_id, s.last_outcome, s.paused, "
    "extract(epoch FROM s.updated_at)::float8"
)


class PostgresSchedules(PostgresPart):
    """The schedule methods of the Backend protocol, for PostgreSQL."""

    @cached_property
    def _schedule_sql(self) -> dict[str, str]:
        return {
            k: v.replace("{columns}", _COLUMNS).replace("{schema}", self.schema)
            for k, v in _QUERIES.items()
        }

    def _schedule_rows(self, name: str, params: Mapping[str, Any] | None = None) -> list[Any]:
        return self._fetch("", params or {}, self._schedule_sql[name])

    def save_schedule(self, schedule: Schedule, next_run_at: float) -> ScheduleState:
        params = {
            **schedule.__dict__,
            "kwargs": json.dumps(schedule.kwargs),
            "next_run_at": next_run_at,
            "now": self.now(),
        }
        saved = state_from_row(self._schedule_rows("save_schedule", params)[0])
        self._announce()
        return saved

    def get_schedule(self, name: str) -> ScheduleState | None:
        rows = self._schedule_rows("get_schedule", {"name": name})
        return state_from_row(rows[0]) if rows else None

    def list_schedules(self) -> list[ScheduleState]:
        return [state_from_row(r) for r in self._schedule_rows("list_schedules")]

    def _write_schedule(self, name: str, params: Mapping[str, Any]) -> bool:
        sql = self._schedule_sql[name]
        return self._run(lambda c: c.execute(sql, params).rowcount == 1, transaction=False)

    def delete_schedule(self, name: str) -> bool:
        return self._write_schedule("delete_schedule", {"name": name})

    def pause_schedule(self, name: str) -> bool:
        return self._write_schedule("pause_schedule", {"name": name, "now": self.now()})

    def resume_schedule(self, name: str, next_run_at: float) -> bool:
        params = {"name": name, "next_run_at": next_run_at, "now": self.now()}
        resumed = self._write_schedule("resume_schedule", params)
        self._announce()
        return resumed

    def _announce(self) -> None:
        """Wake listening workers: a schedule that is new or resumed may fall due before
        the next time they would look (on SQLite, the commit itself is the signal)."""
        if self.listen:
            self._fetch("", {"c": self.channel}, "SELECT pg_notify(%(c)s, 'schedules')")

    def upcoming_schedules(self, limit: int) -> list[ScheduleState]:
        rows = self._schedule_rows("upcoming_schedules", {"limit": limit})
        return [state_from_row(r) for r in rows]

    def fire_schedule(self, tick: Tick) -> TickResult:
        sql = self._schedule_sql
        params = {
            "name": tick.name,
            "expected": tick.expected,
            "next_run_at": tick.next_run_at,
            "outcome": tick.outcome,
            "skip_if_active": tick.skip_if_active and tick.job is not None,
            "now": self.now(),
        }

        def work(conn: psycopg.Connection[Any]) -> TickResult:
            row = conn.execute(sql["claim_tick"], params).fetchone()
            if row is None:
                return TickResult(tick.name, claimed=False)
            outcome, stored = row[0], float(row[1])
            if tick.job is None or outcome == TickOutcome.SKIPPED_OVERLAP:
                return TickResult(tick.name, True, outcome, next_run_at=stored)
            (result,) = self.enqueue_jobs([tick.job], connection=conn)
            record = {"name": tick.name, "job_id": result.id, "run_at": tick.tick_at}
            conn.execute(sql["record_job"], {**record, "outcome": outcome})
            return TickResult(tick.name, True, outcome, result.id, result.created, stored)

        return self._run(work)

    def run_schedule_now(self, name: str, job: NewJob) -> TickResult | None:
        sql = self._schedule_sql
        now = self.now()

        def work(conn: psycopg.Connection[Any]) -> TickResult | None:
            row = conn.execute(sql["lock_for_run_now"], {"name": name, "now": now}).fetchone()
            if row is None:
                return None
            if row[0] is not None:  # overlap="skip" and a run is pending or running
                return TickResult(name, True, TickOutcome.SKIPPED_OVERLAP, row[0], False)
            (result,) = self.enqueue_jobs([job], connection=conn)
            params = {"name": name, "job_id": result.id, "run_at": now, "outcome": "run_now"}
            conn.execute(sql["record_job"], params)
            return TickResult(name, True, TickOutcome.RUN_NOW, result.id, result.created)

        return self._run(work)
