"""``--processes N``: fork N worker processes and keep them running.

The supervisor forwards SIGTERM/SIGINT to its children (a second signal is forwarded too,
so they stop at once). When a child dies by itself, the supervisor hands that child's
jobs back immediately, counted as a crash, instead of waiting for their leases to run
out, and starts a replacement. A job that keeps killing its worker therefore reaches
``dead`` ("crashed its worker 3 times") quickly instead of cycling through the fleet.

A child that exits with :data:`REPLACE_EXIT` asked to be replaced: a cancelled handler in
it would not stop (threads cannot be killed), so it drained its other jobs and left; the
supervisor starts a new one, and the stuck handler ends with the old process.

A child that exits with :data:`RECYCLE_EXIT` was past ``max_tasks_per_process`` or
``max_memory_per_process``: it drained and is replaced at once. Each child reports on a
pipe when a handler with a ``hard_timeout`` starts and ends (:mod:`.link`); one that
overruns gets its process killed (SIGKILL), the job it was killed for fails as "exceeded
its hard time limit", and the process's other jobs are handed back as after a crash.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import signal
import socket
import time
import uuid
from collections.abc import Callable
from dataclasses import replace
from types import FrameType
from typing import TYPE_CHECKING

from ..errors import BackendError
from ..maintenance import Reaper
from ..maintenance.reaper import Decision, hard_limit_decision, rescue_decision
from ..rollup import Meter
from .config import WorkerConfig
from .link import ChildState, SupervisorLink
from .worker import Worker

if TYPE_CHECKING:
    from ..app import App

log = logging.getLogger("sqljobs.supervisor")

REPLACE_EXIT = 75
"""A child's exit code for "replace me" (EX_TEMPFAIL): not a crash."""

RECYCLE_EXIT = 76
"""A child's exit code after it drained past ``max_tasks_per_process`` or
``max_memory_per_process``: replaced at once, not a crash."""


def run_supervised(app: App, config: WorkerConfig, processes: int) -> None:
    """Run ``processes`` worker processes until signalled; restart any that crash."""
    Supervisor(app, config, processes).run()


