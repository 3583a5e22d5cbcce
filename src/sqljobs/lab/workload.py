"""Tasks that the lab's worker processes run (``sqljobs --app sqljobs.lab.workload:app``).

Each run appends ``<job> <pid> <start|end>`` to the file named by ``SQLJOBS_LAB_RUNS``
(an O_APPEND write, atomic across processes), so the lab counts real executions,
including those of a process that was then killed.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from ..app import App
from ..context import JobContext

LEASE = float(os.environ.get("SQLJOBS_LAB_LEASE", "3.0"))
app = App(default_lease=LEASE)


def log_run(job: int, phase: str) -> None:
    fd = os.open(os.environ["SQLJOBS_LAB_RUNS"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{job} {os.getpid()} {phase} {time.time():.6f}\n".encode())
    finally:
        os.close(fd)


@app.task(lease=LEASE)
def lab_work(ctx: JobContext, seconds: float) -> None:
    """Stand-in for real work: sleep, logging start and end."""
    log_run(ctx.job_id, "start")
    time.sleep(seconds)
    log_run(ctx.job_id, "end")


class RunLog:
    """Reads the run log written by :func:`log_run` (and by the naive worker)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.touch()

    def entries(self) -> list[tuple[int, int, str, float]]:
        out = []
        for line in self.path.read_text().splitlines():
            job, pid, phase, at = line.split()
            out.append((int(job), int(pid), phase, float(at)))
        return out

    def jobs(self, phase: str) -> list[int]:
        return [job for job, _, p, _ in self.entries() if p == phase]

    def pids_started(self) -> set[int]:
        return {pid for _, pid, p, _ in self.entries() if p == "start"}

    def first_start(self) -> float | None:
        starts = [at for _, _, p, at in self.entries() if p == "start"]
        return min(starts) if starts else None


def log_tick(key: str, start: float) -> None:
    """One periodic run: ``<job key> <pid> <start> <end>`` to ``SQLJOBS_LAB_TICKS``."""
    path = os.environ["SQLJOBS_LAB_TICKS"]
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{key} {os.getpid()} {start:.6f} {time.time():.6f}\n".encode())
    finally:
        os.close(fd)


@app.task(lease=LEASE)
def lab_tick(ctx: JobContext, seconds: float = 0.0) -> None:
    """The job a lab schedule enqueues on each tick."""
    start = time.time()
    time.sleep(seconds)
    log_tick(ctx.key or f"job-{ctx.job_id}", start)
