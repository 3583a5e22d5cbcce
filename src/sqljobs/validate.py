"""The checks every public entry point runs on what a caller passes: whole numbers,
durations, finite numbers, names, priorities and times. Each returns the value in the form
the rest of the code uses, or raises :class:`~sqljobs.errors.ConfigurationError` naming
the parameter and the value it was given."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import TypeGuard, overload

from .errors import ConfigurationError

MAX_ID = 2**63 - 1
"""A job id is a signed 64-bit integer on every engine."""


def is_whole(value: object, low: int | None = None, high: int | None = None) -> TypeGuard[int]:
    """Whether ``value`` is an int (not a bool) within ``low`` and ``high`` (each bound
    left out when None)."""
    return (
        isinstance(value, int)
        and not isinstance(value, bool)
        and (low is None or value >= low)
        and (high is None or value <= high)
    )


def is_number(value: object, *, finite: bool = True) -> TypeGuard[int | float]:
    """Whether ``value`` is an int or float (not a bool), finite unless ``finite=False``
    (NaN is never a number here: it compares false with every bound)."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return False
    return math.isfinite(value) if finite else not math.isnan(value)


def is_job_id(value: object) -> TypeGuard[int]:
    """Whether ``value`` can be a job's id: a whole number from 1 to 2**63 - 1."""
    return is_whole(value, 1, MAX_ID)


def is_searchable(value: object) -> bool:
    """Text a database can compare: a non-empty string, no NUL, valid Unicode."""
    if not isinstance(value, str) or not value or "\x00" in value:
        return False
    try:
        value.encode()
    except UnicodeEncodeError:
        return False
    return True


def check_job_id(value: object) -> int:
    """``value`` if it is an integer of 64 bits: what ``app.job()`` and the calls that
    take an id accept (one that names no job is for the database to say)."""
    if not is_whole(value, -MAX_ID, MAX_ID):
        raise ConfigurationError(f"a job id is an integer (of 64 bits), got {value!r}")
    return value


def whole_number(value: object, name: str, *, low: int = 1, high: int | None = None) -> int:
    """``value`` if it is an int (not a bool) from ``low`` to ``high`` (no upper bound if
    None)."""
    if is_whole(value, low, high):
        return value
    span = f">= {low}" if high is None else f"from {low} to {high}"
    raise ConfigurationError(f"{name} must be a whole number {span}, got {value!r}")


def finite_number(value: object, name: str, *, positive: bool = False) -> float:
    """``value`` as a float if it is a finite int or float (not a bool); with
    ``positive``, above zero."""
    if is_number(value) and (not positive or value > 0):
        return float(value)
    kind = "a finite number above 0" if positive else "a finite number"
    raise ConfigurationError(f"{name} must be {kind}, got {value!r}")


def job_id(value: object, name: str = "job_id") -> int:
    """``value`` if it can be a job's id (a whole number from 1 to 2**63 - 1)."""
    return whole_number(value, name, low=1, high=MAX_ID)


@overload
def seconds(value: None, name: str) -> None: ...
@overload
def seconds(value: float | timedelta, name: str) -> float: ...
@overload
def seconds(value: float | timedelta | None, name: str) -> float | None: ...


def seconds(value: float | timedelta | None, name: str) -> float | None:
    """Normalise a duration given as seconds or a timedelta, naming ``name`` in the error.

    Negative, NaN and infinite values are refused: NaN compares false with everything,
    so it would slip past every later bound check and reach the database as a time.
    """
    if value is None:
        return None
    try:
        out = value.total_seconds() if isinstance(value, timedelta) else float(value)
    except (TypeError, ValueError, OverflowError):
        raise ConfigurationError(
            f"{name} must be seconds (a number) or a timedelta, got {value!r}"
        ) from None
    if not math.isfinite(out):
        raise ConfigurationError(f"{name} must be a finite number of seconds, got {value!r}")
    if out < 0:
        raise ConfigurationError(f"{name} must be >= 0 seconds, got {value!r}")
    return out


def check_seconds(value: float | timedelta, name: str) -> float:
    """A duration that must be above zero: :func:`seconds`, and 0 refused too (a lease,
    a timeout or an interval of no time at all)."""
    out = seconds(value, name)
    if out <= 0:
        raise ConfigurationError(f"{name} must be > 0 seconds, got {value!r}")
    return out


QUEUE_NAME = re.compile(r"[A-Za-z0-9_.:-]{1,64}")


def check_queue_name(name: object, where: str) -> str:
    """Return ``name`` if it is a valid queue name, else raise naming ``where`` it was given.

    A queue name is 1-64 ASCII letters, digits, ``_``, ``-``, ``.`` and ``:``. The set
    keeps names selectable: ``--queues a,b`` splits on commas, and a name with a space,
    a newline or nothing at all could never be asked for.
    """
    if isinstance(name, str) and QUEUE_NAME.fullmatch(name):
        return name
    raise ConfigurationError(
        f"queue name {name!r} (in {where}) is not valid: use 1-64 letters, digits, "
        "'_', '-', '.', ':'"
    )


