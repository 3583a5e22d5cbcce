"""Throughput and latency counts kept in the database: what a worker tallies in memory,
how it adds them to the rollup tables, and the records those tables give back.

Counts live in the database, not in a process, so every scraper on any host reads the
same numbers, workers on many hosts add up, and a restarted worker loses nothing it had
flushed. A worker tallies each attempt's end in memory (a dictionary lookup and a few
increments, on its coordinator thread) and adds the tallies at each heartbeat, in one
transaction, to two tables: ``sqljobs_metric_minutes``, by minute, which the pruner keeps
for :data:`MINUTES_KEPT` (``app.throughput()`` reads it), and ``sqljobs_metric_totals``,
never pruned, which feeds Prometheus's counters and histograms (so they only grow).

Both tables hold one amount per (queue, task, outcome, series, le): ``series`` is what is
counted (:class:`Series`), ``le`` a histogram bucket's upper bound in seconds (``inf`` for
the last bucket, and for series that are not buckets). Bucket counts are stored as they
fall (not cumulative), so only buckets that saw a value have a row.
"""

from __future__ import annotations

import enum
import logging
import math
from bisect import bisect_left
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .errors import BackendError, ConfigurationError
from .validate import is_whole

if TYPE_CHECKING:
    from .backends.base import Backend
    from .jobs import ClaimedJob

log = logging.getLogger("sqljobs.rollup")

BUCKET_BOUNDS: tuple[float, ...] = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
    600.0,
)  # fmt: skip
"""Upper bounds (seconds) of every histogram's buckets, from a fast job's 5 ms to a slow
one's 10 minutes; longer values fall in the ``+Inf`` bucket. Fixed: stored counts are by
bound, so changing them would mix old and new buckets."""

MINUTES_KEPT = 24 * 3600.0
"""Seconds of per-minute rollup the pruner keeps (the totals are never pruned)."""

