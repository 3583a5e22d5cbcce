"""Claiming: decide when to look, size each claim to the free slots, send it on a lane
(several round trips in flight on PostgreSQL), start what comes back; and the jobs from
crashed workers, run alone."""

from __future__ import annotations

import logging
import time

from ..backends.base import Backend
from ..jobs import HeldJob
from .drain import handed_back
from .lanes import Trip
from .state import WorkerState
from .timers import Timers

log = logging.getLogger("sqljobs.worker")

PREFETCH_WINDOW = 0.05
"""Seconds of work a worker keeps claimed beyond its running jobs (see Worker.prefetch)."""

PREFETCH_CAP = 8
"""At most this many times ``concurrency`` jobs per claim lane are claimed beyond the
running ones (so each lane's claims stay about as big as with one lane). It binds only
for jobs shorter than ``PREFETCH_WINDOW / (PREFETCH_CAP * lanes)`` (6 ms with one lane, 3
with two): what waits in the buffer is still about ``PREFETCH_WINDOW`` of work. 8 rather
than 4 (claims of 72 short jobs instead of 40 on SQLite): no-op drain 1.17x on SQLite and
1.23x on PostgreSQL (``drain_ab.py``, 20,000 jobs, 7 alternating rounds)."""

DUE_QUESTION_HOLD = 0.002
"""After a short batch, the question of when to look again waits at most this many seconds
for the batch's jobs to begin, where a lane thread would ask it: sent at once, that thread
woke beside the handler threads and took the GIL from them (an idle PostgreSQL worker's
hand-off to the handler took 0.22-0.25 ms; held, 0.12-0.13 ms, `wake_trace.py`). With one
lane (SQLite) the coordinator asks it inline, and SQLite lets go of the GIL meanwhile:
holding it measured no faster there."""

DUE_QUESTION_POLL = 0.0002
"""How often the coordinator looks whether they have begun while it holds the question."""

SUSPECT_LOOK_POLLS = 6
"""A busy worker (whose claims come back full, so it never asks next_due) still looks
for jobs from crashed workers every this many poll intervals."""


