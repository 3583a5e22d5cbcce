"""What a worker process under ``--processes`` tells its supervisor, one line at a time
on a pipe of its own: the handlers with a hard time limit as they start and end (so the
supervisor can kill a process whose handler overran it), and why it is about to exit to
be recycled. A pipe costs nothing when idle and needs no database round trip; lines are
shorter than ``PIPE_BUF``, so threads writing at once never interleave.

Lines: ``S <job id> <token> <hard limit s> <task>``, ``E <job id>``, ``R <label> <text>``.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field


class SupervisorLink:
    """The child's end. A supervisor that is gone makes writes fail: they are ignored
    (the worker notices its orphaning on its own)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def _send(self, line: str) -> None:
        with contextlib.suppress(OSError):
            os.write(self.fd, line.encode() + b"\n")

    def started(self, job_id: int, token: int, hard_timeout: float, task: str) -> None:
        self._send(f"S {job_id} {token} {hard_timeout!r} {task}")

    def ended(self, job_id: int) -> None:
        self._send(f"E {job_id}")

    def recycling(self, label: str, text: str) -> None:
        self._send(f"R {label} {text}")


@dataclass(frozen=True)
class Overrun:
    """A running handler with a hard time limit: its job, claim token, limit (seconds),
    task, and the monotonic time past which its process is killed."""

    job_id: int
    token: int
    hard_timeout: float
    task: str
    deadline: float


@dataclass
class ChildState:
    """The supervisor's view of one child, built from its lines."""

    worker_id: str
    fd: int
    buffer: bytes = b""
    closed: bool = False
    """Its end of the pipe is closed: it is exiting."""
    running: dict[int, Overrun] = field(default_factory=dict)
    """job id -> what to do if that hard-limited handler overruns, and when."""
    recycle: tuple[str, str] | None = None
    killed: Overrun | None = None
    """The handler it was killed for."""

    def feed(self, data: bytes, now: float) -> None:
        lines = (self.buffer + data).split(b"\n")
        self.buffer = lines.pop()
        for raw in lines:
            kind, _, rest = raw.decode(errors="replace").partition(" ")
            if kind == "S":
                job, token, hard, task = rest.split(" ", 3)
                limit = float(hard)
                self.running[int(job)] = Overrun(int(job), int(token), limit, task, now + limit)
            elif kind == "E":
                self.running.pop(int(rest), None)
            elif kind == "R":
                label, _, text = rest.partition(" ")
                self.recycle = label, text

    def overdue(self, now: float) -> Overrun | None:
        return next((o for o in self.running.values() if now >= o.deadline), None)

    def next_deadline(self) -> float | None:
        return min((o.deadline for o in self.running.values()), default=None)
