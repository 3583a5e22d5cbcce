"""Periodic schedules: what one is, what the database keeps of it, and one firing of it.

A schedule names a task, its keyword arguments and when to run it: a cron expression in a
time zone, or a fixed interval. Schedules live in one table, whether defined in code
(``@app.periodic``, written there when a worker starts) or at run time
(``app.schedule``). The scheduler in every worker fires due ticks; these records are the
vocabulary it shares with the backends. See :mod:`sqljobs.maintenance.scheduler`.
"""

from __future__ import annotations

import enum
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from . import payload
from .cron import check_cron, next_cron_tick, zone
from .errors import ConfigurationError
from .errors import ScheduleNotFound as ScheduleNotFound  # its home before errors.py
from .jobs import NewJob
from .validate import check_text, is_whole, seconds

if TYPE_CHECKING:
    from .tasks import Task

OVERLAP_POLICIES = ("allow", "skip")
MISFIRE_POLICIES = ("catch_up_once", "skip")


class TickOutcome(enum.StrEnum):
    """What the last firing of a schedule did (``last_outcome``; a failure adds its
    message after a colon)."""

    ENQUEUED = "enqueued"
    CAUGHT_UP = "caught_up"  # one run for the ticks missed while no scheduler ran
    SKIPPED_OVERLAP = "skipped_overlap"  # overlap="skip" and a run was pending or running
    SKIPPED_MISFIRE = "skipped_misfire"  # misfire="skip": missed ticks dropped
    RUN_NOW = "run_now"
    FAILED = "failed"


@dataclass(frozen=True)
class Schedule:
    """A schedule's definition. Build one with :func:`define_schedule`, which checks it."""

    name: str
    task: str
    kwargs: dict[str, Any] = field(default_factory=dict)
    cron: str | None = None
    every: float | None = None
    tz: str = "UTC"
    overlap: str = "allow"
    misfire: str = "catch_up_once"
    queue: str = "default"
    priority: int = 0
    source: str = "dynamic"  # "code" for @app.periodic

    @property
    def expression(self) -> str:
        """How the timing reads in a listing: ``0 3 * * * (Europe/Berlin)``, ``every 0.2 s``."""
        if self.cron is not None:
            return f"{self.cron} ({self.tz})"
        return f"every {self.every:g} s"

    def next_after(self, tick: float) -> float:
        """The tick after ``tick``: computed from the scheduled time, never from "now", so
        a late scheduler does not make the schedule drift."""
        if self.cron is not None:
            return next_cron_tick(self.cron, self.tz, tick)
        assert self.every is not None
        return tick + self.every

    def first_after(self, now: float) -> float:
        """The first tick of a schedule created (or resumed) at ``now``."""
        if self.cron is not None:
            return next_cron_tick(self.cron, self.tz, now)
        assert self.every is not None
        return now + self.every

    def next_on_grid_after(self, tick: float, now: float) -> float:
        """The first tick after ``now`` on the grid that ``tick`` belongs to: where a
        schedule resumes after missed ticks."""
        if self.cron is not None:
            return next_cron_tick(self.cron, self.tz, now)
        assert self.every is not None
        steps = math.floor((now - tick) / self.every) + 1
        return tick + max(1, steps) * self.every


def define_schedule(
    name: str,
    *,
    task: str | Task,
    kwargs: Mapping[str, Any] | None = None,
    cron: str | None = None,
    every: float | timedelta | None = None,
    tz: str = "UTC",
    overlap: str = "allow",
    misfire: str = "catch_up_once",
    queue: str = "default",
    priority: int = 0,
    source: str = "dynamic",
) -> Schedule:
    """Check a definition and return it; every mistake is a ConfigurationError (or a
    PayloadError for kwargs) here, at definition time, never in a worker later."""
    check_text(name, "schedule name")
    task_name = task if isinstance(task, str) else getattr(task, "name", None)
    if not isinstance(task_name, str) or not task_name:
        raise ConfigurationError(f"schedule {name!r}: task must be a task name, got {task!r}")
    check_text(task_name, f"schedule {name!r}: task name")
    cron, interval = check_timing(cron, every, tz, where=f"schedule {name!r}")
    check_policies(overlap, misfire, where=f"schedule {name!r}")
    if not isinstance(queue, str) or not queue:
        raise ConfigurationError(f"schedule {name!r}: queue must be a non-empty string")
    if not is_whole(priority):
        raise ConfigurationError(f"schedule {name!r}: priority must be an int, got {priority!r}")
    if kwargs is not None and not isinstance(kwargs, Mapping):
        raise ConfigurationError(
            f"schedule {name!r}: kwargs must be a dict, got {type(kwargs).__name__}"
        )
    arguments = dict(kwargs or {})
    if not all(isinstance(k, str) for k in arguments):
        raise ConfigurationError(f"schedule {name!r}: kwargs keys must be strings")
    payload.encode(task_name, (), arguments)  # not JSON: fails now, naming the argument
    return Schedule(
        name, task_name, arguments, cron, interval, tz, overlap, misfire, queue, priority, source
    )


EVERY_LIMIT = 100 * 365.25 * 86400
"""The longest interval of an ``every=`` schedule, in seconds."""


