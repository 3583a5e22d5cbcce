"""The producer: decides when to look for jobs, sizes each claim to the free slots, sends
it on a lane (several round trips in flight on PostgreSQL) carrying the outcomes the
completer buffered, and hands what comes back to the dispatcher; and the jobs from
crashed workers, run alone.

Idle, it reads the database's change counter between polls instead of running claim
queries; every ``poll_interval``, as a fallback, it asks when the next job falls due (one
read) and claims if one is (a busy worker claims).
"""

from __future__ import annotations

import collections
import logging
import random
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..backends.base import Backend, Claim, DueQuery
from ..jobs import HeldJob
from .completer import Completer
from .config import WorkerConfig
from .dispatcher import Dispatcher
from .holding import Holding
from .lanes import Lanes, Trip
from .shutdown import StopState

if TYPE_CHECKING:
    from ..app import App

log = logging.getLogger("sqljobs.worker")

PREFETCH_WINDOW = 0.05
"""Seconds of work a worker keeps claimed beyond its running jobs (see Worker.prefetch)."""

PREFETCH_CAP = 8
"""At most this many times ``concurrency`` jobs per claim lane are claimed beyond the
running ones (so each lane's claims stay about as big as with one lane). It binds only
for jobs shorter than ``PREFETCH_WINDOW / (PREFETCH_CAP * lanes)`` (6 ms with one lane, 3
with two): what waits in the buffer is still about ``PREFETCH_WINDOW`` of work. Bigger
claims of short jobs are the throughput lever (see docs/performance.md)."""

DUE_QUESTION_HOLD = 0.002
"""After a short batch, the question of when to look again waits at most this many seconds
for the batch's jobs to begin, where a lane thread would ask it: sent at once, that thread
woke beside the handler threads and took the GIL from them, delaying the hand-off to the
handler. With one lane (SQLite) the coordinator asks it inline, and SQLite lets go of the
GIL meanwhile: holding it is no faster there."""

DUE_QUESTION_POLL = 0.0002
"""How often the coordinator looks whether they have begun while it holds the question."""

SUSPECT_LOOK_POLLS = 6
"""A busy worker (whose claims come back full, so it never asks next_due) still looks
for jobs from crashed workers every this many poll intervals."""

FIRST_LOOK = 0.05
"""Seconds after start-up before a worker first looks for jobs from crashed workers and
for limited jobs its code lacks (two statements): its first claim, which neither could
change, goes first."""

SchedulesRead = Callable[[float, float, float | None, float], None]
"""Told the earliest schedule's due time a next_due answer carried (see Upkeep)."""


