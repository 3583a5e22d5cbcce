"""The worker: one coordinator thread owns the worker's state; executors only run handlers.

The coordinator loop, in order: collect finished handlers and the round trips that came
back; give up jobs past their timeout; renew every held lease in one statement; reap
expired leases; then claim as many jobs as there are free slots, again at once while
batches come back full, each claim carrying the outcomes written so far. Claims go out on
lanes (see :mod:`.lanes`): on PostgreSQL two are in flight at once. Idle, it waits on an
event (set by a local enqueue, a finished handler or a returning round trip) and looks at
the database's change counter every few milliseconds instead of running claim queries; a
claim query still runs every ``poll_interval`` as a fallback.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import random
import signal
import socket
import threading
import time
import uuid
from collections.abc import Collection
from dataclasses import dataclass
from types import FrameType
from typing import TYPE_CHECKING, Any

from ..backends.base import Backend, WorkerInfo
from ..context import JobContext
from ..errors import BackendError, ConfigurationError, PayloadError
from ..jobs import ClaimedJob, HeldJob, JobState, Outcome
from ..maintenance import Pruner, Reaper, Scheduler
from ..payload import decode
from ..url import parse_url
from .config import WorkerConfig
from .execute import AsyncRunner, Running, ThreadPool, failure
from .lanes import Lanes, Trip
from .report import banner, failed_attempt, job_fields, summary, unreachable

if TYPE_CHECKING:
    from ..app import App

log = logging.getLogger("sqljobs.worker")

PREFETCH_WINDOW = 0.05
"""Seconds of work a worker keeps claimed beyond its running jobs (see Worker.prefetch)."""

PREFETCH_CAP = 4
"""At most this many times ``concurrency`` jobs per claim lane are claimed beyond the
running ones (so each lane's claims stay about as big as with one lane)."""

CONNECT_BACKOFF_FIRST = 0.1
CONNECT_BACKOFF_CAP = 5.0
"""A worker that cannot reach its database at start-up tries again after these pauses,
doubling from the first to the cap, until it connects or is stopped."""

SUSPECT_LOOK_POLLS = 6
"""A busy worker (whose claims come back full, so it never asks next_due) still looks
for jobs from crashed workers every this many poll intervals."""


class Worker:
    """Runs jobs of an App's tasks until stopped. ``run()`` blocks; ``stop()`` is thread-safe."""

    def __init__(self, app: App, config: WorkerConfig | None = None, **options: Any) -> None:
        if not app.tasks:
            raise ConfigurationError(
                f"{app!r} has no tasks: a worker would have nothing to run. Give the worker "
                "the App that registers your tasks (sqljobs --app MODULE:ATTR worker)"
            )
        self.app = app
        self.config = config or WorkerConfig(**options)
        leases = [t.lease for t in app.tasks.values()] or [app.default_lease]
        self.shortest_lease = min([*leases, app.default_lease])
        self.drain_timeout = self.config.checked_drain_timeout(self.shortest_lease)
        self.id = self.config.worker_id or (
            f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        )
        self.runtime: float | None = None  # moving average of handler run time, seconds
        self._leases = {name: task.lease for name, task in app.tasks.items()}
        self.inflight: dict[int, Running] = {}
        self._abandoned: set[Running] = set()  # given up, but their threads still run them
        self.stopped = threading.Event()
        self.counters: collections.Counter[str] = collections.Counter()
        self._results: collections.deque[tuple[Running, Outcome]] = collections.deque()
        self._to_write: list[Outcome] = []
        self._wake = threading.Event()
        self._stopping = False
        self._immediate = False
        self._drain_deadline = 0.0
        self._heartbeat_requested = False
        self._suspect: ClaimedJob | None = None  # claimed, waiting to run alone
        self._solo: int | None = None  # id of the suspect running alone
        self._backend: Backend | None = None
        self._backend_pushes = False
        self._threads: ThreadPool | None = None
        self._async: AsyncRunner | None = None
        self._lanes: Lanes | None = None
        self._signals = 0  # counted by the signal handler, acted on by the coordinator
        self._signals_taken = 0
        self._relay_write: int | None = None

    # -- control -----------------------------------------------------------------------

    def stop(self, immediate: bool = False) -> None:
        """Stop claiming and drain (graceful), or release everything now (``immediate``)."""
        if not self._stopping:
            self._stopping = True
            self._drain_deadline = time.monotonic() + self.drain_timeout
            log.info("worker %s: stopping, draining up to %.1f s", self.id, self.drain_timeout)
        if immediate:
            self._immediate = True
        self._wake.set()

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        """Runs between two bytecodes of the main thread, maybe while it holds the lock
        inside ``_wake``: taking that lock here would deadlock it (seen: a second signal
        that never stopped the worker). So only count, and write a byte to a pipe whose
        reader thread sets ``_wake``; the coordinator acts on the count."""
        self._signals += 1
        if self._relay_write is not None:
            with contextlib.suppress(OSError):  # a full or closed pipe: the count is enough
                os.write(self._relay_write, b"\0")

    def _take_signals(self) -> None:
        """Act on signals counted since the last look: the first drains, the next stops."""
        while self._signals_taken < self._signals:
            self._signals_taken += 1
            self.stop(immediate=self._stopping)

    def _start_relay(self) -> None:
        read, write = os.pipe()
        os.set_blocking(write, False)
        self._relay_write = write

        def relay() -> None:
            while os.read(read, 64):
                self._wake.set()
            os.close(read)

        threading.Thread(target=relay, name="sqljobs-signals", daemon=True).start()

    def _stop_relay(self) -> None:
        write, self._relay_write = self._relay_write, None
        if write is not None:
            os.close(write)  # the reader sees the end and closes its side

    def request_heartbeat(self) -> None:
        self._heartbeat_requested = True
        self._wake.set()

    # -- main loop ---------------------------------------------------------------------

    def run(self) -> None:
        """Work until stopped; on return every job this worker held is finished or released."""
        heartbeat_interval = self.shortest_lease / 3
        info = WorkerInfo(
            self.id,
            socket.gethostname(),
            os.getpid(),
            self.config.queues,
            self.config.concurrency,
            heartbeat_interval,
            tuple(task.info for task in self.app.tasks.values()),
        )
        restore = self._install_signals()  # a wait for the database must stop on SIGTERM
        began = time.monotonic()
        backend = self._connect(info)
        if backend is None:  # stopped while waiting for the database
            self._restore_signals(restore)
            self.stopped.set()
            return
        self._backend = backend
        backend.subscribe(self._wake.set)
        self._backend_pushes = backend.pushes_changes
        lanes = self._lanes = Lanes(
            self.config.claim_lanes or backend.claim_lanes,
            lambda trip: self._round_trip(backend, trip), self._wake.set, f"sqljobs-{self.id}",
        )  # fmt: skip
        self._reaper = Reaper(backend, self.config.max_crashes)
        self._pruner = Pruner(backend, self.app.retention)
        self._scheduler = (
            Scheduler(self.app, backend, grace=self.config.misfire_grace)
            if self.config.scheduler
            else None
        )
        self._threads = ThreadPool(
            self.config.concurrency, self._report, self.app.clock, f"sqljobs-{self.id}"
        )
        if any(t.is_async for t in self.app.tasks.values()):
            self._async = AsyncRunner(self._report, self.app.clock)
        self.app.add_wakeup(self._wake)
        log.info("%s", banner(self, backend, heartbeat_interval))
        try:
            self._loop(backend, heartbeat_interval)
        finally:
            self.app.remove_wakeup(self._wake)
            lanes.stop()
            self._restore_signals(restore)
            self._threads.stop()
            if self._async is not None:
                self._async.stop()
            try:
                backend.unregister_worker(self.id)
            except BackendError as exc:
                log.warning("worker %s: could not unregister: %s", self.id, exc)
            backend.close()
            self.stopped.set()
            log.info("%s", summary(self, time.monotonic() - began))

    def _connect(self, info: WorkerInfo) -> Backend | None:
        """Open (and migrate) this worker's backend and register the worker, waiting with
        capped backoff while the database cannot be reached: a server that restarts, or a
        deploy that starts workers before the database, is not a reason to exit. None if
        the worker was stopped while it waited. Other errors (a wrong password, a missing
        database) fail at once."""
        if parse_url(self.app.url).scheme == "sqlite":
            options: dict[str, Any] = {"synchronous": self.config.synchronous}
        else:  # the coordinator plus one connection per ctx.transaction() in flight
            options = {
                # (plus the claim lanes and the maintenance services)
                "pool_size": max(10, self.config.concurrency + 4),
                # like SQLite's NORMAL: a lost claim or outcome only re-runs a job
                "synchronous_commit": self.config.synchronous.upper() in ("FULL", "EXTRA"),
            }
        pause, waited = CONNECT_BACKOFF_FIRST, 0.0
        while True:
            backend: Backend | None = None
            try:
                backend = self.app.open_backend(**options)
                backend.register_worker(info)
                if waited:
                    log.info("worker %s: database reachable after %.1f s", self.id, waited)
                return backend
            except BackendError as exc:
                if backend is not None:
                    with contextlib.suppress(Exception):
                        backend.close()
                if not unreachable(exc):
                    raise
                self._take_signals()
                if self._stopping:
                    return None
                log.warning(
                    "worker %s: database unreachable (%s); retrying in %.1f s",
                    self.id, exc, pause,
                )  # fmt: skip
                self._wake.wait(pause)
                self._wake.clear()
                waited += pause
                pause = min(pause * 2, CONNECT_BACKOFF_CAP)

    def _restore_signals(self, restore: dict[int, Any]) -> None:
        for signum, handler in restore.items():
            signal.signal(signum, handler)
        self._stop_relay()

    def _install_signals(self) -> dict[int, Any]:
        if not self.config.install_signal_handlers:
            return {}
        if threading.current_thread() is not threading.main_thread():
            return {}
        restore: dict[int, Any] = {}
        self._start_relay()
        for signum in (signal.SIGTERM, signal.SIGINT):
            restore[signum] = signal.signal(signum, self._on_signal)
        return restore

    def _loop(self, backend: Backend, heartbeat_interval: float) -> None:
        t = _Timers(time.monotonic(), heartbeat_interval, self.config)
        failures = 0
        while True:
            self._wake.clear()
            self.counters["loops"] += 1  # how often it woke: a spinning loop shows here
            self._take_signals()
            try:
                if self._collect():
                    t.want_claim = True
                self._take_trips(backend, t)
                now = time.monotonic()
                self._expire_timeouts(now)
                self._maintain(backend, t, now)
                if self._stopping:
                    if self._drain_step(backend, now):
                        return
                else:
                    self._claim_step(backend, t, now)  # carries outcomes with its claim
                self._write_outcomes(backend, t)  # whatever no claim carried
                failures = 0
            except BackendError as exc:
                failures += 1
                pause = min(5.0, 0.05 * 2 ** min(failures, 7))
                log.warning(
                    "worker %s: database error (%s); retrying in %.2f s", self.id, exc, pause
                )
                self._wake.wait(pause)
                continue
            self._wake.wait(self._wait_time(t))

    def _maintain(self, backend: Backend, t: _Timers, now: float) -> None:
        """Heartbeat, reaper, pruner and scheduler, each on its own timer."""
        cfg = self.config
        if cfg.supervisor_pid is not None and os.getppid() != cfg.supervisor_pid:
            log.error("worker %s: its supervisor died; stopping", self.id)
            self.stop()
        if now >= t.heartbeat or self._heartbeat_requested:
            self._heartbeat_requested = False
            self._heartbeat(backend)
            t.heartbeat = now + t.heartbeat_interval
        if now >= t.reap:
            if self._reaper.run_once():
                t.want_claim, t.suspect_check = True, now
            t.reap = now + (cfg.reap_interval or t.heartbeat_interval)
        if now >= t.prune:
            self._pruner.run_once()
            t.prune = now + cfg.prune_interval
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

    def _drain_step(self, backend: Backend, now: float) -> bool:
        """One step of a graceful stop; True once nothing is held any more."""
        for run in self.inflight.values():
            run.ctx.shutting_down = True
        if self._threads is not None:  # claimed but not started: hand back, do not start
            self._release(backend, self._threads.take_queued(), "released_unstarted")
        if self._immediate or now >= self._drain_deadline or not self.inflight:
            self._release_all(backend)  # also a suspect still waiting to run
        if self.inflight or self.lanes_busy:
            return False
        self._write_outcomes(backend)
        return not self._to_write and not self.lanes_busy

    def _claim_step(self, backend: Backend, t: _Timers, now: float) -> None:
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
        wall = self.app.clock()
        if t.due is not None and wall >= t.due:
            t.want_claim, t.due = True, None
        if t.retry_due is not None and wall >= t.retry_due:
            t.want_claim, t.retry_due = True, None
        if now >= t.poll:
            t.want_claim = True
        look = t.want_claim and now >= t.suspect_check
        if look:  # next_due tells when to look sooner; this is the busy worker's fallback
            t.suspect_check = now + SUSPECT_LOOK_POLLS * cfg.poll_interval
        if look or self._suspect is not None:
            self._take_suspect(backend, look)
        lanes = self._lanes
        assert lanes is not None
        share = -(-self.capacity // lanes.size)  # a lane's part of the capacity, rounded up
        while t.want_claim and lanes.idle:
            free = self._free_slots()
            if free <= 0 or (lanes.busy and free < share):
                break  # a small claim now would only cut the next full one short
            trip = Trip(self._to_write, min(free, share), start_now=self._idle_threads(),
                        started=self._began_since())  # fmt: skip
            self._to_write = []
            t.want_claim = False  # until the batch comes back full, or something changes
            t.poll = time.monotonic() + cfg.poll_interval * random.uniform(0.9, 1.1)
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
                trip.start_now, trip.started,
            )  # fmt: skip
            return
        trip.written = backend.finish_jobs(trip.outcomes, trip.started)
        if trip.ask_due:
            trip.due = backend.next_due(cfg.queues, self._leases)

    def _take_trips(self, backend: Backend, t: _Timers | None) -> None:
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
                self._to_write += [
                    _handed_back(job, "released_unstarted", self.id, wall, wall)
                    for job in trip.jobs
                ]
            else:
                for i, job in enumerate(trip.jobs):
                    buffered = trip.start_now is not None and i >= trip.start_now
                    self._dispatch(backend, job, prefetched=buffered)
            error = error or trip.error
            if t is None:
                continue
            if trip.limit and (trip.error is not None or len(trip.jobs) >= trip.limit):
                t.want_claim = True  # a full batch: more may wait; a failure: try again
            elif trip.limit:
                t.want_due = True  # a short batch: nothing more is due; ask when it will be
            elif trip.ask_due and trip.error is not None:
                t.want_due = True
            if trip.due is not None:
                if trip.due.suspects and self._suspect is None:
                    t.suspect_check = time.monotonic()
                # next_due ignores suspects, so a job it calls due is ours to claim: one that
                # fell due since our claim (a delayed job) is claimed shortly, never left to
                # the poll; the short pause bounds any spin
                wait = trip.due.wait
                t.due = None if wait is None else self.app.clock() + max(wait, 0.005)
        if error is not None:
            raise error

    @property
    def lanes(self) -> int:
        """Claim round trips that may be in flight (the backend's choice once running)."""
        return self._lanes.size if self._lanes is not None else self.config.claim_lanes or 1

    @property
    def lanes_busy(self) -> bool:
        return self._lanes is not None and self._lanes.busy

    def _wait_time(self, t: _Timers) -> float:
        if self._results or ((self._to_write or t.want_due) and not self.lanes_busy):
            return 0.0  # outcomes to write (e.g. from _dispatch) go out now
        now = time.monotonic()
        timers = [t.heartbeat - now, t.reap - now, t.prune - now]
        if self._stopping:  # no claims: only the drain's end, or a returning trip, matters
            if not self.lanes_busy:
                timers.append(self._drain_deadline - now)
        else:
            timers.append(t.poll - now)
            if self._scheduler is not None:
                timers.append(t.schedule - now)
                if t.marker != t.schedule_marker:
                    timers.append(t.schedule_last + self.config.schedule_interval - now)
            for due in (t.due, t.retry_due):
                if due is not None:
                    timers.append(due - self.app.clock())
            if t.suspect_check > now and self._suspect is None and t.want_claim:
                timers.append(t.suspect_check - now)
        if not self._stopping and not self._backend_pushes:
            timers.append(self.config.change_check_interval)
        for run in self.inflight.values():
            if run.deadline is not None:
                timers.append(run.deadline - now)
        return max(0.0, min(timers))

    # -- claiming and running ----------------------------------------------------------

    @property
    def prefetch(self) -> int:
        """Jobs claimed beyond ``concurrency`` so threads never wait on the database.

        By default it adapts to how long jobs run: enough to cover ``PREFETCH_WINDOW`` of
        work, at most ``4 * concurrency`` per claim lane (short jobs, big batches: the
        throughput lever),
        down to none for jobs long enough that a buffered one would only wait while other
        workers idle. A ``prefetch`` setting fixes it."""
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
        else runs."""
        if look and self._suspect is None and self._solo not in self.inflight:
            self._suspect = backend.claim_suspect(self.id, self.config.queues, self._leases)
        if self._suspect is not None and not self.inflight and not self.lanes_busy:
            job, self._suspect = self._suspect, None
            self._solo = job.id
            self.counters["suspects"] += 1
            log.warning("job %s was in a worker that crashed; running it alone", job.id)
            self._dispatch(backend, job)

    def _idle_threads(self) -> int:
        """Threads free for a claim's jobs (a lower bound): the claim marks the rest
        ``prefetched``, so that a crash of this worker does not blame them."""
        busy = sum(1 for r in self.inflight.values() if not r.task.is_async)
        reserved = self._lanes.reserved if self._lanes is not None else 0
        return max(0, self.config.concurrency - busy - len(self._abandoned) - reserved)

    def _began_since(self) -> list[HeldJob]:
        """Buffered jobs whose handlers began since the last round trip: the next trip
        tells the database, so a crash from here on blames them."""
        began = [r for r in self.inflight.values() if r.prefetched and r.begun is not None]
        for run in began:
            run.prefetched = False
        return [HeldJob(r.job.id, r.job.token) for r in began]

    def _dispatch(self, backend: Backend, job: ClaimedJob, prefetched: bool = False) -> None:
        wall = self.app.clock()
        task = self.app.tasks.get(job.task)
        ctx = JobContext(job, backend, self.request_heartbeat)
        if self._stopping:
            ctx.shutting_down = True
        try:
            args, kwargs = decode(job.payload)
        except PayloadError as exc:
            entry = {
                "attempt": job.attempt,
                "outcome": "undecodable",
                "error": str(exc),
                "started_at": wall,
                "ended_at": wall,
            }
            self._to_write.append(
                Outcome(job.id, job.token, JobState.DEAD, error=str(exc), history=entry)
            )
            log.error("job %s: %s", job.id, exc)
            return
        if task is None:
            from ..tasks import Task

            stand_in = Task(
                self.app,
                _unregistered,
                name=job.task,
                queue=job.queue,
                lease=job.lease,
                retry=self.app.default_retry,
                priority=0,
                timeout=None,
            )
            run = Running(job, stand_in, ctx, args, kwargs, wall)
            error = LookupError(f"task {job.task!r} is not registered here (worker {self.id})")
            self._to_write.append(failure(run, error, wall))
            log.error("job %s: %s", job.id, error)
            return
        run = Running(job, task, ctx, args, kwargs, wall, prefetched=prefetched)
        if task.timeout is not None:
            run.deadline = run.started + task.timeout
        self.inflight[job.id] = run
        if task.is_async:
            assert self._async is not None
            self._async.submit(run)
        else:
            assert self._threads is not None
            self._threads.submit(run)

    def _report(self, run: Running, outcome: Outcome) -> None:
        """Called by executor threads when a handler returns."""
        self._results.append((run, outcome))
        self._wake.set()

    def _collect(self) -> bool:
        freed = False
        while self._results:
            run, outcome = self._results.popleft()
            if run in self._abandoned:
                self._abandoned.discard(run)
                freed = True  # its thread is free again
            if run.closed and run.begun is None:
                continue  # given up before a thread started it: nothing ran
            if run.closed:
                self.counters["stale_results"] += 1
                log.warning(
                    "job %s: late result of attempt %s discarded (%s): the job is no "
                    "longer held by this worker",
                    run.job.id,
                    run.job.attempt,
                    outcome.state,
                )
                continue
            run.closed = True
            self.inflight.pop(run.job.id, None)
            freed = True
            if run.begun is not None:
                took = time.monotonic() - run.begun
                self.runtime = took if self.runtime is None else 0.8 * self.runtime + 0.2 * took
            if run.ctx.completed_in_transaction:
                self.counters[JobState.DONE.value] += 1
                continue
            if outcome.state is not JobState.DONE:
                failed_attempt(run, outcome)
            self._to_write.append(outcome)
        return freed

    def _write_outcomes(self, backend: Backend, t: _Timers | None = None) -> None:
        """Outcomes no claim carried go out once no round trip is in flight (one in flight
        takes them on its return, in the next claim: write-only trips beside claims only
        cost commits), with the question of when to look again if a short batch raised it."""
        assert self._lanes is not None
        ask_due = t is not None and t.want_due
        if not (self._to_write or ask_due) or self._lanes.busy:  # (flips of `prefetched`
            # wait for the next trip: until then a crash blames no buffered job)
            return
        if t is not None:
            t.want_due = False
        batch, self._to_write = self._to_write, []
        trip = Trip(batch, 0, ask_due=ask_due, started=self._began_since())
        self._lanes.send(trip, inline=not self.inflight)
        self._take_trips(backend, t)

    def _account(self, batch: list[Outcome], written: Collection[int], t: _Timers | None) -> None:
        """Count what was written, log what was discarded, wake for our own retries."""
        wall = self.app.clock()
        for outcome in batch:
            if outcome.job_id not in written:
                self.counters["stale_results"] += 1
                log.warning(
                    "job %s: outcome %s discarded: the job is no longer held by this "
                    "worker (lease lost or cancelled)",
                    outcome.job_id,
                    outcome.state,
                )
                continue
            self.counters[outcome.state.value] += 1
            if outcome.state is JobState.PENDING and not outcome.uncharge:
                self.counters["retried"] += 1
            if t is not None and outcome.state is JobState.PENDING and outcome.delay is not None:
                retry_at = wall + outcome.delay  # our own retries: wake for them on time
                t.retry_due = retry_at if t.retry_due is None else min(t.retry_due, retry_at)

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
                log.error(
                    "worker %s: all %d slots are held by handlers that were given up (timed "
                    "out or lease lost) and have not returned; no job can start until one "
                    "does: fix the task or restart the worker",
                    self.id,
                    self.config.concurrency,
                )

    def _expire_timeouts(self, now: float) -> None:
        for run in [r for r in self.inflight.values() if r.deadline and now >= r.deadline]:
            run.ctx.timed_out = True
            self._close(run, abandon=True)
            error = TimeoutError(f"timed out after {run.task.timeout:g} s")
            outcome = failure(run, error, self.app.clock(), outcome="timed_out")
            self._to_write.append(outcome)
            self.counters["timed_out"] += 1
            failed_attempt(run, outcome)

    def _heartbeat(self, backend: Backend) -> None:
        held = [HeldJob(r.job.id, r.job.token) for r in self.inflight.values()]
        if self._suspect is not None:
            held.append(HeldJob(self._suspect.id, self._suspect.token))
        if not self.config.heartbeat:
            held = []
        renewed = backend.renew_leases(self.id, held)
        self.counters["heartbeats"] += 1
        for h in held:
            if h.id not in renewed and self._suspect is not None and h.id == self._suspect.id:
                self._suspect = None
                self.counters["leases_lost"] += 1
            if h.id not in renewed and h.id in self.inflight:
                run = self.inflight[h.id]
                if run.ctx.completing:
                    continue  # its own ctx.transaction() finished it: the result is coming
                self._close(run, abandon=True)
                self.counters["leases_lost"] += 1
                log.warning(
                    "job %s (%s): lease lost on attempt %s; the handler is told to stop and "
                    "its result will be discarded",
                    h.id, run.job.task, run.job.attempt, extra=job_fields(run),
                )  # fmt: skip

    def _release_all(self, backend: Backend) -> None:
        """End of drain: hand every job still held back to pending, no attempt charged."""
        runs = list(self.inflight.values())
        for run in runs:
            run.ctx.shutting_down = True
            self._close(run, abandon=False)
        self._release(backend, runs, "released")

    def _release(self, backend: Backend, runs: list[Running], label: str) -> None:
        wall = self.app.clock()
        outcomes = []
        if self._suspect is not None:
            job, self._suspect = self._suspect, None
            outcomes.append(Outcome(job.id, job.token, JobState.PENDING, delay=0.0, uncharge=True))
        for run in runs:
            run.closed = True
            self.inflight.pop(run.job.id, None)
            outcomes.append(_handed_back(run.job, label, self.id, run.started_wall, wall))
        if not outcomes:
            return
        try:
            written = backend.finish_jobs(outcomes)
        except BackendError:  # the jobs are no longer in inflight: keep their outcomes
            self._to_write = outcomes + self._to_write
            raise
        self.counters["released"] += len(written)
        log.info("worker %s: released %d jobs it held (%s)", self.id, len(written), label)


@dataclass
class _Timers:
    """When the coordinator next does each of its periodic duties (monotonic seconds,
    except ``due``, the wall-clock time the next delayed job falls due as the database last
    said, and ``retry_due``, when the earliest retry this worker wrote since falls due).
    The scheduler passes at its next tick, when another connection committed (at most every
    ``schedule_interval``, since a schedule may have been added) and every poll interval."""

    heartbeat: float
    reap: float
    prune: float
    schedule: float
    schedule_last: float
    schedule_marker: int | None
    poll: float
    suspect_check: float
    heartbeat_interval: float
    due: float | None = None
    retry_due: float | None = None
    marker: int | None = None
    want_claim: bool = True
    want_due: bool = False

    def __init__(self, now: float, heartbeat_interval: float, config: WorkerConfig) -> None:
        self.heartbeat = now + heartbeat_interval
        self.reap = now
        self.prune = now + config.prune_interval
        self.schedule = now
        self.schedule_last = now
        self.schedule_marker = None
        self.poll = now
        self.suspect_check = now
        self.heartbeat_interval = heartbeat_interval
        self.due = None
        self.retry_due = None
        self.marker = None
        self.want_claim = True
        self.want_due = False


def _handed_back(
    job: ClaimedJob, label: str, worker: str, started_at: float, now: float
) -> Outcome:
    """A held job given back at shutdown: pending again at once, no attempt charged, the
    hand-back noted in its history as ``label``."""
    entry = {
        "attempt": job.attempt,
        "outcome": label,
        "started_at": started_at,
        "ended_at": now,
        "worker": worker,
    }
    return Outcome(job.id, job.token, JobState.PENDING, delay=0.0, history=entry, uncharge=True)


def _unregistered(*_args: Any, **_kwargs: Any) -> None:
    """Stand-in for a task this worker does not have."""
