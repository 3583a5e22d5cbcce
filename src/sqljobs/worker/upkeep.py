"""The upkeep, on timers: the heartbeat (one statement renews every held lease, and finds
the jobs cancelled meanwhile), progress reports, timeouts, the reaper, the pruner and the
scheduler; and what becomes of a handler that is given up."""

from __future__ import annotations

import collections
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..backends.base import Backend
from ..context import JobContext
from ..jobs import HeldJob
from ..maintenance import Pruner, Reaper, Scheduler
from ..rollup import AttemptOutcome, Meter
from .completer import Completer
from .config import WorkerConfig
from .events import Emitter
from .execute import Running, failure
from .holding import Holding
from .log_lines import failed_attempt, job_fields
from .metering import sample, tally
from .shutdown import StopState

if TYPE_CHECKING:
    from ..app import App

log = logging.getLogger("sqljobs.worker")

PROGRESS_INTERVAL = 0.25
"""Seconds between two writes of handlers' ctx.progress() reports (one statement each)."""
CLOCK_JUMP_MIN = 0.5
"""A wall clock that moved this much more (or less) than the monotonic clock between two
passes jumped (at least; the threshold is the heartbeat interval when that is longer: a
smaller jump cannot expire a lease renewed on time)."""
SCHEDULE_ANSWER_HOLDS = 2
"""How many poll intervals a next_due answer about the schedules stands in for the
scheduler's own fallback pass. An idle worker asks every poll interval, so while it idles
its scheduler reads the schedule table only when a tick falls due or another connection
commits; a busy worker (full claims, no such question) is back on its own fallback pass
within this many intervals."""


class ProgressReports:
    """The jobs with a ``ctx.progress()`` report not yet written: handler threads add to
    it, the upkeep flushes it at most every ``PROGRESS_INTERVAL``."""

    def __init__(self, wake: threading.Event) -> None:
        self._wake = wake
        self._lock = threading.Lock()
        self._dirty: set[int] = set()
        self.signalled = False  # the coordinator was woken for them

    def reported(self, ctx: JobContext) -> None:
        """Called by a handler's thread (``ctx.progress``): the first report since the
        last flush wakes the coordinator."""
        with self._lock:
            self._dirty.add(ctx.job_id)
            first, self.signalled = not self.signalled, True
        if first:
            self._wake.set()

    def take(self) -> set[int]:
        with self._lock:
            dirty, self._dirty = self._dirty, set()
            self.signalled = False
        return dirty


