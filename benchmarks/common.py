"""What both halves share: rows with targets, repetitions with medians, waits, scratch files.

The machine is shared and noisy, so every figure is the median of a few repetitions, the
systems interleaved round by round so noise hits them alike, each on a fresh database.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import importlib.util
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

Sample = dict[str, float]
"""One repetition's figures by name (a rate, a duration, a count)."""
Figures = dict[str, list[float]]
"""Every repetition's value of each figure, by name."""
Case = Callable[[], Sample]

WAIT_LIMIT = 120.0
"""Seconds any single wait may take before a repetition gives up (a hang is a bug)."""


def log(message: str) -> None:
    """Progress goes to stderr so the table (or ``--json``) on stdout stays clean."""
    print(message, file=sys.stderr, flush=True)


# -- rows ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """A goal a figure is checked against; ``op`` is ">=", "<=" or "<"."""

    op: str
    value: float

    def met(self, figure: float) -> bool:
        if self.op == ">=":
            return figure >= self.value
        return figure <= self.value if self.op == "<=" else figure < self.value

    def __str__(self) -> str:
        return f"{self.op} {self.value:,g}"


@dataclass
class Row:
    """One printed line: a median (or a ratio of medians) and its target, if any.

    ``skipped`` holds why a row could not be measured here (no server, a peer not
    installed), which is not a failure; a row whose every repetition failed is an ERROR.
    """

    db: str
    bench: str
    measure: str
    value: float | None
    unit: str
    runs: list[float] = field(default_factory=list)
    target: Target | None = None
    note: str = ""
    skipped: str = ""

    @property
    def status(self) -> str:
        if self.skipped:
            return "SKIPPED"
        if self.value is None:
            return "ERROR"
        if self.target is None:
            return ""
        return "PASS" if self.target.met(self.value) else "MISS"

    def to_dict(self) -> dict[str, object]:
        return {
            "db": self.db,
            "bench": self.bench,
            "measure": self.measure,
            "value": self.value,
            "unit": self.unit,
            "runs": self.runs,
            "target": str(self.target) if self.target else None,
            "status": self.status or None,
            "note": self.skipped or self.note or None,
        }


@dataclass
class Results:
    """One benchmark's figures, turned into rows that share its ``db`` and ``bench``."""

    db: str
    bench: str
    figures: dict[str, Figures]
    skipped: dict[str, str]

    def row(self, label: str, measure: str, key: str = "jobs_per_s", unit: str = "jobs/s",
            target: Target | None = None, note: str = "") -> Row:  # fmt: skip
        """The median of figure ``key`` of case ``label`` (None if every run failed)."""
        runs = self.figures.get(label, {}).get(key, [])
        value = statistics.median(runs) if runs else None
        skipped = self.skipped.get(label, "")
        return Row(self.db, self.bench, measure, value, unit, runs, target, note, skipped)

    def ratio(self, measure: str, top: Row, bottom: Row, unit: str = "x",
              target: Target | None = None, note: str = "") -> Row:  # fmt: skip
        """``top / bottom`` of two medians; ``unit`` "%" shows it as a percentage."""
        value = top.value / bottom.value if top.value is not None and bottom.value else None
        if value is not None and unit == "%":
            value *= 100
        skipped = top.skipped or bottom.skipped
        return Row(self.db, self.bench, measure, value, unit, [], target, note, skipped)


def collect(db: str, bench: str, runs: int, cases: Mapping[str, Case | str]) -> Results:
    """Run every case once per round, ``runs`` rounds. A case given as a string is not
    run: the string says why. A failed repetition is logged and retried once (the test
    suite may restart PostgreSQL meanwhile), then skipped."""
    figures: dict[str, Figures] = {label: {} for label in cases}
    skipped = {label: case for label, case in cases.items() if isinstance(case, str)}
    for label, reason in skipped.items():
        log(f"  {label}: SKIPPED: {reason}")
    for round_ in range(1, runs + 1):
        for label, case in cases.items():
            if isinstance(case, str):
                continue
            sample = _attempt(f"{label} run {round_}/{runs}", case)
            for name, value in (sample or {}).items():
                figures[label].setdefault(name, []).append(value)
    return Results(db, bench, figures, skipped)


def _attempt(title: str, case: Case, attempts: int = 2) -> Sample | None:
    for attempt in range(1, attempts + 1):
        gc.collect()
        started = time.perf_counter()
        try:
            sample = case()
        except Exception as exc:
            log(f"  {title}: FAILED (attempt {attempt}/{attempts}): {exc!r}")
            traceback.print_exc(file=sys.stderr)
            continue
        shown = ", ".join(f"{k}={v:,.4g}" for k, v in sample.items())
        log(f"  {title}: {shown} ({time.perf_counter() - started:.1f} s)")
        return sample
    return None


def peer(package: str) -> tuple[Any, str]:
    """The module ``peer_<package>``, or None and why not if ``package`` is not installed
    (a SKIPPED row rather than a crash: the peers come with the ``bench`` extra)."""
    if importlib.util.find_spec(package) is None:
        return None, f"{package} is not installed (pip install -e '.[bench]')"
    return importlib.import_module(f"peer_{package}"), ""


# -- measuring -----------------------------------------------------------------------------


def percentile(values: list[float], pct: float) -> float:
    """Nearest-rank percentile: simple, and honest for a few hundred samples."""
    ordered = sorted(values)
    rank = max(1, round(pct / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


class Countdown:
    """Counts handler calls from any thread (or an event loop); ``done`` is set at the
    expected total. Counting in the handler is exact and costs no query while jobs run."""

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

    def check(self) -> None:
        """After the run: every job ran exactly once."""
        if self.hits != self.expected:
            raise RuntimeError(f"{self.hits} handler calls for {self.expected} jobs")


def wait_until(check: Callable[[], bool], timeout: float = WAIT_LIMIT,
               step: float = 0.001) -> float:  # fmt: skip
    """Poll ``check`` until true; return the perf_counter time it became true."""
    deadline = time.perf_counter() + timeout
    while not check():
        if time.perf_counter() > deadline:
            raise TimeoutError(f"condition not met within {timeout:g} s")
        time.sleep(step)
    return time.perf_counter()


TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def cpu_seconds(pid: int) -> float | None:
    """CPU time of a live process, summed over its threads from the scheduler's own
    nanosecond counts (/proc/PID/task/*/schedstat): the clock-tick counts of /proc/PID/stat
    round an idle worker's few milliseconds a second to 0. None where /proc has neither."""
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
        total = 0
        for task in tasks:
            with contextlib.suppress(OSError):  # a thread that ended meanwhile
                total += int((task / "schedstat").read_text().split()[0])
        return total / 1e9
    except (OSError, ValueError, IndexError):
        pass
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / TICKS


@contextmanager
def scratch_dir() -> Iterator[Path]:
    """A fresh temporary folder (SQLite files, worker logs), removed afterwards."""
    folder = Path(tempfile.mkdtemp(prefix="sqljobs-bench-"))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)