NAME_LIMIT = 500
"""The most characters in a task name, a key or a schedule name: each is indexed, and
PostgreSQL refuses an index entry over 2704 bytes (500 characters are at most 2000)."""


def check_text(value: object, what: str) -> str:
    """``value`` if it is a name both databases store and index as given, else a
    ConfigurationError naming ``what``: a non-empty string of at most :data:`NAME_LIMIT`
    characters, without NUL (PostgreSQL's text refuses it, so SQLite is held to the same)
    and valid Unicode (a lone surrogate has no UTF-8 form)."""
    if not isinstance(value, str) or not value:
        raise ConfigurationError(f"{what} must be a non-empty string, got {value!r}")
    if len(value) > NAME_LIMIT:
        raise ConfigurationError(
            f"{what} {value[:40]!r}... is {len(value):,} characters, over {NAME_LIMIT}: "
            "name by an id, not by data"
        )
    if "\x00" in value:
        raise ConfigurationError(f"{what} {value[:200]!r} contains a NUL character")
    if not value.isascii():
        try:
            value.encode()
        except UnicodeEncodeError as exc:
            raise ConfigurationError(
                f"{what} {value[:200]!r} is not valid Unicode ({exc.reason})"
            ) from None
    return value


PRIORITY_RANGE = (-(2**31), 2**31 - 1)
"""A priority is a 32-bit integer (PostgreSQL's ``integer``; SQLite is held to the same)."""
TIME_RANGE = (-62135596800.0, 253402300799.0)
"""When a job may be due, in Unix seconds: the years 1 to 9999 (what a datetime can show;
PostgreSQL's timestamps reach further, SQLite's REAL anywhere)."""


def check_priority(value: object, where: str) -> int:
    """``value`` if it is a priority both databases store, else ConfigurationError."""
    low, high = PRIORITY_RANGE
    if not is_whole(value, low, high):
        raise ConfigurationError(
            f"priority {value!r} (in {where}) must be an integer from {low} to {high}"
        )
    return value


def check_due(run_at: float, where: str) -> float:
    """``run_at`` (from a delay or given) if it lies in :data:`TIME_RANGE`."""
    if not TIME_RANGE[0] <= run_at <= TIME_RANGE[1]:
        raise ConfigurationError(
            f"{where} puts the job at Unix time {run_at!r}, outside the years 1 to 9999: "
            "a delay is seconds from now, run_at a Unix time or an aware datetime"
        )
    return run_at


def check_queues(queues: str | Sequence[str] | None, where: str) -> tuple[str, ...] | None:
    """The queues a worker takes, as a tuple of checked names; None (or empty) for all.

    A string is one queue name: ``tuple("default")`` would be the queues 'd', 'e', 'f'...
    and a worker that never runs anything.
    """
    if queues is None:
        return None
    if isinstance(queues, str):
        return (check_queue_name(queues, where),)
    if isinstance(queues, bytes) or not isinstance(queues, Sequence):
        raise ConfigurationError(
            f"{where} must be a queue name or a list of queue names, got "
            f"{type(queues).__name__} {queues!r}"
        )
    return tuple(check_queue_name(q, where) for q in queues) or None


def to_epoch(value: float | datetime | None, name: str) -> float | None:
    """Accept a Unix time or an aware datetime (a naive one could be any zone's)."""
    if value is None:
        return None
    if isinstance(value, int | float) and not isinstance(value, bool):
        if isinstance(value, int) and abs(value) > 2**63:  # float() would overflow
            value = math.inf if value > 0 else -math.inf
        if not math.isfinite(value):
            raise ConfigurationError(f"{name} must be a finite Unix time, got {value!r}")
        return float(value)
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise ConfigurationError(f"{name} must be a timezone-aware datetime, got {value!r}")
        return value.timestamp()
    raise ConfigurationError(f"{name} must be a Unix time or an aware datetime, got {value!r}")


_UNITS = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "m": 1000**2,
    "mb": 1000**2,
    "g": 1000**3,
    "gb": 1000**3,
    "kib": 1024,
    "mib": 1024**2,
    "gib": 1024**3,
}
_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([a-z]*)\s*", re.IGNORECASE)


def parse_size(value: object, name: str) -> int:
    """Bytes from an int or a string such as ``"512MB"``, ``"1.5GiB"`` or ``"300000000"``,
    refused with ``name`` in the message when it is not a positive size."""
    if isinstance(value, bool):
        raise ConfigurationError(f"{name} must be a size such as 512MB, got {value!r}")
    if isinstance(value, int):
        size = value
    elif isinstance(value, str) and (m := _SIZE.fullmatch(value)) and m[2].lower() in _UNITS:
        size = int(float(m[1]) * _UNITS[m[2].lower()])
    else:
        raise ConfigurationError(
            f"{name} must be bytes or a size such as 512MB, 1.5GiB (units: B, KB, MB, GB, "
            f"KiB, MiB, GiB), got {value!r}"
        )
    if size < 1:
        raise ConfigurationError(f"{name} must be more than 0 bytes, got {value!r}")
    return size
