"""The worker: a coordinator thread that steps five parts, each an object with its own
state, and passes values between them.

- :class:`~.producer.Producer` decides when to look, claims on lanes (two round trips in
  flight on PostgreSQL), each claim carrying the outcomes written so far;
- :class:`~.dispatcher.Dispatcher` hands each claimed job to a thread or the event loop;
- :class:`~.completer.Completer` collects what handlers return and accounts for it once
  written;
- :class:`~.upkeep.Upkeep` renews leases, writes progress, gives up timed-out runs and
  runs the reaper, pruner and scheduler on their timers;
- :class:`~.shutdown.Shutdown` takes signals and drains.

They share what the worker holds (:class:`~.holding.Holding`), its counters, its metrics
meter, its wake-up event and the stop state, each handed over explicitly. A pass, in
order: collect finished handlers and the round trips that came back; give up jobs past
their timeout; the upkeep that is due; then claim as many jobs as there are free slots
(or, once stopping, drain) and write what no claim carried. Idle, the coordinator waits
on the wake-up event (set by a local enqueue, a finished handler or a returning round
trip) until the soonest timer of any part.
"""

from __future__ import annotations

import collections
import logging
import os
import random
import socket
import threading
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..backends.base import Backend, WorkerInfo
from ..errors import BackendError, ConfigurationError
from ..limits import queue_limit_records
from ..rollup import Meter
from .completer import Completer
from .config import WorkerConfig
from .connect import connect, unreachable
from .dispatcher import Dispatcher
from .events import Emitter, OnEvent, Pass
from .holding import Holding
from .hook_runner import WorkerHooks
from .link import SupervisorLink
from .log_lines import banner, summary
from .producer import Producer
from .recycling import RecycleLimits
from .shutdown import Shutdown, StopState
from .upkeep import ProgressReports, Upkeep

if TYPE_CHECKING:
    from ..app import App

log = logging.getLogger("sqljobs.worker")

RETRY_BACKOFF_CAP = 5.0
"""A running worker whose pass failed on a database error (the server down, a timeout, a
full disk) tries again after 0.1 s, doubling up to this, and says when it is back."""


