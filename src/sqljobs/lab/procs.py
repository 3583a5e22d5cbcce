"""Worker processes for the experiments that need real crashes and real signals."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from .workload import RunLog

Proc = subprocess.Popen[bytes]


class Fleet:
    """Starts worker processes in their own sessions and kills any left at the end."""

    def __init__(
        self, url: str, runs: RunLog, lease: float, env: dict[str, str] | None = None
    ) -> None:
        self.url, self.runs, self.lease = url, runs, lease
        self.env = env or {}
        self.procs: list[Proc] = []

    def _start(self, args: list[str]) -> Proc:
        env = dict(
            os.environ,
            SQLJOBS_URL=self.url,
            SQLJOBS_LAB_RUNS=str(self.runs.path),
            SQLJOBS_LAB_LEASE=str(self.lease),
            **self.env,
        )
        proc = subprocess.Popen(
            [sys.executable, *args],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        self.procs.append(proc)
        return proc

    def sqljobs_worker(
        self, queue: str, concurrency: int, *extra: str, app: str = "sqljobs.lab.workload:app"
    ) -> Proc:
        """A real ``sqljobs worker`` process running ``app`` (:mod:`sqljobs.lab.workload`)."""
        return self._start(
            ["-m", "sqljobs", "--app", app, "worker", "--concurrency", str(concurrency),
             "--queues", queue, *extra]
        )  # fmt: skip

    def naive_worker(self, queue: str, threads: int, seconds: float) -> Proc:
        """The lab's naive worker (no lease; exits at once on SIGTERM)."""
        return self._start(["-m", "sqljobs.lab.naive", self.url, queue, str(threads), str(seconds)])

    def module(self, name: str, *args: str) -> Proc:
        """``python -m name args``: a lab process of its own (see ``name``'s docstring)."""
        return self._start(["-m", name, *args])

    def stop_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


@contextmanager
def fleet(url: str, lease: float, env: dict[str, str] | None = None) -> Iterator[Fleet]:
    """Worker processes sharing a run log in a temporary folder; all killed at the end."""
    with tempfile.TemporaryDirectory(prefix="sqljobs-lab-") as folder:
        f = Fleet(url, RunLog(Path(folder) / "runs.log"), lease, env)
        try:
            yield f
        finally:
            f.stop_all()


def wait_for(predicate: Callable[[], Any], timeout: float, interval: float = 0.01) -> Any:
    """Poll ``predicate`` until truthy or ``timeout`` passes; return its last value."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() >= deadline:
            return value
        time.sleep(interval)
