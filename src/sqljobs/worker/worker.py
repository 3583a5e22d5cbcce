"""The worker: one coordinator thread owns the worker's state; executors only run handlers.

The coordinator loop, in order: collect finished handlers and the round trips that came
back; give up jobs past their timeout; renew every held lease in one statement; reap
expired leases; then claim as many jobs as there are free slots, again at once while
batches come back full, each claim carrying the outcomes written so far. Claims go out on
lanes (see :mod:`.lanes`): on PostgreSQL two are in flight at once. Idle, it waits on an
event (set by a local enqueue, a finished handler or a returning round trip) and looks at
the database's change counter every few milliseconds instead of running claim queries;
every ``poll_interval``, as a fallback, it asks when the next job falls due (one read) and
claims if one is (a busy worker claims).
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import random
import socket
import threading
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..backends import worker_options
from ..backends.base import Backend, WorkerInfo
from ..errors import BackendError, ConfigurationError
from ..jobs import ClaimedJob, HeldJob, Outcome
from ..maintenance import Pruner, Reaper, Scheduler
from ..rollup import Meter
from .claiming import Claiming
from .config import WorkerConfig
from .dispatch import Dispatching
from .drain import Draining
from .events import EventKind, OnEvent, Pass, job_event
from .execute import AsyncRunner, Running, ThreadPool, no_hook
from .hooks import WorkerHooks
from .lanes import Lanes
from .report import banner, summary, unreachable
from .signals import Signals
from .state import Sample
from .timers import Timers
from .upkeep import Upkeep

if TYPE_CHECKING:
    from ..app import App

log = logging.getLogger("sqljobs.worker")

CONNECT_BACKOFF_FIRST = 0.1
CONNECT_BACKOFF_CAP = 5.0
"""A worker that cannot reach its database at start-up tries again after these pauses,
doubling from the first to the cap, until it connects or is stopped."""
RETRY_BACKOFF_CAP = 5.0
"""A running worker whose pass failed on a database error (the server down, a timeout, a
full disk) tries again after 0.1 s, doubling up to this, and says when it is back."""


class Worker(Signals, Claiming, Dispatching, Upkeep, Draining):
    """Runs jobs of an App's tasks until stopped. ``run()`` blocks; ``stop()`` is thread-safe."""

    def __init__(
        self,
        app: App,
        config: WorkerConfig | None = None,
        *,
        on_event: OnEvent | None = None,
        **options: Any,
    ) -> None:
        if not app.tasks:
            raise ConfigurationError(
                f"{app!r} has no tasks: a worker would have nothing to run. Give the worker "
                "the App that registers your tasks (sqljobs --app MODULE:ATTR worker)"
            )
        self.app = app
        self.config = config or WorkerConfig(**options)
        # the leases its claims give (each registered task's own, whatever queue a job of
        # it was sent to: a worker claims no other task), not the App's default_lease
        self.shortest_lease = min(t.lease for t in app.tasks.values())
        self.drain_timeout = self.config.checked_drain_timeout(self.shortest_lease)
        self.id = self.config.worker_id or (
            f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        )
        self.runtime: float | None = None  # moving average of handler run time, seconds
        self._leases = {name: task.lease for name, task in app.tasks.items()}
        self._alone = False  # until a heartbeat has counted the live workers
        self._limited = bool(app.queue_limits) or any(
            task.limit is not None for task in app.tasks.values()
        )
        self.inflight: dict[int, Running] = {}
        self._abandoned: set[Running] = set()  # given up, but their threads still run them
        self.stopped = threading.Event()
        self.counters: collections.Counter[str] = collections.Counter()
        # Jitter (poll times, retry delays) draws from the worker's own generator: the
        # global one belongs to the program (a seeded simulation, Hypothesis' draws).
        self.rng = random.Random()
        self._results: collections.deque[tuple[Running, Outcome]] = collections.deque()
        self._to_write: list[Outcome] = []
        self._finishing: dict[tuple[int, int], ClaimedJob] = {}  # by (job id, token)
        self._meter = Meter()
        self._metered: dict[tuple[int, int], Sample] = {}
        self._wake = threading.Event()
        self._stopping = False
        self._immediate = False
        self._drain_deadline = 0.0
        self._heartbeat_requested = False
        self._suspect: ClaimedJob | None = None  # claimed, waiting to run alone
        self._holds: dict[tuple[int, int], bool] = {}
        self._ended_holds: set[tuple[int, int]] = set()
        self._unhold: list[HeldJob] = []
        self._solo: int | None = None  # id of the suspect running alone
        self._backend: Backend | None = None
        self._checks_changes = False
        self._pushed = False
        self._threads: ThreadPool | None = None
        self._async: AsyncRunner | None = None
        self._lanes: Lanes | None = None
        self._signals = 0  # counted by the signal handler, acted on by the coordinator
        self._signals_taken = 0
        self._relay_write: int | None = None
        self._timers: Timers | None = None
        self._began = time.monotonic()
        self._on_event = on_event
        self._hooks: WorkerHooks | None = None  # the App's hooks and middleware, if any
        if app.hooks.for_workers:
            self._hooks = WorkerHooks(app.hooks, self.id, app.clock, on_event)
            if self._hooks.observes:
                self._on_event = self._hooks.observe
        self._progress_lock = threading.Lock()
        self._progress_dirty: set[int] = set()
        self._progress_signalled = False
        self.replace_requested = False
        self._banner_due = False

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

    def request_heartbeat(self) -> None:
        self._heartbeat_requested = True
        self._wake.set()

    # -- main loop ---------------------------------------------------------------------

    def run(self) -> None:
        """Work until stopped; on return every job this worker held is finished or released."""
        restore = self._install_signals()  # a wait for the database must stop on SIGTERM
        try:
            if not self.start():
                return  # stopped while it waited for the database
            try:
                failures, failing_since = 0, 0.0
                while True:
                    try:
                        done = self.run_once()
                    except BackendError as exc:
                        if not failures:
                            failing_since = time.monotonic()
                        failures += 1
                        pause = min(RETRY_BACKOFF_CAP, 0.05 * 2 ** min(failures, 7))
                        what = "unreachable" if unreachable(exc) else "error"
                        log.warning("worker %s: database %s (%s); retrying in %.2f s",
                                    self.id, what, exc, pause)  # fmt: skip
                        self._wake.wait(pause)
                        continue
                    if failures:
                        log.info(
                            "worker %s: database reachable again after %.1f s (%d failed "
                            "passes); resuming", self.id, time.monotonic() - failing_since,
                            failures,
                        )  # fmt: skip
                        failures = 0
                    if done.stopped:
                        return
                    self._wake.wait(done.wait)
            finally:
                self.close()
        finally:
            self._restore_signals(restore)

    def start(self) -> bool:
        """Connect (waiting for an unreachable database), register, and start the threads:
        after this, :meth:`run_once` steps the worker. False if it was stopped while it
        waited for the database. :meth:`run` calls it; tests may call it themselves."""
        heartbeat_interval = self.shortest_lease / 3
        info = WorkerInfo(
            self.id,
            socket.gethostname(),
            os.getpid(),
            self.config.queues,
            self.config.concurrency,
            heartbeat_interval,
            tuple(task.info for task in self.app.tasks.values()),
            tuple(self.app.queue_limit_records(self._served_queues())),
        )
        self._began = time.monotonic()
        backend = self._connect(info)
        if backend is None:
            self.stopped.set()
            return False
        self._backend = backend
        if self._limited:  # (the heartbeat counts them again; --processes start together)
            self._alone = self.config.supervisor_pid is None and backend.live_workers() <= 1
        backend.subscribe(self._wake.set, self.config.queues)  # None: every queue
        backend.notifier.watch_jobs(self._on_job_event)  # cancels, from any host
        self.app.watch_jobs(self._on_job_event)  # cancels from this process
        # a change counter to read between polls: SQLite's; PostgreSQL pushes instead,
        # and in poll-only mode has none, so waking to read it would only spin
        self._checks_changes = not backend.pushes_changes and backend.change_marker() is not None
        self._pushed = backend.pushes_changes
        self._lanes = Lanes(
            self.config.claim_lanes or backend.claim_lanes,
            lambda trip: self._round_trip(backend, trip), self._wake.set, f"sqljobs-{self.id}",
        )  # fmt: skip
        self._reaper = Reaper(backend, self.config.max_crashes, self._meter)
        self._pruner = Pruner(backend, self.app.retention)
        self._scheduler = (
            Scheduler(self.app, backend, grace=self.config.misfire_grace, meter=self._meter)
            if self.config.scheduler
            else None
        )
        started = self._started if self._on_event is not None else no_hook
        self._threads = ThreadPool(
            self.config.concurrency, self._report, self.app.clock, f"sqljobs-{self.id}",
            started, self._hooks,
        )  # fmt: skip
        if any(t.is_async for t in self.app.tasks.values()):
            self._async = AsyncRunner(self._report, self.app.clock, started, self._hooks)
        self._timers = Timers(time.monotonic(), heartbeat_interval, self.config)
        self.app.add_wakeup(self._wake)
        self._banner_due = True  # logged once the first claim went out (it reads the db)
        if self._hooks is not None:
            self._hooks.start(self.config.queues, self.config.concurrency)
        return True

    def run_once(self) -> Pass:
        """One pass of the coordinator: collect what handlers returned, give up timed-out
        ones, do the upkeep that is due (heartbeat, reaper, pruner, scheduler), then claim
        what fits (or, once stopping, drain) and write the outcomes. Returns what it did and
        how long the worker may sleep unless woken. Needs :meth:`start` first."""
        backend, t = self._backend, self._timers
        if backend is None or t is None:
            raise ConfigurationError("Worker.run_once() needs Worker.start() first")
        c = self.counters
        before = c["claimed"], c["finished"], c["released"]
        self._wake.clear()
        self.counters["loops"] += 1  # how often it woke: a spinning loop shows here
        self._take_signals()
        if self._collect():
            t.want_claim = True
        self._take_trips(backend, t)
        now = time.monotonic()
        self._expire_timeouts(now)
        if self.counters["loops"] == 1 and not self._stopping:
            self._claim_step(backend, t, now)  # the first jobs start before any upkeep
        self._maintain(backend, t, now)
        stopped = False
        if self._stopping:
            stopped = self._drain_step(backend, now)
        else:
            self._claim_step(backend, t, now)  # carries outcomes with its claim
        if self._banner_due:
            self._banner_due = False
            log.info("%s", banner(self, backend, t.heartbeat_interval))
        if not stopped:
            self._write_outcomes(backend, t)  # whatever no claim carried
        return Pass(
            claimed=c["claimed"] - before[0],
            finished=c["finished"] - before[1],
            released=c["released"] - before[2],
            stopped=stopped,
            wait=0.0 if stopped else self._wait_time(t),
        )

    def run_until(self, done: Callable[[], object], timeout: float = 30.0) -> None:
        """Step the worker until ``done()`` is true, sleeping between passes only until
        something wakes it (a handler returning, a round trip, an enqueue) or a timer is
        due. Raises ``TimeoutError`` after ``timeout`` seconds. For tests and embedding."""
        deadline = time.monotonic() + timeout
        while not done():
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"worker {self.id}: not done after {timeout:g} s")
            step = self.run_once()
            if step.stopped:
                if done():
                    return
                raise TimeoutError(f"worker {self.id} stopped before it was done")
            if not done():
                self._wake.wait(min(step.wait, left))

    def close(self) -> None:
        """Release what is left (after a drain, nothing), stop the threads, unregister and
        close the connections. :meth:`run` calls it."""
        backend = self._backend
        if backend is None:
            return
        self.app.remove_wakeup(self._wake)
        self.app.unwatch_jobs(self._on_job_event)
        backend.notifier.unwatch_jobs(self._on_job_event)
        if self._lanes is not None:
            self._lanes.stop()
        if self._threads is not None:
            self._threads.stop()
        if self._async is not None:
            self._async.stop()
        self._meter.flush(backend)  # what was tallied since the last heartbeat
        try:
            backend.unregister_worker(self.id)
        except BackendError as exc:
            log.warning("worker %s: could not unregister: %s", self.id, exc)
        backend.close()
        self._backend = None
        if self._hooks is not None:  # before `stopped`: whoever waits on it sees them done
            self._hooks.stop(self.config.queues, self.config.concurrency, dict(self.counters))
        self.stopped.set()
        log.info("%s", summary(self, time.monotonic() - self._began))

    def __enter__(self) -> Worker:
        if not self.start():
            raise ConfigurationError(f"worker {self.id} was stopped before it started")
        return self

    def __exit__(self, *_exc: object) -> None:
        """Drain as SIGTERM would (jobs still running after the drain timeout are
        released), then close."""
        if self._backend is None:
            return
        self.stop()
        try:
            while not (step := self.run_once()).stopped:
                self._wake.wait(step.wait)
        finally:
            self.close()

    def _on_job_event(self, kind: str, job_id: int | None) -> None:
        """From the notifier's thread: a job was cancelled. The next pass runs a heartbeat
        (one statement), which finds out whether it was ours and tells its handler; asked
        for every cancel, since the job may be in a claim on its way back."""
        if kind == "cancel" and self._backend is not None:
            self.request_heartbeat()

    def _event(
        self, kind: EventKind, job: ClaimedJob, state: str | None = None, detail: str | None = None
    ) -> None:
        """Tell the ``on_event`` hook (built only when there is one: this runs per job); a
        hook that raises is logged, never fatal."""
        if self._on_event is None:
            return
        event = job_event(kind, job, self.id, state, detail)
        try:
            self._on_event(event)
        except Exception:
            log.exception("worker %s: the on_event hook raised on %s", self.id, event)

    def _served_queues(self) -> list[str]:
        """The queues this worker claims from: those it was given, else its tasks'."""
        if self.config.queues:
            return list(self.config.queues)
        return sorted({task.queue for task in self.app.tasks.values()})

    def _connect(self, info: WorkerInfo) -> Backend | None:
        """Open (and migrate) this worker's backend and register the worker, waiting with
        capped backoff while the database cannot be reached: a server that restarts, or a
        deploy that starts workers before the database, is not a reason to exit. None if
        the worker was stopped while it waited. Other errors (a wrong password, a missing
        database) fail at once."""
        options = worker_options(self.app.url, self.config.concurrency, self.config.synchronous)
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

    def _wait_time(self, t: Timers) -> float:
        if self._results:
            return 0.0
        # outcomes to write (e.g. from _dispatch) go out now, with the question of when to
        # look again if one is due; that question waits for its batch's jobs to begin
        hold = self._due_question_wait(t) if t.want_due and not self.lanes_busy else 0.0
        if (self._to_write or t.want_due) and not self.lanes_busy and not hold:
            return 0.0
        now = time.monotonic()
        timers = [t.heartbeat - now, t.reap - now, t.prune - now]
        if hold:
            timers.append(hold)
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
        if not self._stopping and self._checks_changes:
            timers.append(self.config.change_check_interval)
        for run in self.inflight.values():
            if run.deadline is not None:
                timers.append(run.deadline - now)
        if self._progress_signalled:
            timers.append(t.progress - now)
        for run in self._abandoned:  # a cancelled handler's grace runs out
            if run.cancelled_at is not None and not run.overdue and run.begun is not None:
                timers.append(run.cancelled_at + self.config.cancel_grace - now)
        if self._heartbeat_requested:
            timers.append(0.0)
        return max(0.0, min(timers))

    # -- claiming and running ----------------------------------------------------------
