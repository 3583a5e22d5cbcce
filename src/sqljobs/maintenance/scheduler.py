"""The scheduler: every worker runs it, so there is no singleton "beat" process. It fires
the timers kept in the database: schedule ticks, and the wake-ups of parked workflows
(a sleep's end, a wait's timeout), which it makes due.

Each pass reads the due schedules and fires each tick with one conditional update of the
schedule row, in the same transaction as the job it enqueues (keyed
``schedule:<name>:<tick>``). Replicas that read the same tick race for that update; one
wins and the others find the row moved on, so N replicas give one run per tick. The
timer only enqueues; workers run the jobs.

The next tick is computed from the tick that fired, never from "now", so a late pass
does not make a schedule drift. A tick later than ``grace`` seconds counts as missed
(the scheduler was down): ``misfire="catch_up_once"`` enqueues one run for all missed
ticks and ``"skip"`` none, and either way the schedule resumes at the next future tick.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from ..backends.base import Backend
from ..enqueue import schedule_job
from ..errors import SqljobsError
from ..humanize import iso_local
from ..rollup import Meter
from ..schedules import ScheduleState, Tick, TickOutcome, TickResult, tick_key

if TYPE_CHECKING:
    from ..app import App

log = logging.getLogger("sqljobs.scheduler")

MISFIRE_GRACE = 2.0
"""Seconds a tick may be late and still run as itself; later ones are missed ticks. More
than a busy pass's delay or a second of clock skew between replicas, far less than the
downtime the misfire policies are about."""

RETRY_BROKEN = 60.0
"""Seconds before a schedule whose next tick cannot be computed is looked at again."""

WAKE_RETRY = 1.0
"""Seconds before a pass tries again to wake a workflow that is due but could not be
woken (another transaction holds its row)."""

_MAX_STEPS = 1000  # ticks one schedule may fire in one pass (a backlog within the grace)


@dataclass(frozen=True)
class SchedulerPass:
    """What one ``run_once`` did, and when the next schedule and the next parked
    workflow fall due (wall clock)."""

    fired: list[TickResult]
    next_run_at: float | None
    woken: int = 0
    """Parked workflows made due (a sleep's end, a wait's timeout)."""
    next_wake_at: float | None = None

    @property
    def enqueued(self) -> int:
        """Jobs this pass created."""
        return sum(1 for r in self.fired if r.created)

    @property
    def made_work(self) -> bool:
        """Whether this pass made jobs due (ticks enqueued, workflows woken)."""
        return bool(self.woken) or any(r.created for r in self.fired)

    def wait(self, now: float, longest: float) -> float:
        """Seconds until the next pass: when the next tick or wake-up falls due, but at
        least every ``longest`` seconds, to notice schedules added or changed elsewhere."""
        times = [t for t in (self.next_run_at, self.next_wake_at) if t is not None]
        if not times:
            return longest
        return max(0.0, min(longest, min(times) - now))


class Scheduler:
    """Fires due schedule ticks; ``run_once`` is one pass (workers call it on a timer,
    tests call it directly with a frozen clock). ``app`` gives the definitions and the
    tasks; ``backend`` is the connection it fires on (a worker passes its own)."""

    def __init__(
        self,
        app: App,
        backend: Backend,
        *,
        grace: float = MISFIRE_GRACE,
        batch: int = 100,
        clock: Callable[[], float] | None = None,
        meter: Meter | None = None,
    ) -> None:
        self.app = app
        self.meter = meter  # given: how late each tick enqueued its job is counted there
        self.backend = backend
        self.grace = grace
        self.batch = batch
        self.clock = clock or app.clock
        self.passes = 0  # how many run_once calls finished (tests wait on it)
        self._synced = False

    def sync(self) -> None:
        """Write the app's ``@app.periodic`` definitions to the schedules table. An
        unchanged definition keeps its place, so every replica may do this at start; it
        is not written at all, so a role that may only read (docs/security.md) can list
        the schedules of an App that defines some."""
        now = self.clock()
        for schedule in self.app.periodic_schedules.values():
            stored = self.backend.get_schedule(schedule.name)
            if stored is None or stored.schedule != schedule:
                self.backend.save_schedule(schedule, schedule.first_after(now))
        self._synced = True

    def run_once(self) -> SchedulerPass:
        """Fire every due tick now; return what was fired and when the next one is due."""
        if not self._synced:
            self.sync()
        now = self.clock()
        fired: list[TickResult] = []
        upcoming: list[float] = []
        for _ in range(10):  # batches of due schedules; one still due waits for a pass
            rows = self.backend.upcoming_schedules(self.batch)
            due = [r for r in rows if r.next_run_at <= now]
            upcoming += [r.next_run_at for r in rows if r.next_run_at > now]
            for state in due:
                results, next_run_at = self._fire(state, now)
                fired += results
                upcoming.append(next_run_at)
            if len(due) < self.batch:
                break
        woken = self.backend.wake_workflows(now)
        if woken:
            log.info("woke %d parked workflow(s) whose time had come", woken)
        next_wake = self.backend.next_wake()
        if next_wake is not None and next_wake <= now and not woken:
            next_wake = now + WAKE_RETRY  # its row is locked by a transaction: not a spin
        self.passes += 1
        return SchedulerPass(fired, min(upcoming, default=None), woken, next_wake)

    def _fire(self, state: ScheduleState, now: float) -> tuple[list[TickResult], float]:
        """Fire one schedule's due ticks, one transaction each, until it is in the future
        or another replica has it; return them and when the schedule falls due next."""
        results: list[TickResult] = []
        for _ in range(_MAX_STEPS):
            tick = self.plan(state, now)
            result = self.backend.fire_schedule(tick)
            if not result.claimed or result.next_run_at is None:
                return results, tick.next_run_at  # the winner moved it about there
            results.append(result)
            _log(result, tick)
            if self.meter is not None and tick.job is not None and result.created:
                at = self.clock()
                self.meter.schedule_lag(tick.job.queue, tick.job.task, at, at - tick.tick_at)
            if result.next_run_at > now:
                break
            state = replace(state, next_run_at=result.next_run_at)
        return results, results[-1].next_run_at or now

    def plan(self, state: ScheduleState, now: float) -> Tick:
        """What firing the schedule's due tick should do, decided from the row as read."""
        schedule, due = state.schedule, state.next_run_at
        try:
            if now - due <= self.grace:
                next_run_at, outcome = schedule.next_after(due), TickOutcome.ENQUEUED
            else:
                next_run_at = schedule.next_on_grid_after(due, now)
                skip = schedule.misfire == "skip"
                outcome = TickOutcome.SKIPPED_MISFIRE if skip else TickOutcome.CAUGHT_UP
        except (SqljobsError, ValueError) as exc:  # a row this host cannot read (bad tz...)
            return Tick(state.name, due, now + RETRY_BROKEN, due, None, _failed(exc))
        if outcome is TickOutcome.SKIPPED_MISFIRE:
            return Tick(state.name, due, next_run_at, due, None, outcome)
        try:
            job = schedule_job(self.app, schedule, tick_key(schedule.name, due), now)
        except SqljobsError as exc:  # e.g. kwargs the registered task does not take
            return Tick(state.name, due, next_run_at, due, None, _failed(exc))
        return Tick(state.name, due, next_run_at, due, job, outcome, schedule.overlap == "skip")


def _failed(exc: Exception) -> str:
    return f"{TickOutcome.FAILED.value}: {exc}"


def _log(result: TickResult, tick: Tick) -> None:
    outcome = result.outcome or ""
    if outcome.startswith(TickOutcome.FAILED.value):
        log.warning("schedule %s: %s", result.name, outcome)
    elif outcome in (TickOutcome.CAUGHT_UP, TickOutcome.SKIPPED_MISFIRE):
        log.warning(
            "schedule %s: missed ticks since %s (no worker ran it then): %s",
            result.name, iso_local(tick.tick_at), outcome,
        )  # fmt: skip
    else:
        log.debug("schedule %s: %s (job %s)", result.name, outcome, result.job_id)
