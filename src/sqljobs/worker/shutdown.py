"""Shutdown: signals, the stop request, and the drain.

SIGTERM drains, a second signal stops at once. The handler only counts and writes a byte
to a pipe; a relay thread wakes the coordinator, which acts on the count. A graceful stop
hands back what never started, waits for running handlers up to the drain timeout, then
releases what is still held, with no attempt charged.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import time
from dataclasses import dataclass
from types import FrameType
from typing import TYPE_CHECKING, Any

from ..backends.base import Backend

if TYPE_CHECKING:
    from .completer import Completer
    from .dispatcher import Dispatcher
    from .holding import Holding
    from .producer import Producer

log = logging.getLogger("sqljobs.worker")


@dataclass
class StopState:
    """Whether the worker is stopping (no more claims; drain), whether at once, and when
    the drain ends (monotonic). Written by :class:`Shutdown` from any thread; every part
    reads it."""

    stopping: bool = False
    immediate: bool = False
    drain_deadline: float = 0.0


class Shutdown:
    def __init__(
        self,
        *,
        worker_id: str,
        drain_timeout: float,
        install_signal_handlers: bool,
        state: StopState,
        wake: threading.Event,
        holding: Holding,
        completer: Completer,
        dispatcher: Dispatcher,
        producer: Producer,
    ) -> None:
        self._worker_id = worker_id
        self._drain_timeout = drain_timeout
        self._install = install_signal_handlers
        self.state = state
        self._wake = wake
        self._held = holding
        self._completer = completer
        self._dispatcher = dispatcher
        self._producer = producer
        self._signals = 0  # counted by the signal handler, acted on by the coordinator
        self._signals_taken = 0
        self._relay_write: int | None = None

    # -- the stop request ----------------------------------------------------------------

    def request(self, immediate: bool = False) -> None:
        """Stop claiming and drain (graceful), or release everything now (``immediate``).
        Thread-safe."""
        state = self.state
        if not state.stopping:
            state.drain_deadline = time.monotonic() + self._drain_timeout
            state.stopping = True
            log.info(
                "worker %s: stopping, draining up to %.1f s", self._worker_id, self._drain_timeout
            )
        if immediate:
            state.immediate = True
        self._wake.set()

    def requested(self) -> bool:
        """Act on the signals counted so far; True if a stop was asked for."""
        self.take_signals()
        return self.state.stopping

    # -- signals -------------------------------------------------------------------------

    def handle_signal(self, signum: int) -> None:
        """Act as if the process received ``signum`` (SIGTERM or SIGINT): the first drains,
        a second stops at once. Safe from a signal handler (it takes no lock)."""
        self._on_signal(signum, None)

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        """Runs between two bytecodes of the main thread, maybe while it holds the lock
        inside the wake event: taking that lock here would deadlock it (a second signal
        would never stop the worker). So only count, and write a byte to a pipe whose
        reader thread sets the event; the coordinator acts on the count."""
        self._signals += 1
        if self._relay_write is not None:
            with contextlib.suppress(OSError):  # a full or closed pipe: the count is enough
                os.write(self._relay_write, b"\0")

    def take_signals(self) -> None:
        """Act on signals counted since the last look: the first drains, the next stops."""
        while self._signals_taken < self._signals:
            self._signals_taken += 1
            self.request(immediate=self.state.stopping)

    def _start_relay(self) -> None:
        read, write = os.pipe()
        os.set_blocking(write, False)
        self._relay_write = write
        wake = self._wake

        def relay() -> None:
            while os.read(read, 64):
                wake.set()
            os.close(read)

        threading.Thread(target=relay, name="sqljobs-signals", daemon=True).start()

    def _stop_relay(self) -> None:
        write, self._relay_write = self._relay_write, None
        if write is not None:
            os.close(write)  # the reader sees the end and closes its side

    def restore_signals(self, restore: dict[int, Any]) -> None:
        for signum, handler in restore.items():
            signal.signal(signum, handler)
        self._stop_relay()

    def install_signals(self) -> dict[int, Any]:
        """Handle SIGTERM and SIGINT (main thread only); returns what to restore."""
        if not self._install:
            return {}
        if threading.current_thread() is not threading.main_thread():
            # Python lets only the main thread install handlers: say so, or SIGTERM would
            # kill the process (jobs in hand left to the reaper) with no hint why
            log.warning(
                "worker %s runs on thread %r, not the main thread: it installs no SIGTERM or "
                "SIGINT handler, so a SIGTERM will not drain it. Run it on the main thread, "
                "or forward signals from there with worker.handle_signal(signum) (or stop it "
                "with worker.stop()), and pass install_signal_handlers=False to say so",
                self._worker_id,
                threading.current_thread().name,
            )
            return {}
        restore: dict[int, Any] = {}
        self._start_relay()
        for signum in (signal.SIGTERM, signal.SIGINT):
            restore[signum] = signal.signal(signum, self._on_signal)
        return restore

    # -- the drain -----------------------------------------------------------------------

    def drain_step(self, backend: Backend, now: float) -> bool:
        """One step of a graceful stop; True once nothing is held any more."""
        inflight, state = self._held.inflight, self.state
        for run in inflight.values():
            run.ctx.shutting_down = True
        # claimed but not started: hand back, do not start
        self._completer.release(backend, self._dispatcher.take_queued(), "released_unstarted")
        if state.immediate or now >= state.drain_deadline or not inflight:
            self._release_all(backend)  # also a suspect still waiting to run
        if inflight or self._producer.lanes_busy:
            return False
        self._producer.write_outcomes(backend, claiming=False)
        return not self._completer.buffered and not self._producer.lanes_busy

    def _release_all(self, backend: Backend) -> None:
        """End of drain: hand every job still held back to pending, no attempt charged."""
        runs = list(self._held.inflight.values())
        for run in runs:
            run.ctx.shutting_down = True
            self._held.close(run, abandon=False)
        self._completer.release(backend, runs, "released")