class Claiming(WorkerState):
    def _claim_step(self, backend: Backend, t: Timers, now: float) -> None:
        """Decide whether anything may be claimable, then claim up to the free slots,
        again at once while batches come back full."""
        cfg = self.config
        if len(self._abandoned) >= cfg.concurrency and self._threads is not None:
            # no thread will be free soon: jobs waiting for one go back for others to run
            self._release(backend, self._threads.take_queued(), "released_unstarted")
        if self._solo is not None and self._solo not in self.inflight:
            self._solo = None  # the suspect ran alone: look for the next one at once
            t.suspect_check, t.want_claim = now, True
        current = backend.change_marker()
        if current != t.marker:
            t.marker, t.want_claim = current, True
        if not self._pushed:  # poll-only: nothing else says this process enqueued
            local = self.app.local_marker()
            if local != t.local_marker:
                t.local_marker, t.want_claim = local, True
        wall = self.app.clock()
        if t.due is not None and wall >= t.due:
            t.want_claim, t.due = True, None
        if t.retry_due is not None and wall >= t.retry_due:
            t.want_claim, t.retry_due = True, None
        polled = False  # the fallback poll, and nothing else, says look
        if now >= t.poll:
            polled, t.want_claim = not t.want_claim, True
        look = t.want_claim and now >= t.suspect_check
        if look:  # next_due tells when to look sooner; this is the busy worker's fallback
            t.suspect_check = now + SUSPECT_LOOK_POLLS * cfg.poll_interval
            if not self._limited:  # jobs that carry a limit this worker's code lacks
                self._limited = backend.limited_pending(cfg.queues, self._leases)
        if look or self._suspect is not None:
            self._take_suspect(backend, look)
        if polled and self._quiet():
            # nothing announced work, nothing runs: ask next_due (a read) rather than claim
            # (a write); a job it calls due is claimed a moment later
            t.want_claim, t.want_due, t.polled = False, True, True
            t.poll = time.monotonic() + cfg.poll_interval * self.rng.uniform(0.9, 1.1)
        lanes = self._lanes
        assert lanes is not None
        share = -(-self.capacity // lanes.size)  # a lane's part of the capacity, rounded up
        while t.want_claim and lanes.idle:
            free = self._free_slots()
            if free <= 0 or (lanes.busy and free < share):
                break  # a small claim now would only cut the next full one short
            idle, size = self._idle_threads(), min(free, share)
            trip = Trip(self._to_write, size, start_now=idle, started=self._began_since(),
                        limited_buffer=self._limited_buffer(size, idle))  # fmt: skip
            self._to_write = []
            t.want_claim = False  # until the batch comes back full, or something changes
            t.poll = time.monotonic() + cfg.poll_interval * self.rng.uniform(0.9, 1.1)
            self.counters["claims"] += 1
            lanes.send(trip, inline=not self.inflight and not lanes.busy)
            self._take_trips(backend, t)  # an inline trip is back already

    def _round_trip(self, backend: Backend, trip: Trip) -> None:
        """On a lane: write the trip's outcomes and claim its jobs in one statement, or
        write them and ask when to look again (sent after a short batch, once its jobs
        have started: asking first would delay them by a round trip)."""
        cfg = self.config
        if trip.limit:
            trip.written, trip.jobs = backend.finish_and_claim(
                trip.outcomes, self.id, cfg.queues, trip.limit, self._leases,
                trip.start_now, trip.started, self._limited, trip.limited_buffer,
            )  # fmt: skip
            return
        trip.written = backend.finish_jobs(trip.outcomes, trip.started)
        if trip.ask_due:
            trip.due = backend.next_due(cfg.queues, self._leases, self._limited)

    def _take_trips(self, backend: Backend, t: Timers | None) -> None:
        """Account for the round trips that came back and start the jobs they claimed."""
        assert self._lanes is not None
        error: Exception | None = None
        for trip in self._lanes.finished():
            if trip.written is None:  # nothing was written: send the outcomes again
                self._to_write = trip.outcomes + self._to_write
            else:
                self._account(trip.outcomes, trip.written, t)
            if self._stopping:  # claimed as the stop came: hand back, never start
                wall = self.app.clock()
                for job in trip.jobs:
                    self._to_write.append(
                        handed_back(job, "released_unstarted", self.id, wall, wall)
                    )
                    self._finishing[job.id, job.token] = job  # "released" once written
            else:
                self.counters["claimed"] += len(trip.jobs)
                start_now = len(trip.jobs) if trip.start_now is None else trip.start_now
                for i, job in enumerate(trip.jobs):
                    self._dispatch(backend, job, prefetched=i >= start_now)
            error = error or trip.error
            if t is None:
                continue
            if trip.limit and (trip.error is not None or len(trip.jobs) >= trip.limit):
                t.want_claim = True  # a full batch: more may wait; a failure: try again
            elif trip.limit and trip.start_now and len(trip.jobs) >= trip.start_now:
                pass  # every idle thread got a job: the next completion asks again
            elif trip.limit:
                t.want_due = True  # a short batch: nothing more is due; ask when it will be
                if self.lanes > 1:  # (asked on a lane thread: once its jobs began)
                    t.due_hold = time.monotonic() + DUE_QUESTION_HOLD
            elif trip.ask_due and trip.error is not None:
                t.want_due = True
            if trip.due is not None:
                if trip.due.suspects and self._suspect is None:
                    t.suspect_check = time.monotonic()
                # next_due ignores suspects, so a job it calls due is ours to claim: one that
                # fell due since our claim (a delayed job) is claimed shortly, never left to
                # the poll; the short pause bounds any spin
                wait, wall = trip.due.wait, self.app.clock()
                t.due = None if wait is None else wall + max(wait, 0.005)
                if t.polled and trip.ask_due:  # the poll's question: a due job is claimed
                    t.polled = False  # now, whatever the App's clock does (a test's stands)
                    t.want_claim = t.want_claim or (wait is not None and wait <= 0)
                if self._scheduler is not None:
                    t.schedules_read(time.monotonic(), wall, trip.due.schedule_at,
                                     self.config.poll_interval)  # fmt: skip
        if self._async is not None:
            self._async.start_queued()  # the claims' async jobs, with one wake-up
        if error is not None:
            raise error

    @property
    def lanes(self) -> int:
        """Claim round trips that may be in flight (the backend's choice once running)."""
        return self._lanes.size if self._lanes is not None else self.config.claim_lanes or 1

    @property
    def lanes_busy(self) -> bool:
        return self._lanes is not None and self._lanes.busy

    @property
    def prefetch(self) -> int:
        """Jobs claimed beyond ``concurrency`` so threads never wait on the database.

        By default it adapts to how long jobs run: enough to cover ``PREFETCH_WINDOW`` of
        work, at most ``PREFETCH_CAP * concurrency`` per claim lane (short jobs, big
        batches: the throughput lever), down to none for jobs long enough that a buffered
        one would only wait while other workers idle. A ``prefetch`` setting fixes it."""
        cfg = self.config
        if cfg.prefetch is not None:
            return cfg.prefetch
        if self.runtime is None:
            return cfg.concurrency
        wanted = cfg.concurrency * PREFETCH_WINDOW / max(self.runtime, 1e-6)
        return min(PREFETCH_CAP * cfg.concurrency * self.lanes, int(wanted))

    @property
    def capacity(self) -> int:
        return self.config.concurrency + self.prefetch

    def _free_slots(self) -> int:
        """Capacity not running nor promised to a claim in flight. No claims once stopping
        (a claim in flight when the stop came must not be followed by another, which
        could take back the very jobs just handed back), nor while a suspect waits for the
        worker to empty or runs alone."""
        if self._stopping or self._suspect is not None or self._solo in self.inflight:
            return 0
        if len(self._abandoned) >= self.config.concurrency:
            return 0  # every thread still runs a given-up handler: a claim would only wait
        reserved = self._lanes.reserved if self._lanes is not None else 0
        return self.capacity - len(self.inflight) - len(self._abandoned) - reserved

    def _take_suspect(self, backend: Backend, look: bool) -> None:
        """Claim a job that was in a crashed worker (if ``look``), then run it once nothing
        else runs. It was claimed not started (``prefetched``): the database learns that it
        starts before its handler runs, so a crash of this worker while it waited does not
        blame it, and one while it runs does."""
        if look and self._suspect is None and self._solo not in self.inflight:
            self._suspect = backend.claim_suspect(self.id, self.config.queues, self._leases)
        if self._suspect is not None and not self.inflight and not self.lanes_busy:
            job = self._suspect  # (if this write fails, it stays held, to try again)
            backend.finish_jobs((), [HeldJob(job.id, job.token)])  # rare: its own statement
            self._suspect = None
            self._solo = job.id
            self.counters["suspects"] += 1
            self.counters["claimed"] += 1
            log.warning("job %s was in a worker that crashed; running it alone", job.id)
            self._dispatch(backend, job)
            if self._async is not None:
                self._async.start_queued()

    def _quiet(self) -> bool:
        """Nothing runs, waits to run or is on its way back, and no limited job may wait
        (next_due does not answer for those): the fallback poll may ask before it claims."""
        return (
            not self.inflight
            and not self.lanes_busy
            and not self._limited
            and self._suspect is None
            and not self._stopping
        )

    def _limited_buffer(self, size: int, idle: int) -> int:
        """How many jobs under a limit this claim may put in the buffer, where each holds
        a slot without running: as many as the rest of the buffer (its size is the work of
        ``PREFETCH_WINDOW``, a few hundredths of a second) once the worker has measured
        how long its jobs run, and only while it is the one live worker (another one's
        idle threads could have run them now); none otherwise."""
        if not self._alone or self.runtime is None or self.prefetch <= 0:
            return 0
        return max(0, size - idle)

    def _idle_threads(self) -> int:
        """Threads free for a claim's jobs (a lower bound): the claim marks the rest
        ``prefetched``, so that a crash of this worker does not blame them."""
        busy = sum(1 for r in self.inflight.values() if not r.task.is_async)
        reserved = self._lanes.reserved if self._lanes is not None else 0
        return max(0, self.config.concurrency - busy - len(self._abandoned) - reserved)

    def _due_question_wait(self, t: Timers) -> float:
        """Seconds the question of when to look again still waits (0: ask now): while a
        job dispatched to start at once has not begun, up to ``t.due_hold``."""
        left = t.due_hold - time.monotonic()
        if left <= 0 or all(r.begun is not None or r.prefetched for r in self.inflight.values()):
            return 0.0
        return min(left, DUE_QUESTION_POLL)

    def _began_since(self) -> list[HeldJob]:
        """Buffered jobs whose handlers began since the last round trip: the next trip
        tells the database, so a crash from here on blames them."""
        began = [r for r in self.inflight.values() if r.prefetched and r.begun is not None]
        for run in began:
            run.prefetched = False
        return [HeldJob(r.job.id, r.job.token) for r in began]
