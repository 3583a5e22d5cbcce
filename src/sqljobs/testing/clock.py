"""A clock a test moves by hand, so delays, retry backoffs and schedule ticks fall due
without sleeping.

Give it to the App (``App(url, clock=clock)``): every time the backend stores and
compares (``run_at``, leases, retries, schedule ticks) then comes from it, on SQLite and on
PostgreSQL, whose statements then take it as a parameter instead of reading the server's
``now()`` (see docs/testing.md).
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import UTC, datetime, timedelta

from ..errors import ConfigurationError
from ..validate import is_number

log = logging.getLogger("sqljobs.testing")


class Clock:
    """A frozen clock in Unix seconds: it moves only when told (:meth:`advance`,
    :meth:`set`). Call it (or :meth:`now`) as the App calls ``time.time``. Thread-safe: a
    worker's threads read it while the test moves it."""

    def __init__(self, start: float | datetime | None = None) -> None:
        self._lock = threading.Lock()
        self._now = time.time() if start is None else _epoch(start, "Clock(start=...)")

    def __call__(self) -> float:
        with self._lock:
            return self._now

    def now(self) -> float:
        """The clock's time, Unix seconds."""
        return self()

    def as_datetime(self) -> datetime:
        """The clock's time as an aware UTC datetime (for cron-minded assertions)."""
        return datetime.fromtimestamp(self(), UTC)

    def advance(self, by: float | timedelta) -> float:
        """Move forward ``by`` seconds (or a timedelta); return the new time. Only forward:
        a negative step is more likely a mistake than a test of a clock going back (for
        that, :meth:`set` an earlier time)."""
        step = by.total_seconds() if isinstance(by, timedelta) else by
        if not is_number(step):
            raise ConfigurationError(f"Clock.advance({by!r}): give seconds or a timedelta")
        if step < 0:
            raise ConfigurationError(f"Clock.advance({by!r}): a clock only moves forward")
        with self._lock:
            self._now += step
            now = self._now
        log.debug("test clock advanced %.3f s to %.3f", step, now)
        return now

    def set(self, when: float | datetime) -> float:
        """Move to ``when`` (Unix seconds or an aware datetime); return it. It may lie in
        the past, as a wall clock stepped back by NTP does (a drain only moves forward)."""
        target = _epoch(when, "Clock.set(...)")
        with self._lock:
            self._now = target
        log.debug("test clock set to %.3f", target)
        return target

    def __repr__(self) -> str:
        return f"<sqljobs.testing.Clock {self.as_datetime().isoformat()}>"


def _epoch(value: float | datetime, what: str) -> float:
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise ConfigurationError(
                f"{what}: {value!r} is naive; give an aware datetime (tzinfo=UTC) or Unix seconds"
            )
        return value.timestamp()
    if not is_number(value):
        raise ConfigurationError(f"{what}: give Unix seconds or an aware datetime, got {value!r}")
    return float(value)
