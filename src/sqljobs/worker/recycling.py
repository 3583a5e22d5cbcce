"""Recycling worker processes: when one has run enough jobs or grown too large, it
stops claiming, drains and exits, and its supervisor (``--processes``) starts a fresh
one. Leaks in handlers or the libraries they call then stay bounded.

A process checks its limits between jobs, on the coordinator thread: the job count is a
counter it already keeps, its resident set size one read of ``/proc/self/statm`` (or
``getrusage``'s peak where there is no ``/proc``).
"""

from __future__ import annotations

import os
import resource
import sys

MB = 1000**2


def megabytes(size: int) -> str:
    return f"{size / MB:.0f} MB"


def resident_bytes() -> int:
    """This process's resident set size now (its peak where ``/proc`` is missing)."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak if sys.platform == "darwin" else peak * 1024  # macOS counts bytes


class RecycleLimits:
    """Decides, between jobs, whether this process is past one of its limits; the
    reason is the log line's and the metric's."""

    def __init__(self, max_tasks: int | None, max_memory: int | None) -> None:
        self.max_tasks = max_tasks
        self.max_memory = max_memory

    @property
    def active(self) -> bool:
        return self.max_tasks is not None or self.max_memory is not None

    def reason(self, finished: int) -> tuple[str, str] | None:
        """``(label, text)`` if this process should be recycled after ``finished`` jobs:
        ``("max_tasks", "recycled after 1000 tasks")`` or
        ``("max_memory", "recycled at 612 MB, over 512 MB")``; else None."""
        if self.max_tasks is not None and finished >= self.max_tasks:
            return "max_tasks", f"recycled after {finished} tasks"
        if self.max_memory is not None:
            rss = resident_bytes()
            if rss > self.max_memory:
                text = f"recycled at {megabytes(rss)}, over {megabytes(self.max_memory)}"
                return "max_memory", text
        return None
