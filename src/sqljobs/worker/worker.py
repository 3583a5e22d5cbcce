"""The worker: one coordinator thread owns the database; executors only run handlers.

The coordinator loop, in order: collect finished handlers and write their outcomes in one
batch; give up jobs past their timeout; renew every held lease in one statement; reap
expired leases; then claim as many jobs as there are free slots, again at once while
batches come back full. Idle, it waits on an event (set by a local enqueue or a finished
handler) and looks at the database's change counter every few milliseconds instead of
running claim queries; a claim query still runs every ``poll_interval`` as a fallback.
"""

from __future__ import annotations

import collections
import logging
import os
import signal
import socket
import threading
import time
import uuid
from types import FrameType
from typing import TYPE_CHECKING, Any

from ..backends.base import Backend, WorkerInfo
from ..context import JobContext
from ..errors import BackendError, PayloadError
from ..jobs import ClaimedJob, HeldJob, JobState, Outcome
from ..maintenance import Pruner, Reaper
from ..payload import decode
from ..url import parse_url
from .config import WorkerConfig
from .execute import AsyncRunner, Running, ThreadPool, failure

if TYPE_CHECKING:
    from ..app import App

log = logging.getLogger("sqljobs.worker")


class Worker:
    """Runs jobs of an App's tasks until stopped. ``run()`` blocks; ``stop()`` is thread-safe."""

    def __init__(self, app: App, config: WorkerConfig | None = None, **options: Any) -> None:
        self.app = app
        self.config = config or WorkerConfig(**options)
        leases = [t.lease for t in app.tasks.values()] or [app.default_lease]
        self.shortest_lease = min([*leases, app.default_lease])
        self.drain_timeout = self.config.checked_drain_timeout(self.shortest_lease)
        self.id = self.config.worker_id or (
            f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        )
        self.capacity = self.config.concurrency + self.config.prefetch
        self._leases = {name: task.lease for name, task in app.tasks.items()}
        self.inflight: dict[int, Running] = {}
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
        self._threads: ThreadPool | None = None
        self._async: AsyncRunner | None = None

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
        self.stop(immediate=self._stopping)

    def request_heartbeat(self) -> None:
        self._heartbeat_requested = True
        self._wake.set()

    # -- main loop ---------------------------------------------------------------------

    def run(self) -> None:
        """Work until stopped; on return every job this worker held is finished or released."""
        if parse_url(self.app.url).scheme == "sqlite":
            options: dict[str, Any] = {"synchronous": self.config.synchronous}
        else:  # the coordinator plus one connection per ctx.transaction() in flight
            options = {"pool_size": max(10, self.config.concurrency + 2)}
        backend = self._backend = self.app.open_backend(**options)
        backend.subscribe(self._wake.set)
        self._reaper = Reaper(backend, self.config.max_crashes)
        self._pruner = Pruner(backend, self.app.retention)
        heartbeat_interval = self.shortest_lease / 3
        backend.register_worker(
            WorkerInfo(
                self.id,
                socket.gethostname(),
                os.getpid(),
                self.config.queues,
                self.config.concurrency,
                heartbeat_interval,
            )
        )
        self._threads = ThreadPool(
            self.config.concurrency, self._report, self.app.clock, f"sqljobs-{self.id}"
        )
        if any(t.is_async for t in self.app.tasks.values()):
            self._async = AsyncRunner(self._report, self.app.clock)
        self.app.add_wakeup(self._wake)
        restore = self._install_signals()
        try:
            self._loop(backend, heartbeat_interval)
        finally:
            self.app.remove_wakeup(self._wake)
            for signum, handler in restore.items():
                signal.signal(signum, handler)
            self._threads.stop()
            if self._async is not None:
                self._async.stop()
            try:
                backend.unregister_worker(self.id)
            except BackendError as exc:
                log.warning("worker %s: could not unregister: %s", self.id, exc)
            backend.close()
            self.stopped.set()
            log.info("worker %s: stopped (%s)", self.id, dict(self.counters))

    def _install_signals(self) -> dict[int, Any]:
        if not self.config.install_signal_handlers:
            return {}
        if threading.current_thread() is not threading.main_thread():
            return {}
        restore: dict[int, Any] = {}
        for signum in (signal.SIGTERM, signal.SIGINT):
            restore[signum] = signal.signal(signum, self._on_signal)
        return restore

    def _loop(self, backend: Backend, heartbeat_interval: float) -> None:
        cfg = self.config
        reap_interval = cfg.reap_interval or heartbeat_interval
        now = time.monotonic()
        next_heartbeat = now + heartbeat_interval
        next_reap = now
        next_prune = now + cfg.prune_interval
        next_poll = now
        next_due: float | None = None
        next_suspect_check = now
        marker = self._change_marker(backend)
        want_claim = True
        failures = 0
        while True:
            self._wake.clear()
            try:
                if self._collect():
                    want_claim = True
                self._write_outcomes(backend)
                now = time.monotonic()
                self._expire_timeouts(now)
                if cfg.supervisor_pid is not None and os.getppid() != cfg.supervisor_pid:
                    log.error("worker %s: its supervisor died; stopping", self.id)
                    self.stop()
                if now >= next_heartbeat or self._heartbeat_requested:
                    self._heartbeat_requested = False
                    self._heartbeat(backend)
                    next_heartbeat = now + heartbeat_interval
                if now >= next_reap:
                    if self._reaper.run_once():
                        want_claim, next_suspect_check = True, now
                    next_reap = now + reap_interval
                if now >= next_prune:
                    self._pruner.run_once()
                    next_prune = now + cfg.prune_interval
                if self._stopping:
                    for run in self.inflight.values():
                        run.ctx.shutting_down = True
                    if self._immediate or now >= self._drain_deadline or not self.inflight:
                        self._release_all(backend)  # also a suspect still waiting to run
                    if not self.inflight:
                        self._write_outcomes(backend)
                        if not self._to_write:
                            return
                else:
                    current = self._change_marker(backend)
                    if current != marker:
                        marker, want_claim = current, True
                    wall = self.app.clock()
                    if next_due is not None and wall >= next_due:
                        want_claim, next_due = True, None
                    if now >= next_poll:
                        want_claim = True
                    look = want_claim and now >= next_suspect_check
                    if look:
                        next_suspect_check = now + cfg.poll_interval
                    if look or self._suspect is not None:
                        self._take_suspect(backend, look)
                    free = self._free_slots()
                    while want_claim and free > 0:
                        jobs = backend.claim_jobs(self.id, cfg.queues, free, self._leases)
                        next_poll = time.monotonic() + cfg.poll_interval
                        self.counters["claims"] += 1
                        for job in jobs:
                            self._dispatch(backend, job)
                        if len(jobs) < free:
                            want_claim = False
                            next_due = backend.next_due(cfg.queues)
                            if next_due is not None and next_due <= self.app.clock():
                                next_due = None  # due but not ours to take: the poll retries
                        free = self._free_slots()
                failures = 0
            except BackendError as exc:
                failures += 1
                pause = min(5.0, 0.05 * 2 ** min(failures, 7))
                log.warning(
                    "worker %s: database error (%s); retrying in %.2f s", self.id, exc, pause
                )
                self._wake.wait(pause)
                continue
            self._wake.wait(self._wait_time(next_heartbeat, next_reap, next_poll, next_due))

    def _wait_time(self, *deadlines: float | None) -> float:
        now = time.monotonic()
        wall = self.app.clock()
        timers = [d - now for d in deadlines[:3] if d is not None]
        if deadlines[3] is not None:
            timers.append(deadlines[3] - wall)
        if self._stopping:
            timers.append(self._drain_deadline - now)
        else:
            timers.append(self.config.change_check_interval)
        for run in self.inflight.values():
            if run.deadline is not None:
                timers.append(run.deadline - now)
        return max(0.0, min(timers))

    @staticmethod
    def _change_marker(backend: Backend) -> int | None:
        return backend.change_marker()

    # -- claiming and running ----------------------------------------------------------

    def _free_slots(self) -> int:
        """No claims while a suspect waits for the worker to empty or runs alone."""
        if self._suspect is not None or self._solo in self.inflight:
            return 0
        return self.capacity - len(self.inflight)

    def _take_suspect(self, backend: Backend, look: bool) -> None:
        """Claim a job that was in a crashed worker (if ``look``), then run it once nothing
        else runs."""
        if look and self._suspect is None and self._solo not in self.inflight:
            self._suspect = backend.claim_suspect(self.id, self.config.queues, self._leases)
        if self._suspect is not None and not self.inflight:
            job, self._suspect = self._suspect, None
            self._solo = job.id
            self.counters["suspects"] += 1
            log.warning("job %s was in a worker that crashed; running it alone", job.id)
            self._dispatch(backend, job)

    def _dispatch(self, backend: Backend, job: ClaimedJob) -> None:
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
        run = Running(job, task, ctx, args, kwargs, wall)
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
            if run.ctx.completed_in_transaction:
                self.counters[JobState.DONE.value] += 1
                continue
            self._to_write.append(outcome)
        return freed

    def _write_outcomes(self, backend: Backend) -> None:
        if not self._to_write:
            return
        batch, self._to_write = self._to_write, []
        try:
            written = set(backend.finish_jobs(batch))
        except BackendError:
            self._to_write = batch + self._to_write
            raise
        for outcome in batch:
            if outcome.job_id in written:
                self.counters[outcome.state.value] += 1
            else:
                self.counters["stale_results"] += 1
                log.warning(
                    "job %s: outcome %s discarded: the job is no longer held by this "
                    "worker (lease lost or cancelled)",
                    outcome.job_id,
                    outcome.state,
                )

    def _close(self, run: Running, *, abandon: bool) -> None:
        run.closed = True
        run.ctx.lease_lost = True
        self.inflight.pop(run.job.id, None)
        if run.future is not None:
            run.future.cancel()
        elif abandon and not run.abandoned and self._threads is not None:
            run.abandoned = True
            self._threads.add_thread()

    def _expire_timeouts(self, now: float) -> None:
        for run in [r for r in self.inflight.values() if r.deadline and now >= r.deadline]:
            run.ctx.timed_out = True
            self._close(run, abandon=True)
            error = TimeoutError(f"timed out after {run.task.timeout:g} s")
            self._to_write.append(failure(run, error, self.app.clock(), outcome="timed_out"))
            self.counters["timed_out"] += 1
            log.error(
                "job %s: attempt %s timed out after %.3g s",
                run.job.id,
                run.job.attempt,
                run.task.timeout,
            )

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
                self._close(run, abandon=True)
                self.counters["leases_lost"] += 1
                log.warning(
                    "job %s: lease lost (attempt %s); the handler is told to stop and "
                    "its result will be discarded",
                    h.id,
                    run.job.attempt,
                )

    def _release_all(self, backend: Backend) -> None:
        """End of drain: hand every job still held back to pending, no attempt charged."""
        wall = self.app.clock()
        outcomes = []
        if self._suspect is not None:
            job, self._suspect = self._suspect, None
            outcomes.append(Outcome(job.id, job.token, JobState.PENDING, delay=0.0, uncharge=True))
        for run in list(self.inflight.values()):
            run.ctx.shutting_down = True
            self._close(run, abandon=False)
            entry = {
                "attempt": run.job.attempt,
                "outcome": "released",
                "started_at": run.started_wall,
                "ended_at": wall,
                "worker": self.id,
            }
            outcomes.append(
                Outcome(
                    run.job.id,
                    run.job.token,
                    JobState.PENDING,
                    delay=0.0,
                    history=entry,
                    uncharge=True,
                )
            )
        if not outcomes:
            return
        written = backend.finish_jobs(outcomes)
        self.counters["released"] += len(written)
        log.info(
            "worker %s: released %d jobs still running at the end of the drain",
            self.id,
            len(written),
        )


def _unregistered(*_args: Any, **_kwargs: Any) -> None:
    """Stand-in for a task this worker does not have."""