class Supervisor:
    def __init__(self, app: App, config: WorkerConfig, processes: int) -> None:
        self.app = app
        self.config = config
        self.processes = processes
        self.children: dict[int, ChildState] = {}  # pid -> what it told us
        self.signals = 0
        self.prefix = f"{socket.gethostname()}-{os.getpid()}"
        self._wake_read, self._wake_write = -1, -1
        self._recent_crashes: list[float] = []  # monotonic times, for the crash-loop delay

    def _spawn(self) -> None:
        """Fork one worker. Signals stay blocked across the fork, so one that arrives
        meanwhile is handled by the child's worker (or forwarded by us), never lost."""
        worker_id = f"{self.prefix}-{uuid.uuid4().hex[:6]}"
        self.app.close()  # never carry an open database connection across fork
        stop_signals = {signal.SIGTERM, signal.SIGINT}
        config = replace(self.config, worker_id=worker_id, supervisor_pid=os.getpid())
        report_read, report_write = os.pipe()
        signal.pthread_sigmask(signal.SIG_BLOCK, stop_signals)
        pid = os.fork()
        if pid == 0:  # child
            code = 0
            try:
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                for fd in (report_read, self._wake_read, self._wake_write):
                    os.close(fd)
                for other in self.children.values():
                    os.close(other.fd)
                worker = Worker(self.app, config, link=SupervisorLink(report_write))
                for signum in stop_signals:
                    signal.signal(signum, lambda sig, _frame: worker.handle_signal(sig))
                signal.pthread_sigmask(signal.SIG_UNBLOCK, stop_signals)
                worker.run()
                if worker.replace_requested:
                    code = REPLACE_EXIT
                elif worker.recycle_reason is not None:
                    code = RECYCLE_EXIT
            except BaseException:
                log.exception("worker %s failed", worker_id)
                code = 1
            finally:
                os._exit(code)
        os.close(report_write)
        os.set_blocking(report_read, False)
        self.children[pid] = ChildState(worker_id, report_read)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, stop_signals)
        for _ in range(min(self.signals, 2)):  # a stop that came while we were forking
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        self.signals += 1
        for pid in list(self.children):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signum)

    def _on_child(self, _signum: int, _frame: FrameType | None) -> None:
        with contextlib.suppress(OSError):  # full: a wake-up is already waiting
            os.write(self._wake_write, b"\0")

    def run(self) -> None:
        Worker(self.app, self.config)  # validate settings before forking anything
        self._wake_read, self._wake_write = os.pipe()
        for fd in (self._wake_read, self._wake_write):
            os.set_blocking(fd, False)
        handlers: dict[signal.Signals, Callable[[int, FrameType | None], None]] = {
            signal.SIGTERM: self._on_signal,
            signal.SIGINT: self._on_signal,
        }
        handlers[signal.SIGCHLD] = self._on_child  # wakes the wait below when a child exits
        previous = {s: signal.signal(s, h) for s, h in handlers.items()}
        try:
            for _ in range(self.processes):
                self._spawn()
            while self.children:
                self._wait()
                self._kill_overdue()
                while self.children:
                    try:
                        pid, status = os.waitpid(-1, os.WNOHANG)
                    except ChildProcessError:
                        return
                    if pid == 0:
                        break
                    self._exited(pid, status)
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            for child in self.children.values():
                os.close(child.fd)
            os.close(self._wake_read)
            os.close(self._wake_write)

    def _wait(self) -> None:
        """Sleep until a child exits, one reports, or a hard time limit falls due."""
        deadlines = [d for c in self.children.values() if (d := c.next_deadline()) is not None]
        timeout = max(0.0, min(deadlines) - time.monotonic()) if deadlines else None
        fds = [self._wake_read, *(c.fd for c in self.children.values() if not c.closed)]
        ready, _, _ = select.select(fds, [], [], timeout)
        now = time.monotonic()
        for child in self.children.values():
            if child.fd in ready:
                self._read(child, now)
        if self._wake_read in ready:
            with contextlib.suppress(OSError):
                os.read(self._wake_read, 512)

    def _read(self, child: ChildState, now: float) -> None:
        while True:
            try:
                data = os.read(child.fd, 65536)
            except BlockingIOError:
                return
            if not data:  # it closed its end (it is exiting): stop watching the pipe
                child.closed = True
                return
            child.feed(data, now)

    def _kill_overdue(self) -> None:
        now = time.monotonic()
        for pid, child in self.children.items():
            overdue = child.overdue(now) if child.killed is None else None
            if overdue is None:
                continue
            log.error(
                "job %s exceeded its hard time limit of %g s; killing worker process %s "
                "(pid %s)", overdue.job_id, overdue.hard_timeout, child.worker_id, pid,
            )  # fmt: skip
            child.killed = overdue
            child.running.clear()
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def _exited(self, pid: int, status: int) -> None:
        child = self.children.pop(pid, None)
        if child is None:
            return
        self._read(child, time.monotonic())  # what it said before it went
        os.close(child.fd)
        worker_id = child.worker_id
        code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else None
        if code == REPLACE_EXIT:
            log.warning(
                "worker process %s left to end a cancelled handler that would not "
                "stop; starting a new one", worker_id,
            )  # fmt: skip
            if not self.signals:
                self._spawn()
            return
        if code == RECYCLE_EXIT:
            label, text = child.recycle or ("max_tasks", "recycled")
            log.info("worker process %s %s; starting a new one", worker_id, text)
            self._count(label)
            if not self.signals:
                self._spawn()
            return
        if child.killed is not None:
            killed = child.killed
            task = self.app.tasks.get(killed.task)
            retry = task.retry if task is not None else self.app.default_retry
            as_crash = rescue_decision(self.config.max_crashes)
            decide = hard_limit_decision(killed.hard_timeout, killed.token, retry, as_crash)
            self._rescue(worker_id, status, {killed.job_id: decide})
            self._count("hard_timeout")
            log.info("worker process %s replaced after its hard time limit kill", worker_id)
            if not self.signals:
                self._spawn()
            return
        crashed = code != 0
        if crashed:
            self._rescue(worker_id, status)
        if crashed and not self.signals:
            now = time.monotonic()
            recent = [t for t in self._recent_crashes if now - t < 10] + [now]
            self._recent_crashes = recent
            if len(recent) > 5 * self.processes:
                time.sleep(1.0)  # crash loop: slow down restarts
            self._spawn()

    def _count(self, reason: str) -> None:
        """Count a replacement in the metrics (the rollup's totals feed ``/metrics``)."""
        try:
            backend = self.app.backend
            meter = Meter()
            meter.replacement(reason, backend.now())
            meter.flush(backend)
        except BackendError as exc:
            log.warning("could not count a worker process replacement (%s)", exc)

    def _rescue(
        self, worker_id: str, status: int, decisions: dict[int, Decision] | None = None
    ) -> None:
        how = (
            f"signal {os.WTERMSIG(status)}"
            if os.WIFSIGNALED(status)
            else f"exit code {os.WEXITSTATUS(status)}"
        )
        log.error("worker process %s died (%s); handing its jobs back", worker_id, how)
        try:
            backend = self.app.backend
            meter = Meter()  # the crashed attempts, counted at once: no heartbeat here
            Reaper(backend, self.config.max_crashes, meter).rescue_worker(worker_id, decisions)
            meter.flush(backend)
            backend.unregister_worker(worker_id)
        except BackendError as exc:
            log.error("could not hand back the jobs of %s (%s); their leases will", worker_id, exc)