def check_timing(
    cron: str | None, every: float | timedelta | None, tz: str, where: str
) -> tuple[str | None, float | None]:
    """Exactly one of cron and every, a known time zone, a well-formed expression."""
    if (cron is None) == (every is None):
        raise ConfigurationError(
            f"{where}: give either cron= (e.g. '0 3 * * *') or every= (seconds or a "
            "timedelta), not both and not neither"
        )
    try:
        zone(tz)
        if cron is not None:
            return check_cron(cron, tz), None
        if isinstance(every, bool) or not isinstance(every, int | float | timedelta):
            raise ConfigurationError(f"every must be seconds or a timedelta, got {every!r}")
        interval = seconds(every, "every")
        if interval is None or interval <= 0 or not math.isfinite(interval):
            raise ConfigurationError(f"every must be > 0 seconds, got {every!r}")
        if interval > EVERY_LIMIT:  # its next run would be no time a database can hold
            raise ConfigurationError(
                f"every must be at most 100 years ({EVERY_LIMIT:,.0f} s), got {every!r}"
            )
        return None, interval
    except ConfigurationError as exc:
        raise ConfigurationError(f"{where}: {exc}") from exc.__cause__


def check_arguments(task: Task, schedule: Schedule) -> None:
    """The schedule's kwargs must suit the task's signature: a mismatch fails at definition,
    not in a worker at three in the morning."""
    try:
        task.signature.bind(**schedule.kwargs)
    except TypeError as exc:
        raise ConfigurationError(
            f"schedule {schedule.name!r}: kwargs {schedule.kwargs!r} do not fit task "
            f"{task.name}{task.signature}: {exc}"
        ) from None


def check_policies(overlap: str, misfire: str, where: str) -> None:
    if overlap not in OVERLAP_POLICIES:
        raise ConfigurationError(
            f"{where}: overlap must be 'allow' or 'skip' (no new run while one is pending "
            f"or running), got {overlap!r}"
        )
    if misfire not in MISFIRE_POLICIES:
        raise ConfigurationError(
            f"{where}: misfire must be 'catch_up_once' (one run for ticks missed during "
            f"downtime) or 'skip', got {misfire!r}"
        )


@dataclass(frozen=True)
class ScheduleState:
    """A schedule as stored: its definition, where it stands, and what its last tick did."""

    schedule: Schedule
    next_run_at: float
    last_run_at: float | None = None
    last_job_id: int | None = None
    last_outcome: str | None = None
    paused: bool = False
    updated_at: float | None = None

    @property
    def name(self) -> str:
        return self.schedule.name

    def to_dict(self) -> dict[str, Any]:
        s = self.schedule
        return {
            "name": s.name,
            "task": s.task,
            "kwargs": s.kwargs,
            "cron": s.cron,
            "every": s.every,
            "tz": s.tz,
            "expression": s.expression,
            "overlap": s.overlap,
            "misfire": s.misfire,
            "queue": s.queue,
            "priority": s.priority,
            "source": s.source,
            "next_run_at": self.next_run_at,
            "last_run_at": self.last_run_at,
            "last_job_id": self.last_job_id,
            "last_outcome": self.last_outcome,
            "paused": self.paused,
            "updated_at": self.updated_at,
        }


SCHEDULE_COLUMNS = (
    "name, task, kwargs, cron, every, tz, overlap, misfire, queue, priority, source, "
    "next_run_at, last_run_at, last_job_id, last_outcome, paused, updated_at"
)


def state_from_row(row: tuple[Any, ...] | Any) -> ScheduleState:
    """Build a ScheduleState from a row in ``SCHEDULE_COLUMNS`` order (both backends).

    No checks here: a row that no longer parses must still list, and fails only its
    own tick."""
    (name, task, kwargs, cron, every, tz, overlap, misfire, queue, priority, source) = row[:11]
    (next_run_at, last_run_at, last_job_id, last_outcome, paused, updated_at) = row[11:17]
    if isinstance(kwargs, str):
        kwargs = json.loads(kwargs)
    schedule = Schedule(
        name,
        task,
        dict(kwargs or {}),
        cron,
        None if every is None else float(every),
        tz,
        overlap,
        misfire,
        queue,
        int(priority),
        source,
    )
    return ScheduleState(
        schedule,
        float(next_run_at),
        None if last_run_at is None else float(last_run_at),
        last_job_id,
        last_outcome,
        bool(paused),
        None if updated_at is None else float(updated_at),
    )


@dataclass(frozen=True)
class Tick:
    """One firing of a schedule as the scheduler planned it from the row it read.

    The backend writes it only if the row still has ``expected`` as its ``next_run_at``
    (so of several replicas planning the same tick, one wins), and in the same
    transaction enqueues ``job``, unless ``skip_if_active`` and a run of the schedule is
    still pending or running. ``job`` is None when the tick only moves the schedule on.
    """

    name: str
    expected: float
    next_run_at: float
    tick_at: float
    job: NewJob | None
    outcome: str
    skip_if_active: bool = False


@dataclass(frozen=True)
class TickResult:
    """What a firing did: ``claimed`` is False when another replica had fired the tick (or
    the schedule changed) first; then nothing was written. ``next_run_at`` is where the
    schedule now stands, as stored (PostgreSQL keeps microseconds)."""

    name: str
    claimed: bool
    outcome: str | None = None
    job_id: int | None = None
    created: bool = False
    next_run_at: float | None = None


def tick_key(name: str, at: float) -> str:
    """The job key of a tick: ``schedule:<name>:<tick time, ISO 8601 UTC>``. Even two
    replicas that both believed they had the tick would enqueue one job."""
    return f"schedule:{name}:{datetime.fromtimestamp(at, UTC).isoformat()}"
