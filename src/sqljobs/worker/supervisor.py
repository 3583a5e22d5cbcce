"""``--processes N``: fork N worker processes and keep them running.

The supervisor forwards SIGTERM/SIGINT to its children (a second signal is forwarded too,
so they stop at once). When a child dies by itself, the supervisor hands that child's
jobs back immediately, counted as a crash, instead of waiting for their leases to run
out, and starts a replacement. A job that keeps killing its worker therefore reaches
``dead`` ("crashed its worker 3 times") quickly instead of cycling through the fleet.

A child that exits with :data:`REPLACE_EXIT` asked to be replaced: a cancelled handler in
it would not stop (threads cannot be killed), so it drained its other jobs and left; the
supervisor starts a new one, and the stuck handler ends with the old process.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import time
import uuid
from dataclasses import replace
from types import FrameType
from typing import TYPE_CHECKING

from ..errors import BackendError
from ..maintenance import Reaper
from ..rollup import Meter
from .config import WorkerConfig
from .worker import Worker

if TYPE_CHECKING:
    from ..app import App

log = logging.getLogger("sqljobs.supervisor")

REPLACE_EXIT = 75
"""A child's exit code for "replace me" (EX_TEMPFAIL): not a crash."""


def run_supervised(app: App, config: WorkerConfig, processes: int) -> None:
    """Run ``processes`` worker processes until signalled; restart any that crash."""
    Supervisor(app, config, processes).run()


class Supervisor:
    def __init__(self, app: App, config: WorkerConfig, processes: int) -> None:
        self.app = app
        self.config = config
        self.processes = processes
        self.children: dict[int, str] = {}  # pid -> worker id
        self.signals = 0
        self.prefix = f"{socket.gethostname()}-{os.getpid()}"

    def _spawn(self) -> None:
        """Fork one worker. Signals stay blocked across the fork, so one that arrives
        meanwhile is handled by the child's worker (or forwarded by us), never lost."""
        worker_id = f"{self.prefix}-{uuid.uuid4().hex[:6]}"
        self.app.close()  # never carry an open database connection across fork
        stop_signals = {signal.SIGTERM, signal.SIGINT}
        config = replace(self.config, worker_id=worker_id, supervisor_pid=os.getpid())
        signal.pthread_sigmask(signal.SIG_BLOCK, stop_signals)
        pid = os.fork()
        if pid == 0:  # child
            code = 0
            try:
                worker = Worker(self.app, config)
                for signum in stop_signals:
                    signal.signal(signum, lambda sig, _frame: worker.handle_signal(sig))
                signal.pthread_sigmask(signal.SIG_UNBLOCK, stop_signals)
                worker.run()
                code = REPLACE_EXIT if worker.replace_requested else 0
            except BaseException:
                log.exception("worker %s failed", worker_id)
                code = 1
            finally:
                os._exit(code)
        self.children[pid] = worker_id
        signal.pthread_sigmask(signal.SIG_UNBLOCK, stop_signals)
        for _ in range(min(self.signals, 2)):  # a stop that came while we were forking
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        self.signals += 1
        for pid in list(self.children):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signum)

    def run(self) -> None:
        Worker(self.app, self.config)  # validate settings before forking anything
        previous = {s: signal.signal(s, self._on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
        try:
            for _ in range(self.processes):
                self._spawn()
            recent_crashes: list[float] = []
            while self.children:
                try:
                    pid, status = os.wait()
                except ChildProcessError:
                    break
                worker_id = self.children.pop(pid, None)
                if worker_id is None:
                    continue
                code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else None
                if code == REPLACE_EXIT:
                    log.warning(
                        "worker process %s left to end a cancelled handler that would not "
                        "stop; starting a new one", worker_id,
                    )  # fmt: skip
                    if not self.signals:
                        self._spawn()
                    continue
                crashed = code != 0
                if crashed:
                    self._rescue(worker_id, status)
                if crashed and not self.signals:
                    now = time.monotonic()
                    recent_crashes = [t for t in recent_crashes if now - t < 10] + [now]
                    if len(recent_crashes) > 5 * self.processes:
                        time.sleep(1.0)  # crash loop: slow down restarts
                    self._spawn()
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)

    def _rescue(self, worker_id: str, status: int) -> None:
        how = (
            f"signal {os.WTERMSIG(status)}"
            if os.WIFSIGNALED(status)
            else f"exit code {os.WEXITSTATUS(status)}"
        )
        log.error("worker process %s died (%s); handing its jobs back", worker_id, how)
        try:
            backend = self.app.backend
            meter = Meter()  # the crashed attempts, counted at once: no heartbeat here
            Reaper(backend, self.config.max_crashes, meter).rescue_worker(worker_id)
            meter.flush(backend)
            backend.unregister_worker(worker_id)
        except BackendError as exc:
            log.error("could not hand back the jobs of %s (%s); their leases will", worker_id, exc)
