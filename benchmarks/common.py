"""Shared pieces: result rows, repetition with medians, temporary databases, small helpers.

The machine is shared and noisy, so every figure is the median of a few repetitions and
each repetition runs on a fresh temporary SQLite file.
"""

from __future__ import annotations

import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

Sample = dict[str, float]
"""One repetition's figures, by name (a rate, a duration, a count)."""

WAIT_LIMIT = 120.0
"""Seconds any single wait may take before the benchmark gives up (a hang is a bug)."""


@dataclass(frozen=True)
class Target:
    """A goal a figure is checked against: ``op`` is ">=" or "<"."""

    op: str
    value: float

    def met(self, figure: float) -> bool:
        return figure >= self.value if self.op == ">=" else figure < self.value

    def __str__(self) -> str:
        return f"{self.op} {self.value:,g}"


@dataclass
class Row:
    """One printed line: a median figure (or a ratio of medians) and its target, if any."""

    bench: str
    measure: str
    value: float | None
    unit: str
    runs: list[float] = field(default_factory=list)
    target: Target | None = None
    note: str = ""

    @property
    def status(self) -> str:
        if self.value is None:
            return "ERROR"
        if self.target is None:
            return ""
        return "PASS" if self.target.met(self.value) else "MISS"

    def to_dict(self) -> dict[str, object]:
        return {
            "bench": self.bench,
            "measure": self.measure,
            "value": self.value,
            "unit": self.unit,
            "runs": self.runs,
            "target": str(self.target) if self.target else None,
            "status": self.status or None,
            "note": self.note or None,
        }


def log(message: str) -> None:
    """Progress goes to stderr so ``--json`` output stays clean."""
    print(message, file=sys.stderr, flush=True)


def median(values: list[float]) -> float:
    return statistics.median(values)


def percentile(values: list[float], pct: float) -> float:
    """Nearest-rank percentile: simple, and honest for a few hundred samples."""
    ordered = sorted(values)
    rank = max(1, round(pct / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    if not numerator or not denominator:
        return None
    return numerator / denominator


@contextmanager
def temp_db(name: str = "jobs.db") -> Iterator[Path]:
    """A fresh SQLite file in its own temporary directory, removed afterwards."""
    folder = Path(tempfile.mkdtemp(prefix="sqljobs-bench-"))
    try:
        yield folder / name
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def sqlite_url(path: Path) -> str:
    """``sqlite:///`` plus an absolute path gives the four-slash absolute form."""
    return f"sqlite:///{path.resolve()}"


class Countdown:
    """Counts handler calls from any thread; ``done`` is set at the expected total.

    Counting in the handler is exact and costs no database query while jobs run.
    """

    def __init__(self, expected: int) -> None:
        self.expected = expected
        self.hits = 0
        self.done = threading.Event()
        self.finished_at = 0.0
        self._lock = threading.Lock()

    def hit(self) -> None:
        with self._lock:
            self.hits += 1
            n = self.hits
        if n == self.expected:
            self.finished_at = time.perf_counter()
            self.done.set()

    def wait(self, timeout: float = WAIT_LIMIT) -> None:
        if not self.done.wait(timeout):
            raise TimeoutError(f"only {self.hits} of {self.expected} jobs ran in {timeout:g} s")


def wait_until(
    check: Callable[[], bool], timeout: float = WAIT_LIMIT, step: float = 0.001
) -> float:
    """Poll ``check`` until true; return the perf_counter time it became true."""
    deadline = time.perf_counter() + timeout
    while not check():
        if time.perf_counter() > deadline:
            raise TimeoutError(f"condition not met within {timeout:g} s")
        time.sleep(step)
    return time.perf_counter()