class Producer:
    """Claims and round trips. Its timers are monotonic seconds, except ``due`` (the
    wall-clock time the next delayed job falls due, as the database last said),
    ``suspect_due`` (the same for the first job from crashed workers) and ``retry_due``
    (when the earliest retry this worker wrote since falls due)."""

    def __init__(
        self,
        *,
        app: App,
        config: WorkerConfig,
        worker_id: str,
        holding: Holding,
        completer: Completer,
        dispatcher: Dispatcher,
        stop: StopState,
        counters: collections.Counter[str],
        rng: random.Random,
        wake: threading.Event,
    ) -> None:
        self.app = app
        self.config = config
        self.id = worker_id
        self._held = holding
        self.inflight = holding.inflight
        self._abandoned = holding.abandoned
        self._completer = completer
        self._dispatcher = dispatcher
        self._stop = stop
        self.counters = counters
        self.rng = rng
        self._wake = wake
        # the lease each task gets; its keys: what we can run
        self._leases = {name: task.lease for name, task in app.tasks.items()}
        # some task has a concurrency limit: claims look for limited jobs too
        self._limited = bool(app.queue_limits) or any(
            task.limit is not None for task in app.tasks.values()
        )
        self._alone = False  # no other live worker (at the last count): limited jobs may
        # be buffered
        self._solo: int | None = None  # id of the suspect running alone
        self.claim_budget: int | None = None  # jobs this process may take in all
        self._lanes: Lanes | None = None
        self._pushed = False  # the notifier pushes (else an own enqueue is seen by the App)
        self.checks_changes = False  # wakes every change_check_interval to read the counter
        self._schedules_read: SchedulesRead | None = None
        now = time.monotonic()
        self.poll = now
        self.suspect_check = now + FIRST_LOOK
        self.due: float | None = None
        self.suspect_due: float | None = None
        self.retry_due: float | None = None
        self.marker: int | None = None  # the database's change counter, last seen
        self.local_marker = 0  # the App's count of its own process's wake-ups, last seen
        self.want_claim = True
        self.want_due = False
        self.due_hold = now  # a short batch's question waits for its jobs' start until then
        self.polled = False  # the due question in flight is the fallback poll's

    def start(self, backend: Backend, schedules_read: SchedulesRead | None) -> None:
        """Open the lanes on ``backend``; ``schedules_read`` (the upkeep's, when it runs
        the scheduler) is told what next_due answers say about schedules."""
        now = time.monotonic()
        self.poll, self.suspect_check, self.due_hold = now, now + FIRST_LOOK, now
        if self._limited:  # (the heartbeat counts them again; --processes start together)
            self._alone = self.config.supervisor_pid is None and backend.live_workers() <= 1
        # a change counter to read between polls: SQLite's; PostgreSQL pushes instead,
        # and in poll-only mode has none, so waking to read it would only spin
        self.checks_changes = not backend.pushes_changes and backend.change_marker() is not None
        self._pushed = backend.pushes_changes
        self._schedules_read = schedules_read
        self._lanes = Lanes(
            self.config.claim_lanes or backend.claim_lanes,
            lambda trip: self._round_trip(backend, trip), self._wake.set, f"sqljobs-{self.id}",
        )  # fmt: skip

    def stop(self) -> None:
        if self._lanes is not None:
            self._lanes.stop()

    # -- what others tell it -------------------------------------------------------------

    def claim_soon(self, suspects_at: float | None = None) -> None:
        """Something freed slots or made jobs (a handler returned, the reaper or the
        scheduler ran): claim at the next claim step, and look for crashed workers' jobs
        from ``suspects_at`` (monotonic) if given."""
        self.want_claim = True
        if suspects_at is not None:
            self.suspect_check = suspects_at

    def count_peers(self, backend: Backend) -> None:
        """On the heartbeat: a limited job in our buffer would hold a slot a peer could
        use, so count the live workers."""
        if self._limited:
            self._alone = backend.live_workers() <= 1

    # -- claiming ------------------------------------------------------------------------

    def claim_step(self, backend: Backend, now: float) -> None:
        """Decide whether anything may be claimable, then claim up to the free slots,
        again at once while batches come back full."""
        cfg = self.config
        if len(self._abandoned) >= cfg.concurrency:
            # no thread will be free soon: jobs waiting for one go back for others to run
            self._completer.release(backend, self._dispatcher.take_queued(), "released_unstarted")
        if self._solo is not None and self._solo not in self.inflight:
            self._solo = None  # the suspect ran alone: look for the next one at once
            self.suspect_check, self.want_claim = now, True
        current = backend.change_marker()
        if current != self.marker:
            self.marker, self.want_claim = current, True
        if not self._pushed:  # poll-only: nothing else says this process enqueued
            local = self.app._wakeups.change_marker() or 0
            if local != self.local_marker:
                self.local_marker, self.want_claim = local, True
        wall = self.app.clock()
        if self.due is not None and wall >= self.due:
            self.want_claim, self.due = True, None
        if self.retry_due is not None and wall >= self.retry_due:
            self.want_claim, self.retry_due = True, None
        if self.suspect_due is not None and wall >= self.suspect_due:
            # a look, not only a claim: the normal claim never takes a crashed worker's job
            self.want_claim, self.suspect_check, self.suspect_due = True, now, None
        polled = False  # the fallback poll, and nothing else, says look
        if now >= self.poll:
            polled, self.want_claim = not self.want_claim, True
        look = self.want_claim and now >= self.suspect_check
        if look:  # next_due tells when to look sooner; this is the busy worker's fallback
            self.suspect_check = now + SUSPECT_LOOK_POLLS * cfg.poll_interval
            if not self._limited:  # jobs that carry a limit this worker's code lacks
                self._limited = backend.limited_pending(cfg.queues, self._leases)
        if look or self._held.suspect is not None:
            self._take_suspect(backend, look)
        if polled and self._quiet():
            # nothing announced work, nothing runs: ask next_due (a read) rather than claim
            # (a write); a job it calls due is claimed a moment later
            self.want_claim, self.want_due, self.polled = False, True, True
            self.poll = time.monotonic() + cfg.poll_interval * self.rng.uniform(0.9, 1.1)
        lanes = self._lanes
        assert lanes is not None
        share = -(-self.capacity // lanes.size)  # a lane's part of the capacity, rounded up
        while self.want_claim and lanes.idle:
            free = self._free_slots()
            if free <= 0 or (lanes.busy and free < share):
                break  # a small claim now would only cut the next full one short
            idle, size = self._idle_threads(), min(free, share)
            trip = Trip(self._completer.take(), size, start_now=idle,
                        started=self._began_since(),
                        limited_buffer=self._limited_buffer(size, idle))  # fmt: skip
            self.want_claim = False  # until the batch comes back full, or something changes
            self.poll = time.monotonic() + cfg.poll_interval * self.rng.uniform(0.9, 1.1)
            self.counters["claims"] += 1
            lanes.send(trip, inline=not self.inflight and not lanes.busy)
            self.take_trips(backend)  # an inline trip is back already

    def write_outcomes(self, backend: Backend, claiming: bool = True) -> None:
        """Outcomes no claim carried go out once no round trip is in flight (one in flight
        takes them on its return, in the next claim: write-only trips beside claims only
        cost commits), with the question of when to look again if a short batch raised it
        (once that batch's jobs have begun, see DUE_QUESTION_HOLD: outcomes that came
        meanwhile wait the moment with it, rather than take a round trip of their own).
        Not ``claiming`` (the drain's last writes): no question, no timers."""
        assert self._lanes is not None
        if claiming and self.want_due and self._due_question_wait():
            return
        ask_due = claiming and self.want_due
        if not (self._completer.buffered or ask_due) or self._lanes.busy:  # (flips of
            # `prefetched` wait for the next trip: until then a crash blames no buffered job)
            return
        if claiming:
            self.want_due = False
        if ask_due:
            self.counters["due_checks"] += 1
        trip = Trip(self._completer.take(), 0, ask_due=ask_due, started=self._began_since())
        self._lanes.send(trip, inline=not self.inflight)
        self.take_trips(backend, claiming)

    def _round_trip(self, backend: Backend, trip: Trip) -> None:
        """On a lane: write the trip's outcomes and claim its jobs in one statement, or
        write them and ask when to look again (sent after a short batch, once its jobs
        have started: asking first would delay them by a round trip)."""
        cfg = self.config
        if trip.limit:
            claim = Claim(
                self.id, cfg.queues, trip.limit, self._leases,
                trip.start_now, trip.started, self._limited, trip.limited_buffer,
            )  # fmt: skip
            trip.written, trip.jobs = backend.finish_and_claim(trip.outcomes, claim)
            return
        trip.written = backend.finish_jobs(trip.outcomes, trip.started)
        if trip.ask_due:
            trip.due = backend.next_due(DueQuery(cfg.queues, self._leases, self._limited))

    def take_trips(self, backend: Backend, claiming: bool = True) -> None:
        """Account for the round trips that came back and start the jobs they claimed
        (not ``claiming``: account only, leaving the claim timers as they are)."""
        assert self._lanes is not None
        completer = self._completer
        error: Exception | None = None
        for trip in self._lanes.finished():
            if trip.written is None:  # nothing was written: send the outcomes again
                completer.carry_back(trip.outcomes)
                retry_at = None
            else:
                retry_at = completer.account(trip.outcomes, trip.written)
            if self._stop.stopping:  # claimed as the stop came: hand back, never start
                completer.hand_back(trip.jobs)
            else:
                self.counters["claimed"] += len(trip.jobs)
                start_now = len(trip.jobs) if trip.start_now is None else trip.start_now
                dispatch = self._dispatcher.dispatch
                for i, job in enumerate(trip.jobs):
                    dispatch(backend, job, prefetched=i >= start_now)
            error = error or trip.error
            if not claiming:
                continue
            if retry_at is not None:  # our own retries: wake for them on time
                due = self.retry_due
                self.retry_due = retry_at if due is None else min(due, retry_at)
            if trip.limit and (trip.error is not None or len(trip.jobs) >= trip.limit):
                self.want_claim = True  # a full batch: more may wait; a failure: try again
            elif trip.limit and trip.start_now and len(trip.jobs) >= trip.start_now:
                pass  # every idle thread got a job: the next completion asks again
            elif trip.limit:
                self.want_due = True  # a short batch: nothing more is due; ask when it will be
                if self.lanes > 1:  # (asked on a lane thread: once its jobs began)
                    self.due_hold = time.monotonic() + DUE_QUESTION_HOLD
            elif trip.ask_due and trip.error is not None:
                self.want_due = True
            if trip.due is not None:
                # next_due ignores suspects, so a job it calls due is ours to claim: one that
                # fell due since our claim (a delayed job) is claimed shortly, never left to
                # the poll; the short pause bounds any spin
                wait, wall = trip.due.wait, self.app.clock()
                self.due = None if wait is None else wall + max(wait, 0.005)
                # a suspect is looked for when it falls due, as a retry is claimed then
                suspect_wait = trip.due.suspect_wait
                if suspect_wait is None or self._held.suspect is not None:
                    self.suspect_due = None
                else:
                    self.suspect_due = wall + max(suspect_wait, 0.0)
                if self.polled and trip.ask_due:  # the poll's question: a due job is claimed
                    self.polled = False  # now, whatever the App's clock does (a test's stands)
                    self.want_claim = self.want_claim or (wait is not None and wait <= 0)
                if self._schedules_read is not None:
                    self._schedules_read(time.monotonic(), wall, trip.due.schedule_at,
                                         self.config.poll_interval)  # fmt: skip
        self._dispatcher.start_queued()  # the claims' async jobs, with one wake-up
        if error is not None:
            raise error

    # -- sizes ---------------------------------------------------------------------------

    @property
    def lanes(self) -> int:
        """Claim round trips that may be in flight (the backend's choice once running)."""
        return self._lanes.size if self._lanes is not None else self.config.claim_lanes or 1

    @property
    def lanes_busy(self) -> bool:
        return self._lanes is not None and self._lanes.busy

    @property
    def prefetch(self) -> int:
        """Jobs claimed beyond ``concurrency`` (see :attr:`Worker.prefetch`)."""
        cfg = self.config
        if cfg.prefetch is not None:
            return cfg.prefetch
        runtime = self._completer.runtime
        if runtime is None:
            return cfg.concurrency
        wanted = cfg.concurrency * PREFETCH_WINDOW / max(runtime, 1e-6)
        return min(PREFETCH_CAP * cfg.concurrency * self.lanes, int(wanted))

    @property
    def capacity(self) -> int:
        return self.config.concurrency + self.prefetch

    def _free_slots(self) -> int:
        """Capacity not running nor promised to a claim in flight. No claims once stopping
        (a claim in flight when the stop came must not be followed by another, which
        could take back the very jobs just handed back), nor while a suspect waits for the
        worker to empty or runs alone."""
        if self._stop.stopping or self._held.suspect is not None or self._solo in self.inflight:
            return 0
        if len(self._abandoned) >= self.config.concurrency:
            return 0  # every thread still runs a given-up handler: a claim would only wait
        reserved = self._lanes.reserved if self._lanes is not None else 0
        free = self.capacity - len(self.inflight) - len(self._abandoned) - reserved
        if self.claim_budget is not None:  # a process recycled after N jobs claims no more
            free = min(free, self.claim_budget - self.jobs_taken)
        return free

    @property
    def jobs_taken(self) -> int:
        """Jobs claimed and not handed back."""
        return self.counters["claimed"] - self.counters["released"]

    def _take_suspect(self, backend: Backend, look: bool) -> None:
        """Claim a job that was in a crashed worker (if ``look``), then run it once nothing
        else runs. It was claimed not started (``prefetched``): the database learns that it
        starts before its handler runs, so a crash of this worker while it waited does not
        blame it, and one while it runs does."""
        held = self._held
        if look and held.suspect is None and self._solo not in self.inflight:
            held.suspect = backend.claim_suspect(
                Claim(self.id, self.config.queues, 1, self._leases)
            )
        if held.suspect is not None and not self.inflight and not self.lanes_busy:
            job = held.suspect  # (if this write fails, it stays held, to try again)
            backend.finish_jobs((), [HeldJob(job.id, job.token)])  # rare: its own statement
            held.suspect = None
            self._solo = job.id
            self.counters["suspects"] += 1
            self.counters["claimed"] += 1
            log.warning("job %s was in a worker that crashed; running it alone", job.id)
            self._dispatcher.dispatch(backend, job)
            self._dispatcher.start_queued()

    def _quiet(self) -> bool:
        """Nothing runs, waits to run or is on its way back, and no limited job may wait
        (next_due does not answer for those): the fallback poll may ask before it claims."""
        return (
            not self.inflight
            and not self.lanes_busy
            and not self._limited
            and self._held.suspect is None
            and not self._stop.stopping
        )

    def _limited_buffer(self, size: int, idle: int) -> int:
        """How many jobs under a limit this claim may put in the buffer, where each holds
        a slot without running: as many as the rest of the buffer (its size is the work of
        ``PREFETCH_WINDOW``, a few hundredths of a second) once the worker has measured
        how long its jobs run, and only while it is the one live worker (another one's
        idle threads could have run them now); none otherwise."""
        if not self._alone or self._completer.runtime is None or self.prefetch <= 0:
            return 0
        return max(0, size - idle)

    def _idle_threads(self) -> int:
        """Threads free for a claim's jobs (a lower bound): the claim marks the rest
        ``prefetched``, so that a crash of this worker does not blame them."""
        busy = sum(1 for r in self.inflight.values() if not r.task.is_async)
        reserved = self._lanes.reserved if self._lanes is not None else 0
        return max(0, self.config.concurrency - busy - len(self._abandoned) - reserved)

    def _due_question_wait(self) -> float:
        """Seconds the question of when to look again still waits (0: ask now): while a
        job dispatched to start at once has not begun, up to ``due_hold``."""
        left = self.due_hold - time.monotonic()
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

    # -- when to wake --------------------------------------------------------------------

    def wait(self, now: float) -> float:
        """Seconds until the producer needs a pass (0: now): outcomes or a question to
        send, the fallback poll, a delayed job or a retry falling due, a look for
        crashed workers' jobs, the next read of the change counter."""
        busy = self.lanes_busy
        hold = self._due_question_wait() if self.want_due and not busy else 0.0
        if (self._completer.buffered or self.want_due) and not busy and not hold:
            return 0.0
        timers = [hold] if hold else []
        if not self._stop.stopping:  # no claims once stopping
            timers.append(self.poll - now)
            for due in (self.due, self.retry_due, self.suspect_due):
                if due is not None:
                    timers.append(due - self.app.clock())
            if self.suspect_check > now and self._held.suspect is None and self.want_claim:
                timers.append(self.suspect_check - now)
            if self.checks_changes:
                timers.append(self.config.change_check_interval)
        return min(timers, default=float("inf"))
