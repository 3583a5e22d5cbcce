"""Run an App's jobs in the test's own process, through a real worker (claims, fencing,
retries, results written as in production), until none is left to run.

Why not an "eager" mode that runs a job inside ``enqueue()``: it would run the handler
before the caller's transaction commits (or when it rolls back), skip the JSON round trip
of the arguments and the result, and fold retries into the caller's stack. Draining after
the fact keeps all three honest; see docs/testing.md.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING

from ..errors import ConfigurationError, DrainIncomplete
from ..jobs import Job, JobFilter
from ..maintenance import Scheduler
from ..validate import is_number, is_whole
from ..worker import Worker
from ..worker.events import EventLog, WorkerEvent
from .clock import Clock, _epoch
from .report import Attempt, DrainReport

if TYPE_CHECKING:
    from ..app import App

log = logging.getLogger("sqljobs.testing")

POLL_INTERVAL = 0.02
"""The drain's worker looks for due jobs at least this often (seconds), so a job made due
by moving the clock is claimed at once whatever told the worker."""

RATE_HELD_AFTER = 3 * POLL_INTERVAL
"""Seconds a rate-limited job may stay due and unclaimed before the drain, under a
controllable clock, takes it as held by its rate window and moves the clock on."""

_PAGE = 1000
_PAGES = 10  # at most 10,000 open jobs looked at: a test queue, not a production one


def run_until_empty(
    app: App,
    *,
    clock: Clock | None = None,
    until: float | datetime | None = None,
    max_jobs: int = 1000,
    timeout: float = 10.0,
    queues: Sequence[str] | None = None,
    concurrency: int = 1,
) -> DrainReport:
    """Run every job of ``app``'s tasks that is due, and what those enqueue, until none is
    left; return a :class:`DrainReport`.

    With a controllable :class:`Clock` (``clock``, or the App's own), a job due later (a
    delay, a retry's backoff) moves the clock to its ``run_at`` and runs: no sleeping.
    ``until`` (Unix seconds or an aware datetime) also steps the clock through every
    schedule tick up to it, then leaves it there. Without a controllable clock the drain
    waits in real time for jobs due within ``timeout`` and leaves later ones in
    ``report.pending``, as it leaves the jobs of paused queues. Due schedule ticks fire
    first, as a worker's scheduler would. A job held by its task's rate limit moves the
    clock on by the rate's window.

    Raises :class:`DrainIncomplete` after ``timeout`` seconds or ``max_jobs`` attempts,
    and ``ConfigurationError`` for a clock on a PostgreSQL App told to keep the server's
    clock (``backend_options={"server_clock": True}``: its claims read the server's
    ``now()``, which no test clock moves)."""
    clock = _controllable(app, clock)
    if not is_whole(max_jobs, 1):
        raise ConfigurationError(
            f"run_until_empty(max_jobs={max_jobs!r}): give a whole number >= 1"
        )
    if not (is_number(timeout, finite=False) and timeout > 0):
        raise ConfigurationError(f"run_until_empty(timeout={timeout!r}): give seconds > 0")
    limit = None if until is None else _epoch(until, "run_until_empty(until=...)")
    if limit is not None and clock is None:
        raise ConfigurationError(
            "run_until_empty(until=...) moves a controllable clock: build the App with "
            "clock=sqljobs.testing.Clock()"
        )
    drain = _Drain(app, clock, limit, max_jobs, timeout, queues, concurrency)
    result = drain.run()
    log.info(
        "run_until_empty: %d attempts, %d jobs done, %d dead, %d left pending; clock moved %.3f s",
        len(result.attempts), result.done, result.dead, len(result.pending), result.advanced,
    )  # fmt: skip
    return result


class _Drain:
    """One drain: a worker stepped in this thread, the schedule ticks fired between its
    rounds, and the clock moved to what falls due next."""

    def __init__(
        self,
        app: App,
        clock: Clock | None,
        until: float | None,
        max_jobs: int,
        timeout: float,
        queues: Sequence[str] | None,
        concurrency: int,
    ) -> None:
        self.app, self.clock, self.until, self.max_jobs = app, clock, until, max_jobs
        self.timeout = timeout
        self.queues = tuple(queues) if queues is not None else None
        self.concurrency = concurrency
        self.names = set(app.tasks)
        self.events = EventLog()  # one for every worker of the drain: the report reads it
        self.scheduler = Scheduler(app, app.backend)
        self.began_at = app.clock()
        self.deadline = time.monotonic() + timeout
        self.horizon = 0.0  # without a clock: the latest run_at it waits for in real time
        self.held_since: float | None = None  # since when only rate-limited jobs were due

    def run(self) -> DrainReport:
        """Work in rounds of one worker each. A round ends when nothing is left; hooks
        (``app.on``) are told on the worker's hook thread, which its close waits for, so
        a job a hook enqueued shows only then and takes another round."""
        while True:
            before = {j.id for j in self.claimable()}
            self.round()
            if not self.app.hooks.for_workers:
                break
            if not {j.id for j in self.claimable()} - before:
                break
        return self.report()

    def round(self) -> None:
        worker = Worker(
            self.app,
            concurrency=self.concurrency,
            queues=self.queues,
            install_signal_handlers=False,
            on_event=self.events,
            poll_interval=POLL_INTERVAL,
            scheduler=False,  # the drain fires ticks itself, after each move of the clock
        )
        with worker:
            while True:
                ticks = self.scheduler.run_once()
                if ticks.made_work:
                    self.app._wakeups.announce()
                left = self.deadline - time.monotonic()
                try:
                    if left <= 0:
                        raise TimeoutError
                    worker.run_until(lambda: self.idle(worker), timeout=left)
                except TimeoutError:
                    raise DrainIncomplete(
                        f"run_until_empty: jobs still due or running after {self.timeout:g} s",
                        self.report(),
                    ) from None
                if self.attempts >= self.max_jobs:
                    raise DrainIncomplete(
                        f"run_until_empty: stopped after max_jobs={self.max_jobs} attempts "
                        "(does a task enqueue itself?)",
                        self.report(),
                    )
                if not self.next_time(ticks.next_run_at) and self.settled(worker):
                    return
                worker.request_heartbeat()  # its last_seen and leases, at the new time

    def next_time(self, next_tick: float | None) -> bool:
        """Move the clock to what falls due next: a job, a parked workflow's wake-up, and
        with ``until`` a schedule's tick (without a clock: pick the next job to wait for in
        real time); False when nothing more is within reach."""
        waiting = self.claimable()
        later = [j.run_at for j in waiting]
        next_wake = self.app.backend.next_wake()  # (read now: the round may have parked one)
        if next_wake is not None:
            if next_wake <= self.app.clock():
                return True  # due already: the next pass of the scheduler wakes it
            later.append(next_wake)
        clock, until = self.clock, self.until
        if clock is None:
            reach = self.app.clock() + self.deadline - time.monotonic()
            soon = [at for at in later if self.horizon < at <= reach]
            if soon:
                self.horizon = min(soon)  # the worker sleeps until it is due
            return bool(soon)
        now = clock()
        windows = [j.rate_window for j in waiting if j.run_at <= now and j.rate_window]
        if windows:  # due but held by a rate limit: let its window pass
            self.held_since = None
            clock.advance(min(windows))
            return True
        if until is not None and next_tick is not None:
            later.append(next_tick)
        upcoming = [at for at in later if at > now and (until is None or at <= until)]
        if upcoming:
            clock.set(min(upcoming))
        elif until is not None and until > now:
            clock.set(until)
        else:
            return False
        return True

    def settled(self, worker: Worker) -> bool:
        """Idle still after one more pass of the worker: what a pass in flight at the
        first look (an outcome on its way, a claim coming back) would show by then."""
        worker.run_once()
        return self.idle(worker) and not self.claimable_now()

    def claimable_now(self) -> bool:
        now = self.app.clock()
        return any(j.run_at <= now for j in self.claimable() if j.rate_max is None)

    def idle(self, worker: Worker) -> bool:
        """The worker settled (each attempt it began written and reported), nothing
        running and nothing due (or enough attempts made)."""
        if self.attempts >= self.max_jobs:
            return True
        # a round trip in flight (on PostgreSQL, on a lane's thread) may claim a job or
        # write an outcome between the two reads below: read only when none is; and an
        # outcome not yet written leaves no trace the report could read
        if not worker.settled or self.open("running"):
            return False
        due_by = max(self.app.clock(), self.horizon)
        due = [j for j in self.claimable() if j.run_at <= due_by]
        if not due:
            return True
        if self.clock is None or any(j.rate_max is None for j in due):
            self.held_since = None
            return False
        # only rate-limited jobs are due: if the worker leaves them for a few of its polls,
        # their window is what holds them, and it passes only when the clock moves
        if self.held_since is None:
            self.held_since = time.monotonic()
        return time.monotonic() - self.held_since >= RATE_HELD_AFTER

    @property
    def attempts(self) -> int:
        return len(self.events.of("finished"))

    def claimable(self) -> list[Job]:
        """Pending jobs a worker here could take: not in a paused queue (those wait,
        and are reported, rather than time the drain out)."""
        paused = set(self.app.paused_queues())
        return [j for j in self.open("pending") if j.queue not in paused]

    def open(self, state: str) -> list[Job]:
        """The app's jobs in ``state`` of tasks it registered (a worker here would never
        claim another's), in the drain's queues."""
        found: list[Job] = []
        before: int | None = None
        for _ in range(_PAGES):
            page = self.app.find_jobs(JobFilter(state=state), before=before, limit=_PAGE)
            found += [j for j in page.jobs if j.task in self.names and self.serves(j.queue)]
            if page.next_before is None:
                break
            before = page.next_before
        return found

    def serves(self, queue: str) -> bool:
        return self.queues is None or queue in self.queues

    def report(self) -> DrainReport:
        advanced = 0.0 if self.clock is None else self.clock() - self.began_at
        attempts = tuple(_attempt(e) for e in self.events.of("finished"))
        return DrainReport(attempts, tuple(self.open("pending")), advanced)


PG_CLOCK = (
    "a controllable clock cannot drive a PostgreSQL App that keeps the server's clock "
    "(backend_options={'server_clock': True}): its claims compare run_at with the server's "
    "now(), and retries count their backoff from it, so moving a test clock would never "
    "make a delayed job or a retry due. Leave server_clock out (an App on a test clock "
    "reads that clock in every statement), or drop the clock: run_until_empty() then "
    "waits in real time for jobs due within its timeout"
)


def _controllable(app: App, clock: Clock | None) -> Clock | None:
    """The test clock to move (given, or the App's), refused where it cannot work."""
    if clock is None:
        clock = app.clock if isinstance(app.clock, Clock) else None
    elif not isinstance(clock, Clock):
        raise ConfigurationError(
            f"run_until_empty(clock={clock!r}): give a sqljobs.testing.Clock, or leave it out"
        )
    elif app.clock is not clock:
        raise ConfigurationError(
            f"run_until_empty(clock=...): {app!r} reads its time from {app.clock!r}, not from "
            "this clock; build it with App(url, clock=clock) or sqljobs.testing.bind(app, url, "
            "clock=clock)"
        )
    if clock is not None and getattr(app.backend, "server_clock", False):
        raise ConfigurationError(f"run_until_empty on {app!r}: {PG_CLOCK}")
    return clock


def _attempt(event: WorkerEvent) -> Attempt:
    return Attempt(event.job_id, event.task, event.attempt, event.state or "", event.detail)
