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

from ..browse import JobFilter
from ..errors import ConfigurationError, DrainIncomplete
from ..jobs import Job
from ..maintenance import Scheduler
from ..url import parse_url
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
    and ``ConfigurationError`` for a clock on PostgreSQL (its claims read the server's
    ``now()``, which no test clock moves)."""
    clock = _controllable(app, clock)
    if isinstance(max_jobs, bool) or not isinstance(max_jobs, int) or max_jobs < 1:
        raise ConfigurationError(
            f"run_until_empty(max_jobs={max_jobs!r}): give a whole number >= 1"
        )
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0:
        raise ConfigurationError(f"run_until_empty(timeout={timeout!r}): give seconds > 0")
    limit = None if until is None else _epoch(until, "run_until_empty(until=...)")
    if limit is not None and clock is None:
        raise ConfigurationError(
            "run_until_empty(until=...) moves a controllable clock: build the App with "
            "clock=sqljobs.testing.Clock() (SQLite only)"
        )
    names = set(app.tasks)
    wanted = set(queues) if queues is not None else None
    events = EventLog()
    worker = Worker(
        app,
        concurrency=concurrency,
        queues=tuple(queues) if queues is not None else None,
        install_signal_handlers=False,
        on_event=events,
        poll_interval=POLL_INTERVAL,
        scheduler=False,  # the drain fires ticks itself, after each move of the clock
    )
    scheduler = Scheduler(app, app.backend)
    began_at = app.clock()
    deadline = time.monotonic() + timeout
    horizon = 0.0  # without a clock: the latest run_at the drain waits for in real time
    held_since: float | None = None  # since when only rate-limited jobs were due

    def report() -> DrainReport:
        pending = _open(app, "pending", names, wanted)
        advanced = 0.0 if clock is None else clock() - began_at
        return DrainReport(_attempts(events), tuple(pending), advanced)

    def claimable() -> list[Job]:
        """Pending jobs a worker here could take: not in a paused queue (those wait,
        and are reported, rather than time the drain out)."""
        paused = set(app.paused_queues())
        return [j for j in _open(app, "pending", names, wanted) if j.queue not in paused]

    def idle() -> bool:
        nonlocal held_since
        if len(events.of("finished")) >= max_jobs:
            return True
        # a round trip in flight (on PostgreSQL, on a lane's thread) may claim a job or
        # write an outcome between the two reads below: read only when none is
        if worker.inflight or worker.lanes_busy or _open(app, "running", names, wanted):
            return False
        due_by = max(app.clock(), horizon)
        due = [j for j in claimable() if j.run_at <= due_by]
        if not due:
            return True
        if clock is None or any(j.rate_max is None for j in due):
            held_since = None
            return False
        # only rate-limited jobs are due: if the worker leaves them for a few of its polls,
        # their window is what holds them, and it passes only when the clock moves (below)
        if held_since is None:
            held_since = time.monotonic()
        return time.monotonic() - held_since >= RATE_HELD_AFTER

    with worker:
        while True:
            ticks = scheduler.run_once()
            if ticks.enqueued:
                app.wake_local_workers()
            left = deadline - time.monotonic()
            try:
                if left <= 0:
                    raise TimeoutError
                worker.run_until(idle, timeout=left)
            except TimeoutError:
                raise DrainIncomplete(
                    f"run_until_empty: jobs still due or running after {timeout:g} s", report()
                ) from None
            if len(events.of("finished")) >= max_jobs:
                raise DrainIncomplete(
                    f"run_until_empty: stopped after max_jobs={max_jobs} attempts "
                    "(does a task enqueue itself?)",
                    report(),
                )
            waiting = claimable()
            later = [j.run_at for j in waiting]
            if clock is not None:
                now = clock()
                windows = [j.rate_window for j in waiting if j.run_at <= now and j.rate_window]
                if windows:  # due but held by a rate limit: let its window pass
                    held_since = None
                    clock.advance(min(windows))
                    worker.request_heartbeat()
                    continue
                if limit is not None and ticks.next_run_at is not None:
                    later.append(ticks.next_run_at)
                upcoming = [at for at in later if at > now and (limit is None or at <= limit)]
                if upcoming:
                    clock.set(min(upcoming))
                elif limit is not None and limit > now:
                    clock.set(limit)
                else:
                    break
                worker.request_heartbeat()  # its last_seen and leases, at the new time
                continue
            soon = [at for at in later if horizon < at <= app.clock() + deadline - time.monotonic()]
            if not soon:
                break
            horizon = min(soon)  # wait for it in real time (the worker sleeps until due)
    result = report()
    log.info(
        "run_until_empty: %d attempts, %d jobs done, %d dead, %d left pending; clock moved %.3f s",
        len(result.attempts), result.done, result.dead, len(result.pending), result.advanced,
    )  # fmt: skip
    return result


PG_CLOCK = (
    "a controllable clock cannot drive PostgreSQL: its claims compare run_at with the "
    "server's now(), and retries count their backoff from it, so moving a test clock "
    "would never make a delayed job or a retry due. Run clock-driven tests on SQLite "
    "(the sqljobs_url fixture's default), or drop the clock: run_until_empty() then waits "
    "in real time for jobs due within its timeout (Retry(base=0) retries at once)"
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
    if clock is not None and parse_url(app.url).scheme != "sqlite":
        raise ConfigurationError(f"run_until_empty on {app!r}: {PG_CLOCK}")
    return clock


def _open(app: App, state: str, names: set[str], queues: set[str] | None) -> list[Job]:
    """The app's jobs in ``state`` (pending or running) of tasks it registered (a worker
    here would never claim another's)."""
    found: list[Job] = []
    before: int | None = None
    for _ in range(_PAGES):
        page = app.find_jobs(JobFilter(state=state), before=before, limit=_PAGE)
        found += [j for j in page.jobs if j.task in names and (queues is None or j.queue in queues)]
        if page.next_before is None:
            break
        before = page.next_before
    return found


def _attempts(events: EventLog) -> tuple[Attempt, ...]:
    return tuple(_attempt(e) for e in events.of("finished"))


def _attempt(event: WorkerEvent) -> Attempt:
    return Attempt(event.job_id, event.task, event.attempt, event.state or "", event.detail)