MAX_WINDOW_MINUTES = int(MINUTES_KEPT // 60)
"""The longest window ``app.throughput()`` can answer for: older minutes are pruned."""

INF = math.inf


class AttemptOutcome(enum.StrEnum):
    """How an attempt ended, as the ``outcome`` label counts it."""

    DONE = "done"
    RETRIED = "retried"
    """Raised (or timed out) and will run again."""
    DEAD = "dead"
    """Raised (or timed out, was discarded, could not be decoded) and will not run again."""
    CANCELLED = "cancelled"
    """Cancelled while a worker held it."""
    LEASE_EXPIRED = "lease_expired"
    """Its lease ran out while its worker lived: the rescuer ended the attempt (the job
    runs again, or is dead when out of attempts)."""
    CRASHED = "crashed"
    """Its worker died during the attempt: the rescuer (or the supervisor) ended it."""
    PARKED = "parked"
    """A workflow's attempt that ended to wait (given back: no failure, no retry)."""


FAILED_OUTCOMES = frozenset(
    {
        AttemptOutcome.RETRIED,
        AttemptOutcome.DEAD,
        AttemptOutcome.LEASE_EXPIRED,
        AttemptOutcome.CRASHED,
    }
)
"""The outcomes ``MinuteCounts.failed`` adds up."""


class Series(enum.StrEnum):
    """What a stored amount counts."""

    ATTEMPTS = "attempts"
    DURATION = "duration"
    """Bucket counts of how long attempts ran (handler start to end)."""
    DURATION_SUM = "duration_sum"
    WAIT = "wait"
    """Bucket counts of enqueue-to-start: from the job's due time (its ``run_at``, or its
    creation if later) to its handler's start."""
    WAIT_SUM = "wait_sum"
    SCHEDULE_LAG = "schedule_lag"
    """Bucket counts of how late a schedule's tick enqueued its job (outcome is empty)."""
    SCHEDULE_LAG_SUM = "schedule_lag_sum"
    REPLACEMENTS = "process_replacements"
    """Worker processes a supervisor replaced on purpose, by reason in ``outcome``
    (:data:`REPLACEMENT_REASONS`; queue and task are empty)."""


REPLACEMENT_REASONS = ("max_tasks", "max_memory", "hard_timeout")
"""Why a supervisor replaced a worker process: it ran ``--max-tasks-per-process`` jobs,
grew past ``--max-memory-per-process``, or was killed for a handler past its
``hard_timeout``."""


@dataclass(frozen=True)
class MetricAmount:
    """One stored amount: a count, a sum of seconds or a bucket's count. ``minute`` (Unix
    seconds at its start) says which minute of the rollup it belongs to; None in totals."""

    queue: str
    task: str
    outcome: str
    series: str
    le: float
    amount: float
    minute: int | None = None


@dataclass(frozen=True)
class MinuteCounts:
    """Attempts that ended in one minute, for throughput charts."""

    minute: float
    """Unix seconds at the start of the minute."""
    done: int
    """Attempts that ended done."""
    failed: int
    """Attempts that raised (retried or dead), or whose lease expired or worker crashed."""
    cancelled: int
    """Attempts cancelled while a worker held them."""


def replacement_counts(totals: Iterable[MetricAmount]) -> dict[str, int]:
    """Worker processes replaced on purpose, by reason (every reason, 0 if none), from
    the rollup's totals."""
    counts = dict.fromkeys(REPLACEMENT_REASONS, 0)
    for a in totals:
        if a.series == Series.REPLACEMENTS:
            counts[a.outcome] = counts.get(a.outcome, 0) + int(a.amount)
    return counts


def replacements_text(counts: dict[str, int]) -> str:
    """The counts as a sentence for people: the CLI's and the dashboard's workers views."""
    return (
        f"worker processes replaced: {counts.get('max_tasks', 0)} after "
        f"--max-tasks-per-process, {counts.get('max_memory', 0)} over "
        f"--max-memory-per-process, {counts.get('hard_timeout', 0)} killed past a "
        "hard_timeout"
    )


def minute_of(at: float) -> int:
    """The start of the minute ``at`` (Unix seconds) falls in."""
    return int(at // 60) * 60


def check_window(minutes: object) -> int:
    """``minutes`` of ``app.throughput()``, or a clear error."""
    if not is_whole(minutes):
        raise ConfigurationError(f"minutes must be a whole number of minutes, got {minutes!r}")
    if not 1 <= minutes <= MAX_WINDOW_MINUTES:
        raise ConfigurationError(
            f"minutes must be between 1 and {MAX_WINDOW_MINUTES} (the per-minute rollup is "
            f"kept {MINUTES_KEPT / 3600:g} hours), got {minutes}"
        )
    return minutes


def minute_counts(
    attempts: Iterable[tuple[int, str, float]], first: int, minutes: int
) -> list[MinuteCounts]:
    """Per-minute attempts by outcome, ``(minute, outcome, count)``, as one entry per
    minute from ``first``, oldest first, empty minutes included."""
    done = [0] * minutes
    failed = [0] * minutes
    cancelled = [0] * minutes
    for minute, outcome, count in attempts:
        index = (int(minute) - first) // 60
        if not 0 <= index < minutes:
            continue
        if outcome == AttemptOutcome.DONE:
            done[index] += int(count)
        elif outcome == AttemptOutcome.CANCELLED:
            cancelled[index] += int(count)
        elif outcome in FAILED_OUTCOMES:
            failed[index] += int(count)
    return [
        MinuteCounts(float(first + 60 * i), done[i], failed[i], cancelled[i])
        for i in range(minutes)
    ]


class Histogram:
    """Bucket counts (by :data:`BUCKET_BOUNDS`, then ``+Inf``) and the sum of the values."""

    __slots__ = ("counts", "total")

    def __init__(self) -> None:
        self.counts = [0] * (len(BUCKET_BOUNDS) + 1)
        self.total = 0.0

    def add(self, seconds: float) -> None:
        self.counts[bisect_left(BUCKET_BOUNDS, seconds)] += 1  # a value equal to a bound is in it
        self.total += seconds

    def amounts(
        self, key: tuple[int, str, str, str], buckets: Series, total: Series
    ) -> list[MetricAmount]:
        minute, queue, task, outcome = key
        out = [
            MetricAmount(queue, task, outcome, buckets, le, count, minute)
            for le, count in zip((*BUCKET_BOUNDS, INF), self.counts, strict=True)
            if count
        ]
        if out:
            out.append(MetricAmount(queue, task, outcome, total, INF, self.total, minute))
        return out


class _Tally:
    """What one (minute, queue, task, outcome) saw."""

    __slots__ = ("attempts", "duration", "wait")

    def __init__(self) -> None:
        self.attempts = 0
        self.duration = Histogram()
        self.wait = Histogram()


Key = tuple[float, str, str, str]  # the minute's number (Unix seconds // 60), queue, task, outcome


Sample = tuple["ClaimedJob", float | None, float | None]
"""One attempt to tally: its job, how long its handler ran and how long it waited from its
due time to its start (None: not known)."""


class Meter:
    """A worker's tallies since its last flush. Used from one thread (the coordinator),
    so it takes no lock; :meth:`flush` adds them to the database and starts again."""

    def __init__(self) -> None:
        self._tallies: dict[Key, _Tally] = {}
        self._lags: dict[Key, Histogram] = {}
        self._replacements: dict[Key, int] = {}
        self._unsaved: list[MetricAmount] = []  # a flush the database refused, kept for the next

    def attempt(
        self,
        queue: str,
        task: str,
        outcome: str,
        at: float,
        duration: float | None = None,
        wait: float | None = None,
    ) -> None:
        """An attempt ended at ``at`` (Unix seconds). ``duration``: how long its handler
        ran; ``wait``: from its due time to its start (None: not known, not counted).
        Called per job on the worker's hot path, hence written out in full: a negative
        value (clocks that disagree) counts as 0, in the first bucket."""
        key = (at // 60, queue, task, outcome)  # the minute's number: its start at take()
        tally = self._tallies.get(key)
        if tally is None:
            tally = self._tallies[key] = _Tally()
        tally.attempts += 1
        if duration is not None:
            histogram = tally.duration
            histogram.counts[bisect_left(BUCKET_BOUNDS, duration)] += 1
            if duration > 0:
                histogram.total += duration
        if wait is not None:
            histogram = tally.wait
            histogram.counts[bisect_left(BUCKET_BOUNDS, wait)] += 1
            if wait > 0:
                histogram.total += wait

    def attempts(self, samples: Iterable[Sample], outcome: str, at: float) -> None:
        """Attempts that all ended at ``at`` with ``outcome`` (a written batch of
        completions): :meth:`attempt` for each ``(job, duration, wait)``, in one call and
        one dictionary lookup while the queue and task stay the same."""
        minute = at // 60
        tallies = self._tallies
        queue = task = ""
        tally: _Tally | None = None
        for job, duration, wait in samples:
            if tally is None or job.queue != queue or job.task != task:
                queue, task = job.queue, job.task
                key = (minute, queue, task, outcome)
                found = tallies.get(key)
                if found is None:
                    found = tallies[key] = _Tally()
                tally = found
            tally.attempts += 1
            if duration is not None:
                histogram = tally.duration
                histogram.counts[bisect_left(BUCKET_BOUNDS, duration)] += 1
                if duration > 0:
                    histogram.total += duration
            if wait is not None:
                histogram = tally.wait
                histogram.counts[bisect_left(BUCKET_BOUNDS, wait)] += 1
                if wait > 0:
                    histogram.total += wait

    def replacement(self, reason: str, at: float) -> None:
        """A supervisor replaced a worker process for ``reason`` at ``at``."""
        key = (at // 60, "", "", reason)
        self._replacements[key] = self._replacements.get(key, 0) + 1

    def schedule_lag(self, queue: str, task: str, at: float, lag: float) -> None:
        """A schedule's tick, planned ``lag`` seconds before ``at``, enqueued its job."""
        key = (at // 60, queue, task, "")
        lags = self._lags.get(key)
        if lags is None:
            lags = self._lags[key] = Histogram()
        lags.add(max(0.0, lag))  # (rare: once per tick)

    @property
    def pending(self) -> bool:
        """Something is tallied and not yet flushed."""
        return bool(self._tallies or self._lags or self._replacements or self._unsaved)

    def take(self) -> list[MetricAmount]:
        """Everything tallied so far as amounts, sorted (so concurrent flushes lock rows in
        one order), and start again."""
        tallies, self._tallies = self._tallies, {}
        lags, self._lags = self._lags, {}
        out, self._unsaved = self._unsaved, []
        for (number, queue, task, outcome), tally in tallies.items():
            key = int(number) * 60, queue, task, outcome
            out.append(
                MetricAmount(queue, task, outcome, Series.ATTEMPTS, INF, tally.attempts, key[0])
            )
            out += tally.duration.amounts(key, Series.DURATION, Series.DURATION_SUM)
            out += tally.wait.amounts(key, Series.WAIT, Series.WAIT_SUM)
        for (number, queue, task, outcome), lag in lags.items():
            key = int(number) * 60, queue, task, outcome
            out += lag.amounts(key, Series.SCHEDULE_LAG, Series.SCHEDULE_LAG_SUM)
        replacements, self._replacements = self._replacements, {}
        for (number, queue, task, reason), count in replacements.items():
            minute = int(number) * 60
            out.append(MetricAmount(queue, task, reason, Series.REPLACEMENTS, INF, count, minute))
        return merged(out)

    def flush(self, backend: Backend) -> int:
        """Add what was tallied to the rollup tables in one transaction; return how many
        amounts were written. A database that refuses keeps them for the next flush."""
        amounts = self.take()
        if not amounts:
            return 0
        try:
            backend.add_metric_amounts(amounts)
        except BackendError as exc:
            self._unsaved = amounts
            log.warning("metrics: could not add %d amounts (%s); kept for the next flush",
                        len(amounts), exc)  # fmt: skip
            return 0
        log.debug("metrics: added %d amounts", len(amounts))
        return len(amounts)


def merged(amounts: Sequence[MetricAmount]) -> list[MetricAmount]:
    """``amounts`` with those of one row added up, sorted by row."""
    by_row: dict[tuple[int, str, str, str, str, float], float] = {}
    for a in amounts:
        row = (-1 if a.minute is None else a.minute, a.queue, a.task, a.outcome, a.series, a.le)
        by_row[row] = by_row.get(row, 0.0) + a.amount
    return [
        MetricAmount(queue, task, outcome, series, le, amount, None if minute < 0 else minute)
        for (minute, queue, task, outcome, series, le), amount in sorted(by_row.items())
    ]