class Upkeep:
    """Runs what is due on each pass. ``claim_soon`` and ``count_peers`` are the
    producer's (a reaped job or a scheduled tick may be claimable; a peer changes whether
    limited jobs may be buffered); ``orphaned`` stops the worker when its supervisor died;
    ``stuck`` has it replaced when a cancelled handler will not stop."""

    def __init__(
        self,
        *,
        app: App,
        config: WorkerConfig,
        worker_id: str,
        holding: Holding,
        completer: Completer,
        progress: ProgressReports,
        stop: StopState,
        counters: collections.Counter[str],
        meter: Meter,
        wake: threading.Event,
        emit: Emitter,
        claim_soon: Callable[[float | None], None],
        count_peers: Callable[[Backend], None],
        orphaned: Callable[[], None],
        stuck: Callable[[], None],
    ) -> None:
        self.app = app
        self.config = config
        self.hard_limits = False  # a supervisor kills a handler past its hard_timeout
        self.id = worker_id
        self._held = holding
        self.inflight = holding.inflight
        self._completer = completer
        self._progress = progress
        self._stop = stop
        self.counters = counters
        self._meter = meter
        self._wake = wake
        self._emit = emit
        self._claim_soon = claim_soon
        self._count_peers = count_peers
        self._orphaned = orphaned
        self._stuck = stuck
        self._leases = [task.lease for task in app.tasks.values()]
        self.heartbeat_requested = False
        self.scheduler: Scheduler | None = None
        self._reaper: Reaper | None = None
        self._pruner: Pruner | None = None
        # monotonic seconds, set by start()
        self.heartbeat_interval = 0.0
        self.next_heartbeat = self.next_reap = self.next_prune = 0.0
        self.next_schedule = self.schedule_last = self.next_progress = 0.0
        self.schedule_marker: int | None = None  # the change counter at the last pass
        self.wall: float | None = None  # the App's clock at the last pass (to notice jumps)
        self.wall_at = 0.0  # and the monotonic time it was read

    def start(self, backend: Backend, heartbeat_interval: float) -> None:
        """Build the maintenance services on ``backend`` and set the timers: the first
        heartbeat one interval on (registering was the first), the reaper and scheduler
        at once. The scheduler passes at its next tick, when another connection committed
        (at most every ``schedule_interval``, since a schedule may have been added) and
        every poll interval."""
        cfg = self.config
        self._reaper = Reaper(backend, cfg.max_crashes, self._meter)
        self._pruner = Pruner(backend, self.app.retention)
        self.scheduler = (
            Scheduler(self.app, backend, grace=cfg.misfire_grace, meter=self._meter)
            if cfg.scheduler
            else None
        )
        now = time.monotonic()
        self.heartbeat_interval = heartbeat_interval
        self.next_heartbeat = now + heartbeat_interval
        self.next_reap = now
        self.next_prune = now + cfg.prune_interval
        self.next_schedule = self.schedule_last = now
        self.next_progress = self.wall_at = now

    def request_heartbeat(self) -> None:
        self.heartbeat_requested = True
        self._wake.set()

    def schedules_read(self, now: float, wall: float, at: float | None, poll: float) -> None:
        """next_due read, at ``wall`` (the App's clock) and ``now`` (monotonic), that the
        earliest schedule falls due at ``at`` (None: there is none): the scheduler's next
        pass is then, or after ``SCHEDULE_ANSWER_HOLDS`` poll intervals, not sooner. (An
        answer read before a concurrent pass can only be early: one spare pass. A schedule
        saved afterwards is announced, and the marker brings the pass forward.)"""
        hold = SCHEDULE_ANSWER_HOLDS * poll
        self.next_schedule = now + (hold if at is None else min(hold, max(0.0, at - wall)))

    def maintain(self, backend: Backend, now: float, marker: int | None) -> None:
        """Heartbeat, reaper, pruner and scheduler, each on its own timer; ``marker`` is
        the database's change counter as the producer last read it."""
        cfg = self.config
        if cfg.supervisor_pid is not None and os.getppid() != cfg.supervisor_pid:
            log.error("worker %s: its supervisor died; stopping", self.id)
            self._orphaned()
        self._notice_clock_jump(now)
        if now >= self.next_heartbeat or self.heartbeat_requested:
            self.heartbeat_requested = False
            self._heartbeat(backend)
            self.next_heartbeat = now + self.heartbeat_interval
        if self._progress.signalled and now >= self.next_progress:
            self._flush_progress(backend)
            self.next_progress = now + PROGRESS_INTERVAL
        if self._held.abandoned:
            self._check_cancelled_handlers(now)
        if self._completer.free_slots(backend):  # a slot held for a handler that ran on
            self._claim_soon(None)
        if now >= self.next_reap:
            assert self._reaper is not None
            if self._reaper.run_once():
                self._claim_soon(now)
            self.next_reap = now + (cfg.reap_interval or self.heartbeat_interval)
        if now >= self.next_prune:
            assert self._pruner is not None
            self._pruner.run_once()
            # behind a steady stream: again in a second, not a whole interval later
            behind = self._pruner.behind
            self.next_prune = now + (min(1.0, cfg.prune_interval) if behind else cfg.prune_interval)
        if self.scheduler is not None and not self._stop.stopping:
            if marker != self.schedule_marker:  # others committed: a schedule may be new
                self.next_schedule = min(self.next_schedule,
                                         self.schedule_last + cfg.schedule_interval)  # fmt: skip
            if now >= self.next_schedule:
                self.schedule_marker, self.schedule_last = marker, now
                ticks = self.scheduler.run_once()
                if ticks.made_work:
                    self._claim_soon(None)
                # next: when the next tick falls due, or the fallback poll
                self.next_schedule = now + ticks.wait(self.app.clock(), cfg.poll_interval)

    def wait(self, now: float, marker: int | None) -> float:
        """Seconds until the upkeep needs a pass: its timers, a timeout, a cancelled
        handler's grace running out, a heartbeat asked for (0)."""
        timers = [self.next_heartbeat - now, self.next_reap - now, self.next_prune - now]
        if self.scheduler is not None and not self._stop.stopping:
            timers.append(self.next_schedule - now)
            if marker != self.schedule_marker:
                timers.append(self.schedule_last + self.config.schedule_interval - now)
        for run in self.inflight.values():
            if run.deadline is not None:
                timers.append(run.deadline - now)
        if self._progress.signalled:
            timers.append(self.next_progress - now)
        grace = self.config.cancel_grace
        for run in self._held.abandoned:  # a cancelled handler's grace runs out
            if run.cancelled_at is not None and not run.overdue and run.begun is not None:
                timers.append(run.cancelled_at + grace - now)
        if self.heartbeat_requested:
            timers.append(0.0)
        return min(timers)

    def _notice_clock_jump(self, now: float) -> None:
        """Leases, worker liveness and schedules are wall-clock times (the App's clock;
        on SQLite every process of the host reads the same one). When it steps forward
        (NTP, a VM resumed), every lease looks expired and every worker dead until it
        heartbeats again: so heartbeat at once, and hold this worker's reaper for one
        lease, long enough for peers to renew theirs at the new time, instead of reaping
        healthy jobs as crashes. A step back only makes leases look longer: heartbeat at
        once, which renews them from the new time."""
        wall, (last_wall, last_now) = self.app.clock(), (self.wall, self.wall_at)
        self.wall, self.wall_at = wall, now
        if last_wall is None:
            return
        tolerance = max(CLOCK_JUMP_MIN, self.heartbeat_interval)
        moved = wall - last_wall
        jump = moved - (now - last_now)
        if moved >= -tolerance and jump <= tolerance:
            return  # (a frozen test clock does not move: not a jump back)
        self.heartbeat_requested = True
        hold = 0.0
        if jump > 0:
            hold = max([self.app.default_lease, *self._leases])
            self.next_reap = max(self.next_reap, now + hold)
        level = logging.WARNING if self.app.clock is time.time else logging.INFO
        log.log(
            level,
            "worker %s: the wall clock jumped %+.1f s; heartbeat now%s",
            self.id, jump if jump > 0 else moved,
            f", reaper held {hold:g} s so live workers renew their leases first" if hold else "",
        )  # fmt: skip

    def _heartbeat(self, backend: Backend) -> None:
        inflight, suspect = self.inflight, self._held.suspect
        held = [HeldJob(r.job.id, r.job.token) for r in inflight.values()]
        if suspect is not None:
            held.append(HeldJob(suspect.id, suspect.token))
        if not self.config.heartbeat:
            held = []
        # a job whose outcome waits to be written (the database was unreachable when its
        # handler returned) is still ours: renewed too, or the reaper, which runs after
        # this heartbeat, would take it back and its finished run would be run again
        waiting = self._completer.waiting()
        if not self.config.heartbeat:
            waiting = []
        renewed = backend.renew_leases(self.id, held + waiting)
        self.counters["heartbeats"] += 1
        keep = self._completer.kept_slots()
        if keep and self.config.heartbeat:  # handlers that ran on still hold their slots
            backend.hold_slots(keep, ())
        if self._meter.pending:  # what was tallied since the last heartbeat, one transaction
            self._meter.flush(backend)
        self._count_peers(backend)
        lost = [h.id for h in held if h.id not in renewed]
        cancelled = backend.cancelled_among(lost) if lost else set()
        for h in held:
            if h.id in cancelled and h.id in inflight:
                self._cancelled(inflight[h.id])
                continue
            suspect = self._held.suspect
            if h.id not in renewed and suspect is not None and h.id == suspect.id:
                self._held.suspect = None
                self.counters["leases_lost"] += 1
            if h.id not in renewed and h.id in inflight:
                run = inflight[h.id]
                if run.ctx.completing:
                    continue  # its own ctx.transaction() finished it: the result is coming
                self._held.close(run, abandon=True)
                self.counters["leases_lost"] += 1
                self._emit("lease_lost", run.job)
                log.warning(
                    "job %s (%s): lease lost on attempt %s; the handler is told to stop and "
                    "its result will be discarded",
                    h.id, run.job.task, run.job.attempt, extra=job_fields(run),
                )  # fmt: skip

    def _cancelled(self, run: Running) -> None:
        """Someone cancelled a job this worker holds: tell its handler (``ctx.cancelled``;
        an async task is cancelled) and let go of it. Its outcome, whenever the handler
        returns, is discarded: the job is ``cancelled`` in the database already."""
        run.ctx.cancelled = True
        run.cancelled_at = time.monotonic()
        started = run.begun is not None
        tally(
            self._meter, sample(run, run.cancelled_at), AttemptOutcome.CANCELLED, self.app.clock()
        )
        self._held.close(run, abandon=True)
        self._completer.hold_for_cancelled(run)
        self.counters["cancelled_running"] += 1
        self._emit("cancelled", run.job)
        log.info(
            "job %s (%s): cancelled %s; %s",
            run.job.id, run.job.task, "while running" if started else "before it started",
            "the handler is told to stop (ctx.cancelled) and its outcome will be discarded"
            if started else "it will not run",
            extra=job_fields(run),
        )  # fmt: skip

    def _check_cancelled_handlers(self, now: float) -> None:
        """A cancelled thread handler that runs on past ``cancel_grace``: said once; under a
        supervisor, this process drains its other jobs and exits to be replaced."""
        grace = self.config.cancel_grace
        for run in list(self._held.abandoned):
            if run.cancelled_at is None or run.overdue or now - run.cancelled_at < grace:
                continue
            if run.begun is None:  # buffered, never started: its thread will skip it
                continue
            run.overdue = True
            replace = self.config.supervisor_pid is not None
            log.error(
                "job %s (%s): its handler still runs %.1f s after the job was cancelled "
                "(it does not check ctx.cancelled); %s",
                run.job.id, run.job.task, now - run.cancelled_at,
                "this worker process drains its other jobs and is replaced to end it"
                if replace else "it keeps its slot until it returns; its outcome will be "
                "discarded (run with --processes to have such a process replaced)",
                extra=job_fields(run),
            )  # fmt: skip
            if replace and not self._stop.stopping:
                self._stuck()

    def _flush_progress(self, backend: Backend) -> None:
        """Write the latest ctx.progress() report of each job that has one, fenced, in
        one statement. A refused report means the job is no longer ours: the heartbeat
        that follows at once finds out why."""
        dirty = self._progress.take()
        reports = []
        for job_id in dirty:
            run = self.inflight.get(job_id)
            report = None if run is None or run.closed else run.ctx.take_progress()
            if run is not None and report is not None:
                reports.append((HeldJob(job_id, run.job.token), report))
        if not reports:
            return
        written = backend.save_progress(reports)
        self.counters["progress_writes"] += 1
        if any(held.id not in written for held, _ in reports):
            self.request_heartbeat()

    def expire_timeouts(self, now: float) -> None:
        """Give up the runs past their task's timeout: each fails as ``timed_out``. A
        thread handler with a ``hard_timeout`` under a supervisor is only asked (its
        ``ctx.timed_out`` set) and keeps its job until it ends or its process is killed,
        so that no retry runs beside it."""
        for run in [r for r in self.inflight.values() if r.deadline and now >= r.deadline]:
            run.ctx.timed_out = True
            hard = run.task.hard_timeout
            if hard is not None and self.hard_limits and not run.task.is_async:
                run.deadline = None  # asked once
                self.counters["timed_out"] += 1
                log.warning(
                    "job %s: past its timeout of %g s; asked to stop, its worker process "
                    "is killed at its hard time limit of %g s", run.job.id,
                    run.task.timeout, hard,
                )  # fmt: skip
                continue
            self._held.close(run, abandon=True)
            error = TimeoutError(f"timed out after {run.task.timeout:g} s")
            outcome = failure(run, error, self.app.clock(), outcome="timed_out")
            outcome = self._completer.timed_out(run, outcome, sample(run, now))
            self.counters["timed_out"] += 1
            self._emit("timed_out", run.job, outcome.state.value)
            failed_attempt(run, outcome)
