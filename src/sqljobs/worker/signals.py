"""Signals: SIGTERM drains, a second signal stops at once. The handler only counts and
writes a byte to a pipe; a relay thread wakes the coordinator, which acts on the count."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
from types import FrameType
from typing import Any

from .state import WorkerState

log = logging.getLogger("sqljobs.worker")


class Signals(WorkerState):
    def handle_signal(self, signum: int) -> None:
        """Act as if the process received ``signum`` (SIGTERM or SIGINT): the first drains,
        a second stops at once. Safe from a signal handler (it takes no lock), so a
        supervisor or an embedding program can forward its own signals here."""
        self._on_signal(signum, None)

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

    def _restore_signals(self, restore: dict[int, Any]) -> None:
        for signum, handler in restore.items():
            signal.signal(signum, handler)
        self._stop_relay()

    def _install_signals(self) -> dict[int, Any]:
        if not self.config.install_signal_handlers:
            return {}
        if threading.current_thread() is not threading.main_thread():
            # Python lets only the main thread install handlers: say so, or SIGTERM would
            # kill the process (jobs in hand left to the reaper) with no hint why
            log.warning(
                "worker %s runs on thread %r, not the main thread: it installs no SIGTERM or "
                "SIGINT handler, so a SIGTERM will not drain it. Run it on the main thread, "
                "or forward signals from there with worker.handle_signal(signum) (or stop it "
                "with worker.stop()), and pass install_signal_handlers=False to say so",
                self.id,
                threading.current_thread().name,
            )
            return {}
        restore: dict[int, Any] = {}
        self._start_relay()
        for signum in (signal.SIGTERM, signal.SIGINT):
            restore[signum] = signal.signal(signum, self._on_signal)
        return restore