class Worker:
    """Runs jobs of an App's tasks until stopped. ``run()`` blocks; ``stop()`` is thread-safe."""

    def __init__(
        self,
        app: App,
        config: WorkerConfig | None = None,
        *,
        on_event: OnEvent | None = None,
        link: SupervisorLink | None = None,
        **options: Any,
    ) -> None:
        """``link``: set by a ``--processes`` supervisor for its child, which then reports
        to it and is subject to recycling and hard time limits."""
        if not app.tasks:
            raise ConfigurationError(
                f"{app!r} has no tasks: a worker would have nothing to run. Give the worker "
                "the App that registers your tasks (sqljobs --app MODULE:ATTR worker)"
            )
        self.app = app
        self.config = cfg = config or WorkerConfig(**options)
        # the leases its claims give (each registered task's own, whatever queue a job of
        # it was sent to: a worker claims no other task), not the App's default_lease
        self.shortest_lease = min(t.lease for t in app.tasks.values())
        self.drain_timeout = cfg.checked_drain_timeout(self.shortest_lease)
        self.id = cfg.worker_id or f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self.stopped = threading.Event()
        self.counters: collections.Counter[str] = collections.Counter()
        # Jitter (poll times, retry delays) draws from the worker's own generator: the
        # global one belongs to the program (a seeded simulation, Hypothesis' draws).
        self.rng = random.Random()
        self.replace_requested = False  # a cancelled handler would not stop: replace this process
        self.recycle_reason: tuple[str, str] | None = None  # (label, text): past a limit
        self._link = link
        # only a supervised process is recycled: alone, exiting would stop all work
        memory = cfg.max_memory_per_process
        assert memory is None or isinstance(memory, int)  # WorkerConfig made it bytes
        supervised = link is not None
        self._limits = RecycleLimits(
            cfg.max_tasks_per_process if supervised else None, memory if supervised else None
        )
        self._wake = threading.Event()  # set by any thread that has news for the coordinator
        self._backend: Backend | None = None
        self._began = time.monotonic()
        self._banner_due = False
        self._hooks: WorkerHooks | None = None  # the App's hooks and middleware, if any
        if app.hooks.for_workers:
            self._hooks = WorkerHooks(app.hooks, self.id, app.clock, on_event)
            if self._hooks.observes:
                on_event = self._hooks.observe
        self._meter = Meter()  # tallied until the next heartbeat's flush
        self._stop = StopState()
        self._held = Holding(self.id, cfg.concurrency)
        self.inflight = self._held.inflight  # claimed jobs this worker holds
        emit = Emitter(on_event, self.id)
        held, counters, wake = self._held, self.counters, self._wake
        self._completer = Completer(
            worker_id=self.id, clock=app.clock, holding=held, counters=counters,
            meter=self._meter, wake=wake, emit=emit,
        )  # fmt: skip
        progress = ProgressReports(self._wake)
        self._dispatcher = Dispatcher(
            app=app, worker_id=self.id, concurrency=cfg.concurrency, holding=held,
            completer=self._completer, stop=self._stop, rng=self.rng, emit=emit,
            hooks=self._hooks, request_heartbeat=self.request_heartbeat,
            progress_reported=progress.reported, link=link,
        )  # fmt: skip
        self._producer = Producer(
            app=app, config=cfg, worker_id=self.id, completer=self._completer,
            dispatcher=self._dispatcher, holding=held, stop=self._stop, counters=counters,
            rng=self.rng, wake=wake,
        )  # fmt: skip
        self._producer.claim_budget = self._limits.max_tasks
        self._upkeep = Upkeep(
            app=app, config=cfg, worker_id=self.id, completer=self._completer,
            progress=progress, stop=self._stop, meter=self._meter, emit=emit,
            claim_soon=self._producer.claim_soon, count_peers=self._producer.count_peers,
            orphaned=self.stop, stuck=self._replace, holding=held, counters=counters, wake=wake,
        )  # fmt: skip
        self._upkeep.hard_limits = supervised
        self._shutdown = Shutdown(
            worker_id=self.id, drain_timeout=self.drain_timeout,
            install_signal_handlers=cfg.install_signal_handlers, state=self._stop,
            wake=wake, holding=held, completer=self._completer,
            dispatcher=self._dispatcher, producer=self._producer,
        )  # fmt: skip

    # -- control -----------------------------------------------------------------------

    def stop(self, immediate: bool = False) -> None:
        """Stop claiming and drain (graceful), or release everything now (``immediate``)."""
        self._shutdown.request(immediate)

    def handle_signal(self, signum: int) -> None:
        """Act as if the process received ``signum`` (SIGTERM or SIGINT): the first drains,
        a second stops at once. Safe from a signal handler (it takes no lock), so a
        supervisor or an embedding program can forward its own signals here."""
        self._shutdown.handle_signal(signum)

    def request_heartbeat(self) -> None:
        self._upkeep.request_heartbeat()

    def _replace(self) -> None:
        """A cancelled handler will not stop: drain, and exit to be replaced."""
        self.replace_requested = True
        self.stop()

    def _check_limits(self, finished: int) -> None:
        """Between jobs: past a recycling limit, stop claiming, drain and exit to be
        replaced (the supervisor is told why, for its log line and metric)."""
        reason = self._limits.reason(finished)
        if reason is None:
            return
        self.recycle_reason = reason
        log.info("worker %s: %s; draining to be replaced", self.id, reason[1])
        if self._link is not None:
            self._link.recycling(*reason)
        self.stop()

    # -- what it measures --------------------------------------------------------------

    @property
    def runtime(self) -> float | None:
        """Moving average of how long handlers ran, seconds (None: none ran yet)."""
        return self._completer.runtime

    @runtime.setter
    def runtime(self, value: float | None) -> None:
        self._completer.runtime = value

    @property
    def lanes(self) -> int:
        """Claim round trips that may be in flight (the backend's choice once running)."""
        return self._producer.lanes

    @property
    def lanes_busy(self) -> bool:
        return self._producer.lanes_busy

    @property
    def prefetch(self) -> int:
        """Jobs claimed beyond ``concurrency`` so threads never wait on the database.

        By default it adapts to how long jobs run: enough to cover ``PREFETCH_WINDOW`` of
        work, at most ``PREFETCH_CAP * concurrency`` per claim lane (short jobs, big
        batches: the throughput lever), down to none for jobs long enough that a buffered
        one would only wait while other workers idle. A ``prefetch`` setting fixes it."""
        return self._producer.prefetch

    @property
    def capacity(self) -> int:
        return self._producer.capacity

    @property
    def settled(self) -> bool:
        """Nothing claimed, running, returned uncollected, buffered or on a round trip:
        every attempt this worker began has its outcome written and its events told."""
        completer = self._completer
        return not (
            self.inflight
            or self._held.suspect is not None
            or self._producer.lanes_busy
            or completer.returned
            or completer.buffered
        )

    # -- main loop ---------------------------------------------------------------------

    def run(self) -> None:
        """Work until stopped; on return every job this worker held is finished or released."""
        restore = self._shutdown.install_signals()  # a wait for the database must stop on SIGTERM
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
            self._shutdown.restore_signals(restore)

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
            tuple(queue_limit_records(self.app.queue_limits, self._served_queues())),
        )
        self._began = time.monotonic()
        backend = connect(self.app, self.config, info, self._shutdown.requested, self._wake)
        if backend is None:
            self.stopped.set()
            return False
        self._backend = backend
        backend.subscribe(self._wake.set, self.config.queues)  # None: every queue
        backend.notifier.watch_jobs(self._on_job_event)  # cancels, from any host
        self.app._wakeups.watch_jobs(self._on_job_event)  # cancels from this process
        upkeep = self._upkeep
        upkeep.start(backend, heartbeat_interval)
        self._producer.start(backend, upkeep.schedules_read if upkeep.scheduler else None)
        self._dispatcher.start()
        self.app._wakeups.subscribe(self._wake.set)
        self._banner_due = True  # logged once the first claim went out (it reads the db)
        if self._hooks is not None:
            self._hooks.start(self.config.queues, self.config.concurrency)
        return True

    def run_once(self) -> Pass:
        """One pass of the coordinator: collect what handlers returned, give up timed-out
        ones, do the upkeep that is due (heartbeat, reaper, pruner, scheduler), then claim
        what fits (or, once stopping, drain) and write the outcomes. Returns what it did and
        how long the worker may sleep unless woken. Needs :meth:`start` first."""
        backend = self._backend
        if backend is None:
            raise ConfigurationError("Worker.run_once() needs Worker.start() first")
        producer, stop, c = self._producer, self._stop, self.counters
        before = c["claimed"], c["finished"], c["released"]
        self._wake.clear()
        c["loops"] += 1  # how often it woke: a spinning loop shows here
        self._shutdown.take_signals()
        if self._completer.collect():
            producer.claim_soon()
        if self._limits.active and not stop.stopping:
            taken = producer.jobs_taken
            spent = self._limits.max_tasks is not None and taken >= self._limits.max_tasks
            if c["finished"] != before[1] or (spent and not self.inflight):
                self._check_limits(c["finished"] if self.inflight else max(taken, c["finished"]))
        producer.take_trips(backend)
        now = time.monotonic()
        self._upkeep.expire_timeouts(now)
        if c["loops"] == 1 and not stop.stopping:
            producer.claim_step(backend, now)  # the first jobs start before any upkeep
        self._upkeep.maintain(backend, now, producer.marker)
        stopped = False
        if stop.stopping:
            stopped = self._shutdown.drain_step(backend, now)
        else:
            producer.claim_step(backend, now)  # carries outcomes with its claim
        if self._banner_due:
            self._banner_due = False
            log.info("%s", banner(self, backend, self._upkeep.heartbeat_interval))
        if not stopped:
            producer.write_outcomes(backend)  # whatever no claim carried
        return Pass(
            claimed=c["claimed"] - before[0],
            finished=c["finished"] - before[1],
            released=c["released"] - before[2],
            stopped=stopped,
            wait=0.0 if stopped else self._wait_time(),
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

    def wait_for_wakeup(self, timeout: float) -> bool:
        """Sleep until something wakes the worker (a handler returning, a round trip
        coming back, a local enqueue, a stop) or ``timeout`` seconds pass, as :meth:`run`
        does between passes; True if woken. For whoever steps it with :meth:`run_once`."""
        return self._wake.wait(timeout)

    def close(self) -> None:
        """Release what is left (after a drain, nothing), stop the threads, unregister and
        close the connections. :meth:`run` calls it."""
        backend = self._backend
        if backend is None:
            return
        self.app._wakeups.unsubscribe(self._wake.set)
        self.app._wakeups.unwatch_jobs(self._on_job_event)
        backend.notifier.unwatch_jobs(self._on_job_event)
        self._producer.stop()
        self._dispatcher.stop()
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

    def _served_queues(self) -> list[str]:
        """The queues this worker claims from: those it was given, else its tasks'."""
        if self.config.queues:
            return list(self.config.queues)
        return sorted({task.queue for task in self.app.tasks.values()})

    def _wait_time(self) -> float:
        """Seconds the coordinator may sleep unless woken: until the soonest timer of any
        part (0 while results or outcomes wait)."""
        if self._completer.returned:
            return 0.0
        now = time.monotonic()
        producer = self._producer
        soonest = producer.wait(now)
        if soonest <= 0.0:
            return 0.0
        soonest = min(soonest, self._upkeep.wait(now, producer.marker))
        if self._stop.stopping and not producer.lanes_busy:  # only the drain's end, or a
            soonest = min(soonest, self._stop.drain_deadline - now)  # returning trip, matters
        return max(0.0, soonest)
