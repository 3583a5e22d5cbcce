"""How long finished jobs are kept before the pruner deletes them, by final state."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from .errors import ConfigurationError
from .retry import seconds

DAY = 24 * 3600.0


@dataclass(frozen=True)
class Retention:
    """Seconds (or a timedelta) each final state is kept, counted from when the job
    ended; None keeps such jobs until deleted by hand.

    A job's row is its record: its result, error, history and, for a key with the
    ``"retained"`` scope, the key itself, which refuses duplicates until the row goes.
    Done jobs are many and cheap to lose, so they go first; dead and cancelled ones wait
    a week for a person to look.
    """

    done: float | timedelta | None = DAY
    cancelled: float | timedelta | None = 7 * DAY
    dead: float | timedelta | None = 7 * DAY

    def __post_init__(self) -> None:
        for state in ("done", "cancelled", "dead"):
            value = getattr(self, state)
            if value is not None:
                age = seconds(value, f"Retention({state}=...)")
                if age is None or age <= 0:  # 0 would delete a job the moment it ends
                    raise ConfigurationError(
                        f"Retention({state}=...) must be > 0 seconds, or None to keep such "
                        f"jobs for ever, got {value!r}"
                    )
                object.__setattr__(self, state, age)

    @classmethod
    def of(cls, value: Retention | float | timedelta | None) -> Retention:
        """An App's ``retention`` setting: a Retention, or one duration for done and
        cancelled jobs (dead ones keep the default week); None or 0 keeps done and
        cancelled jobs for ever."""
        if isinstance(value, Retention):
            return value
        if value is None:
            return cls(done=None, cancelled=None)
        age = seconds(value, "retention")
        if age is None or age < 0:
            raise ConfigurationError(f"retention must be >= 0 seconds, got {value!r}")
        kept = age or None
        return cls(done=kept, cancelled=kept)

    def ages(self) -> dict[str, float]:
        """State -> seconds kept, for the states that are pruned at all."""
        out = {}
        for state in ("done", "cancelled", "dead"):
            value = getattr(self, state)
            if value is not None:
                out[state] = float(value)
        return out

    def describe(self) -> str:
        parts = []
        for state in ("done", "cancelled", "dead"):
            value = getattr(self, state)
            parts.append(f"{state} {'forever' if value is None else _span(float(value))}")
        return ", ".join(parts)


def _span(age: float) -> str:
    if age % DAY == 0:
        return f"{age / DAY:g} d"
    if age % 3600 == 0:
        return f"{age / 3600:g} h"
    return f"{age:g} s"
