"""Cron expressions in a time zone: checked at definition time, next tick from cronsim.

Daylight saving time follows Debian cron, as cronsim does. A job at a fixed local time
(both the minute and the hour fields fixed, e.g. ``30 2 * * *``) that falls into a
spring-forward gap runs at the first valid minute after it, and in an autumn repeat it
runs once, at the first occurrence. An expression with a wildcard minute or hour
(``*/15 * * * *``) runs on real time, so each real quarter hour counts once, repeats
included.
"""

from __future__ import annotations

from datetime import UTC, datetime, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from .errors import ConfigurationError

ALIASES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}

_SEARCH_LIMIT = 1000  # candidates to look at before giving up (DST repeats need a few)


def zone(name: str) -> tzinfo:
    """The time zone ``name`` (an IANA name such as ``Europe/Berlin``, or ``UTC``)."""
    if not isinstance(name, str) or not name:
        raise ConfigurationError(f"time zone must be an IANA name such as 'UTC', got {name!r}")
    if name.upper() == "UTC":
        return UTC
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError) as exc:  # OSError: a name too long
        raise ConfigurationError(
            f"unknown time zone {name!r}: use an IANA name such as 'Europe/Berlin' or 'UTC' "
            "(on a system without time zone data, install tzdata)"
        ) from exc


def check_cron(expression: str, tz: str) -> str:
    """The expression to store (aliases such as ``@daily`` expanded), or a
    ConfigurationError that quotes it."""
    if not isinstance(expression, str) or not expression.strip():
        raise ConfigurationError(f"cron expression must be a non-empty string, got {expression!r}")
    normalised = " ".join(ALIASES.get(expression.strip().lower(), expression).split())
    try:
        next_cron_tick(normalised, tz, datetime.now(UTC).timestamp())
    except (CronSimError, StopIteration) as exc:  # cronsim stops after 50 years of no match
        why = str(exc) or "it never matches"
        raise ConfigurationError(
            f"malformed cron expression {expression!r}: {why} (expected five fields, "
            "'minute hour day-of-month month day-of-week', e.g. '0 3 * * *')"
        ) from exc
    return normalised


def next_cron_tick(expression: str, tz: str | tzinfo, after: float) -> float:
    """The first time strictly after ``after`` (Unix seconds) that ``expression`` names in
    ``tz``. Raises CronSimError for a malformed expression."""
    where = zone(tz) if isinstance(tz, str) else tz
    candidates = CronSim(expression, datetime.fromtimestamp(after, where))
    for _ in range(_SEARCH_LIMIT):
        # cronsim walks local wall time: in an autumn repeat a candidate can lie before
        # ``after`` (its first occurrence already passed), so keep the first one after it
        tick = next(candidates).timestamp()
        if tick > after:
            return tick
    raise CronSimError("it never matches")
