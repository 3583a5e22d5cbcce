"""Retry policy: exponential backoff with full jitter, a cap, max attempts and a deadline."""

from __future__ import annotations

import random
from dataclasses import dataclass

from .errors import ConfigurationError
from .validate import is_whole, seconds


@dataclass(frozen=True)
class Retry:
    """How a failing job is retried.

    The n-th retry (n = 1, 2, ...) waits a uniformly random time in
    ``[0, min(cap, base * 2**(n-1))]`` ("full jitter"), so a burst of failures spreads out
    instead of coming back as one wave. After ``max_attempts`` attempts, or once
    ``deadline`` seconds have passed since the job was enqueued, the job is ``dead``.
    """

    max_attempts: int = 5
    base: float = 1.0
    cap: float = 300.0
    deadline: float | None = None
    jitter: bool = True

    def __post_init__(self) -> None:
        attempts = self.max_attempts
        if not is_whole(attempts, 1):
            raise ConfigurationError(f"Retry max_attempts must be an int >= 1, got {attempts!r}")
        object.__setattr__(self, "base", seconds(self.base, "Retry base"))
        object.__setattr__(self, "cap", seconds(self.cap, "Retry cap"))
        object.__setattr__(self, "deadline", seconds(self.deadline, "Retry deadline"))

    def ceiling(self, attempt: int) -> float:
        """Largest delay before the retry that follows attempt number ``attempt`` (1-based)."""
        exponent = min(max(attempt - 1, 0), 62)
        return min(self.cap, self.base * (2.0**exponent))

    def delay(self, attempt: int, rng: random.Random | None = None) -> float:
        """Delay before the retry that follows attempt ``attempt``."""
        top = self.ceiling(attempt)
        if not self.jitter:
            return top
        return (rng or random).uniform(0.0, top)


NO_RETRY = Retry(max_attempts=1)
