"""Upkeep on timers: heartbeat (one statement renews every held lease, and finds the
jobs cancelled meanwhile), progress reports, timeouts, the reaper, the pruner and the
scheduler; and what becomes of a handler that is given up."""

from __future__ import annotations

import logging
import os
import time
from dataclasses import replace

from ..backends.base import Backend
from ..jobs import HeldJob
from ..rollup import AttemptOutcome
from .execute import Running, failure
from .metering import sample, tally
from .report import failed_attempt, job_fields
from .state import WorkerState
from .timers import Timers

log = logging.getLogger("sqljobs.worker")

PROGRESS_INTERVAL = 0.25
"""Seconds between two writes of handlers' ctx.progress() reports (one statement each)."""
CLOCK_JUMP_MIN = 0.5
"""A wall clock that moved this much more (or less) than the monotonic clock between two
passes jumped (at least; the threshold is the heartbeat interval when that is longer: a
smaller jump cannot expire a lease renewed on time)."""


class Upkeep(WorkerState):
    def _maintain(self, backend: Backend, t: Timers, now: float) -> None:
        """Heartbeat, reaper, pruner and scheduler, each on its own timer."""
        cfg = self.config
        if cfg.supervisor_pid is not None and os.getppid() != cfg.supervisor_pid:
            log.error("worker %s: its supervisor died; stopping", self.id)
            self.stop()
        self._notice_clock_jump(t, now)
        if now >= t.heartbeat or self._heartbeat_requested:
            self._heartbeat_requested = False
            self._heartbeat(backend)
            t.heartbeat = now + t.heartbeat_interval
        if self._progress_signalled and now >= t.progress:
            self._flush_progress(backend)
            t.progress = now + PROGRESS_INTERVAL
        if self._abandoned:
            self._check_cancelled_handlers(now)
        if self._unhold:  # a slot held for a handler that ran on is free: say so now
            end, self._unhold = self._unhold, []
            try:
                backend.hold_slots((), end)
            except Exception:
                self._unhold = end + self._unhold
                raise
            t.want_claim = True
        if now >= t.reap:
            if self._reaper.run_once():
                t.want_claim, t.suspect_check = True, now
            t.reap = now + (cfg.reap_interval or t.heartbeat_interval)
        if now >= t.prune:
            self._pruner.run_once()
            # behind a steady stream: again in a second, not a whole interval later
            behind = self._pruner.behind
            t.prune = now + (min(1.0, cfg.prune_interval) if behind else cfg.prune_interval)
        if self._scheduler is not None and not self._stopping:
            if t.marker != t.schedule_marker:  # others committed: a schedule may be new
                t.schedule = min(t.schedule, t.schedule_last + cfg.schedule_interval)
            if now >= t.schedule:
                t.schedule_marker, t.schedule_last = t.marker, now
                ticks = self._scheduler.run_once()
                if ticks.enqueued:
                    t.want_claim = True
                # next: when the next tick falls due, or the fallback poll
                t.schedule = now + ticks.wait(self.app.clock(), cfg.poll_interval)

    def _notice_clock_jump(self, t: Timers, now: float) -> None:
        """Leases, worker liveness and schedules are wall-clock times (the App's clock;
        on SQLite every process of the host reads the same one). When it steps forward
        (NTP, a VM resumed), every lease looks expired and every worker dead until it
        heartbeats again: so heartbeat at once, and hold this worker's reaper for one
        lease, long enough for peers to renew theirs at the new time, instead of reaping
        healthy jobs as crashes. A step back only makes leases look longer: heartbeat at
        once, which renews them from the new time."""
        wall, (last_wall, last_now) = self.app.clock(), (t.wall, t.wall_at)
        t.wall, t.wall_at = wall, now
        if last_wall is None:
            return
        tolerance = max(CLOCK_JUMP_MIN, t.heartbeat_interval)
        moved = wall - last_wall
        jump = moved - (now - last_now)
        if moved >= -tolerance and jump <= tolerance:
            return  # (a frozen test clock does not move: not a jump back)
        self._heartbeat_requested = True
        hold = 0.0
        if jump > 0:
            hold = max([self.app.default_lease, *self._leases.values()])
            t.reap = max(t.reap, now + hold)
        level = logging.WARNING if self.app.clock is time.time else logging.INFO
        log.log(
            level,
            "worker %s: the wall clock jumped %+.1f s; heartbeat now%s",
            self.id, jump if jump > 0 else moved,
            f", reaper held {hold:g} s so live workers renew their leases first" if hold else "",
        )  # fmt: skip

    def _heartbeat(self, backend: Backend) -> None:
        held = [HeldJob(r.job.id, r.job.token) for r in self.inflight.values()]
        if self._suspect is not None:
            held.append(HeldJob(self._suspect.id, self._suspect.token))
        if not self.config.heartbeat:
            held = []
        # a job whose outcome waits to be written (the database was unreachable when its
        # handler returned) is still ours: renewed too, or the reaper, which runs after
        # this heartbeat, would take it back and its finished run would be run again
        waiting = [HeldJob(o.job_id, o.token) for o in self._to_write]
        if not self.config.heartbeat:
            waiting = []
        renewed = backend.renew_leases(self.id, held + waiting)
        self.counters["heartbeats"] += 1
        keep = [HeldJob(*attempt) for attempt, holding in self._holds.items() if holding]
        if keep and self.config.heartbeat:  # handlers that ran on still hold their slots
            backend.hold_slots(keep, ())
        if self._meter.pending:  # what was tallied since the last heartbeat, one transaction
            self._meter.flush(backend)
        if self._limited:  # a limited job in our buffer would hold a slot a peer could use
            self._alone = backend.live_workers() <= 1
        lost = [h.id for h in held if h.id not in renewed]
        cancelled = backend.cancelled_among(lost) if lost else set()
        for h in held:
            if h.id in cancelled and h.id in self.inflight:
                self._cancelled(self.inflight[h.id])
                continue
            if h.id not in renewed and self._suspect is not None and h.id == self._suspect.id:
                self._suspect = None
                self.counters["leases_lost"] += 1
            if h.id not in renewed and h.id in self.inflight:
                run = self.inflight[h.id]
                if run.ctx.completing:
                    continue  # its own ctx.transaction() finished it: the result is coming
                self._close(run, abandon=True)
                self.counters["leases_lost"] += 1
                self._event("lease_lost", run.job)
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
        self._close(run, abandon=True)
        attempt = run.job.id, run.job.token
        if run.future is None:  # a thread may run it on: the row holds its slot until then
            self._holds[attempt] = True
        else:  # an async task is cancelled at its next await
            self._unhold.append(HeldJob(*attempt))
        self.counters["cancelled_running"] += 1
        self._event("cancelled", run.job)
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
        for run in list(self._abandoned):
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
            if replace and not self._stopping:
                self.replace_requested = True
                self.stop()

    def _handler_ended(self, run: Running) -> None:
        """A handler given up while it ran on (cancelled, timed out) has returned, or was
        never started: the slot its job's row held is free."""
        attempt = run.job.id, run.job.token
        held = self._holds.pop(attempt, None)
        if held is None:
            return
        if held:
            self._unhold.append(HeldJob(*attempt))
            return
        for i, outcome in enumerate(self._to_write):  # its timeout's outcome, not yet sent
            if outcome.hold and (outcome.job_id, outcome.token) == attempt:
                self._to_write[i] = replace(outcome, hold=False)
                return
        self._ended_holds.add(attempt)  # on its way: freed once written (see _account)

    def _flush_progress(self, backend: Backend) -> None:
        """Write the latest ctx.progress() report of each job that has one, fenced, in
        one statement. A refused report means the job is no longer ours: the heartbeat
        that follows at once finds out why."""
        with self._progress_lock:
            dirty, self._progress_dirty = self._progress_dirty, set()
            self._progress_signalled = False
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

    def _expire_timeouts(self, now: float) -> None:
        for run in [r for r in self.inflight.values() if r.deadline and now >= r.deadline]:
            run.ctx.timed_out = True
            self._close(run, abandon=True)
            error = TimeoutError(f"timed out after {run.task.timeout:g} s")
            outcome = failure(run, error, self.app.clock(), outcome="timed_out")
            if run.future is None:  # its thread runs on: the row keeps holding its slot
                outcome = replace(outcome, hold=True)
                self._holds[outcome.job_id, outcome.token] = False  # (once written)
            self._to_write.append(outcome)
            self._finishing[outcome.job_id, outcome.token] = run.job
            self._metered[outcome.job_id, outcome.token] = sample(run, now)
            self.counters["timed_out"] += 1
            self._event("timed_out", run.job, outcome.state.value)
            failed_attempt(run, outcome)

    def _close(self, run: Running, *, abandon: bool) -> None:
        run.closed = True
        run.ctx.lease_lost = True
        self.inflight.pop(run.job.id, None)
        if run.future is not None:
            run.future.cancel()
        elif abandon and not run.abandoned:
            # the thread goes on until the handler returns (a thread cannot be killed): it
            # keeps its slot until then, so no more than `concurrency` handlers ever run
            run.abandoned = True
            self._abandoned.add(run)
            if len(self._abandoned) >= self.config.concurrency:
                # often brief (a worker that was paused past its leases): a warning, not an
                # error; a cancelled handler that never returns is an error after cancel_grace
                log.warning(
                    "worker %s: all %d slots are held by handlers that were given up (timed "
                    "out or lease lost) and have not returned; no job starts until one "
                    "does (a handler that never returns needs fixing or a restart)",
                    self.id,
                    self.config.concurrency,
                )
