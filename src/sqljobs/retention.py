"""How long finished jobs are kept before the pruner deletes them, by final state, and
how long a business key outlives its job's row."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Literal

from .errors import ConfigurationError
from .validate import seconds

if TYPE_CHECKING:
    from .jobs import KeyScope

DAY = 24 * 3600.0
DEAD_KEPT = 7 * DAY
"""The shortest time a dead job is kept by default: a week for a person to look."""
KEY_RETENTION = 7 * DAY
"""How long a key refuses duplicates after the pruner deleted its job's row, by default."""
KEY_RETENTION_MAX = 253402300799.0
"""The longest finite ``key_retention`` (about 8,000 years); None keeps a key for ever."""

KeyRetention = float | timedelta | Literal["default"] | None
"""A ``key_retention`` setting: seconds or a timedelta (0: not past the row), None (for
ever), or ``"default"`` (the task's setting, else the pruning App's ``Retention.keys``)."""


def key_retention_of(value: float | timedelta | None, where: str) -> float | None:
    """``value`` as seconds a key outlives its job's row (None: for ever), or a
    ConfigurationError naming ``where`` it was given."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float | timedelta):
        raise ConfigurationError(
            f"{where} must be seconds or a timedelta (how long a key outlives its job's "
            f"row), or None to keep the key for ever, got {value!r}"
        )
    age = seconds(value, where)
    if age > KEY_RETENTION_MAX:
        raise ConfigurationError(
            f"{where} is {value!r}, longer than any date can say: use None to keep the key for ever"
        )
    return age


@dataclass(frozen=True)
class Retention:
    """Seconds (or a timedelta) each final state is kept, counted from when the job
    ended; None keeps such jobs until deleted by hand. ``keys``: how long a business key
    (``key_scope="retained"``, the default) outlives its job's row, for the jobs whose
    task or enqueue does not say (``key_retention``); None keeps such keys for ever, 0
    not past the row.

    ``events``: how long an event ``app.emit`` stored is kept for a workflow that waits
    for it later (None: for ever).

    A job's row is its record: its result, error, history and attempts. Done jobs are
    many and cheap to lose, so they go first; dead and cancelled ones wait a week for a
    person to look. A key refuses duplicates while its row is kept, then the pruner keeps
    it apart (``sqljobs_spent_keys``), a week by default, so a producer's late retry is
    still recognised after the row has gone.
    """

    done: float | timedelta | None = DAY
    cancelled: float | timedelta | None = 7 * DAY
    dead: float | timedelta | None = DEAD_KEPT
    keys: float | timedelta | None = KEY_RETENTION
    events: float | timedelta | None = 7 * DAY

    def __post_init__(self) -> None:
        for state in ("done", "cancelled", "dead", "events"):
            value = getattr(self, state)
            if value is not None:
                age = seconds(value, f"Retention({state}=...)")
                if age is None or age <= 0:  # 0 would delete a job the moment it ends
                    raise ConfigurationError(
                        f"Retention({state}=...) must be > 0 seconds, or None to keep such "
                        f"jobs for ever, got {value!r}"
                    )
                object.__setattr__(self, state, age)
        object.__setattr__(self, "keys", key_retention_of(self.keys, "Retention(keys=...)"))

    @classmethod
    def of(cls, value: Retention | float | timedelta | None) -> Retention:
        """An App's ``retention`` setting: a Retention, or one duration for every ended
        state, dead jobs kept at least the default week (a shorter duration still keeps
        them a week for a person to look); None or 0 keeps every job, and every key, for
        ever."""
        if isinstance(value, Retention):
            return value
        if value is None:
            return cls(done=None, cancelled=None, dead=None, keys=None, events=None)
        age = seconds(value, "retention")
        if age is None or age < 0:
            raise ConfigurationError(f"retention must be >= 0 seconds, got {value!r}")
        if not age:
            return cls(done=None, cancelled=None, dead=None, keys=None, events=None)
        return cls(done=age, cancelled=age, dead=max(age, DEAD_KEPT))

    def ages(self) -> dict[str, float]:
        """State -> seconds kept, for the states that are pruned at all."""
        out = {}
        for state in ("done", "cancelled", "dead"):
            value = getattr(self, state)
            if value is not None:
                out[state] = float(value)
        return out

    def event_seconds(self) -> float | None:
        """``events`` in seconds (None: for ever)."""
        return seconds(self.events, "Retention(events=...)")

    def key_seconds(self) -> float:
        """``keys`` in seconds, ``inf`` for ever (what the pruner compares)."""
        keys = self.keys  # seconds once __post_init__ has run
        return math.inf if keys is None else seconds(keys, "Retention(keys=...)")

    def describe(self) -> str:
        """Each state's and the keys' period, as the worker banner and the CLI show it:
        ``done 1 d, cancelled 7 d, dead 7 d, keys 7 d past their jobs, events 7 d``."""
        parts = []
        for state in ("done", "cancelled", "dead"):
            value = getattr(self, state)
            parts.append(f"{state} {'forever' if value is None else _span(float(value))}")
        kept = self.key_seconds()
        if math.isinf(kept):
            keys = "forever"
        else:
            keys = f"{_span(kept)} past their jobs" if kept else "with their jobs"
        parts.append(f"keys {keys}")
        events = self.event_seconds()
        parts.append(f"events {'forever' if events is None else _span(events)}")
        return ", ".join(parts)


DEFAULT_RETENTION = Retention()
"""An App's retention unless told otherwise."""


def _span(age: float) -> str:
    if age % DAY == 0:
        return f"{age / DAY:g} d"
    if age % 3600 == 0:
        return f"{age / 3600:g} h"
    return f"{age:g} s"


def key_hold(scope: KeyScope) -> float | None:
    """How long after its job finishes a key keeps refusing duplicates, in seconds.

    ``"retained"`` (the default): as long as the job is kept (until the pruner deletes it
    after the app's retention) and then for its ``key_retention`` (a week by default), so
    a late duplicate after completion is refused too. ``"active"``: only while the job is
    pending or running. A number or timedelta: that long after the job finished, whether
    or not its row is still kept.
    """
    if scope == "retained":
        return None
    if scope == "active":
        return 0.0
    if isinstance(scope, str):
        raise ConfigurationError(
            f"key_scope must be 'active', 'retained' or a duration, got {scope!r}"
        )
    return seconds(scope, "key_scope")


def check_key_retention(
    value: KeyRetention, scope: KeyScope, where: str
) -> float | Literal["default"] | None:
    """``value`` checked (see :func:`~sqljobs.retention.key_retention_of`), "default" as
    is. A key_retention given with a scope other than "retained" is refused: those scopes
    say themselves how long the key is held."""
    if isinstance(value, str) and value == "default":
        return "default"
    kept = key_retention_of(value, where)
    if not (isinstance(scope, str) and scope == "retained"):
        raise ConfigurationError(
            f"{where} applies to keys with key_scope='retained' (the default), not "
            f"key_scope={scope!r}, which says itself how long the key is held: drop one"
        )
    return kept
