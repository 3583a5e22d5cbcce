"""Finding jobs the way an operator asks for them, and acting on what was found.

A :class:`JobFilter` names jobs by state, queue, task, key, argument text, creation time
or a selection of ids. :meth:`App.find_jobs` pages through them newest first by keyset
(``before`` an id, never an offset, so page 500 costs what page 1 does); the bulk actions
(:meth:`App.retry_jobs`, :meth:`App.cancel_jobs`, :meth:`App.delete_jobs`) change every
match in bounded batches. Everything that scans is bounded, so that a dashboard answers
fast over a million jobs:

- a count stops at a cap (:class:`JobCount` says whether it did);
- a search of argument text looks at no more than :data:`TEXT_SCAN` jobs per page, and
  the page says where it stopped (``next_before``) so the next page searches on below.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields

from .errors import ConfigurationError
from .jobs import Job, JobState
from .validate import MAX_ID, check_queue_name

TEXT_SCAN = 20_000
"""The most jobs one page of an argument-text search reads (there is no index on text)."""
COUNT_SCAN = 100_000
"""The newest jobs a count by task, key, time or text reads at most: beyond them it says
"at least" (:attr:`JobCount.capped`) rather than read the whole table."""
MAX_TEXT = 200
"""The longest argument text searched for."""
MAX_IDS = 10_000
"""The most ids one selection names."""
ENDED = (JobState.DONE.value, JobState.DEAD.value, JobState.CANCELLED.value)
UNENDED = (JobState.PENDING.value, JobState.WAITING.value, JobState.RUNNING.value)
RETRYABLE = (JobState.DEAD.value, JobState.CANCELLED.value)


def _searchable(value: object) -> bool:
    """Text a database can compare: a non-empty string, no NUL, valid Unicode."""
    if not isinstance(value, str) or not value or "\x00" in value:
        return False
    try:
        value.encode()
    except UnicodeEncodeError:
        return False
    return True


def is_job_id(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= MAX_ID


@dataclass(frozen=True)
class JobFilter:
    """Which jobs: every field given must match (an empty filter matches every job).

    ``key`` matches exactly; ``text`` is a substring of the arguments as stored (JSON),
    compared case-insensitively (ASCII letters on SQLite, all letters on PostgreSQL);
    ``since`` and ``until`` bound the creation time in Unix seconds (``since`` included,
    ``until`` not); ``ids`` is a selection; ``up_to`` leaves out jobs newer than that id
    (what a confirmation counted: jobs enqueued since are not acted on); ``skip_tasks``
    leaves out those tasks' jobs (the App puts the tasks that redact arguments here for a
    text search, so a search cannot tell what they hide)."""

    state: str | None = None
    queue: str | None = None
    task: str | None = None
    key: str | None = None
    text: str | None = None
    since: float | None = None
    until: float | None = None
    ids: tuple[int, ...] | None = None
    up_to: int | None = None
    skip_tasks: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if self.state is not None and self.state not in {s.value for s in JobState}:
            states = ", ".join(s.value for s in JobState)
            raise ConfigurationError(f"JobFilter(state={self.state!r}): a state is one of {states}")
        if self.queue is not None:
            check_queue_name(self.queue, "JobFilter(queue=...)")
        for name in ("task", "key", "text"):
            value = getattr(self, name)
            if value is not None and not _searchable(value):
                raise ConfigurationError(
                    f"JobFilter({name}={value!r}): give a non-empty string without NUL bytes "
                    "or lone surrogates"
                )
        if self.text is not None and len(self.text) > MAX_TEXT:
            raise ConfigurationError(
                f"JobFilter(text=...) is {len(self.text)} characters: search for at most {MAX_TEXT}"
            )
        for name in ("since", "until"):
            value = getattr(self, name)
            number = isinstance(value, int | float) and not isinstance(value, bool)
            if value is not None and not (number and math.isfinite(value)):
                raise ConfigurationError(f"JobFilter({name}={value!r}): give Unix seconds")
        if self.up_to is not None and not is_job_id(self.up_to):
            raise ConfigurationError(f"JobFilter(up_to={self.up_to!r}): give a job id")
        if self.since is not None and self.until is not None and self.since >= self.until:
            raise ConfigurationError(
                f"JobFilter(since={self.since}, until={self.until}): since must come before until"
            )
        if self.ids is not None:
            if isinstance(self.ids, str | bytes) or not isinstance(self.ids, Iterable):
                raise ConfigurationError(f"JobFilter(ids={self.ids!r}): give a list of job ids")
            object.__setattr__(self, "ids", tuple(self.ids))
            if len(self.ids) > MAX_IDS:
                raise ConfigurationError(
                    f"JobFilter(ids=...) names {len(self.ids)} jobs: select at most {MAX_IDS}, "
                    "or filter by state, queue or task instead"
                )
            bad = [i for i in self.ids if not is_job_id(i)]
            if bad:
                raise ConfigurationError(f"JobFilter(ids=...): {bad[0]!r} is not a job id")
        if self.skip_tasks is not None:
            object.__setattr__(self, "skip_tasks", tuple(self.skip_tasks))

    def describe(self) -> str:
        """The filter in words, for log lines: ``state=dead, queue=mail``."""
        given = [(f.name, getattr(self, f.name)) for f in fields(self)]
        words = []
        for name, value in given:
            if value is None:
                continue
            if name == "ids":
                value = f"{len(value)} selected"
            elif name == "skip_tasks":
                continue
            words.append(f"{name}={value}")
        return ", ".join(words) or "every job"

    def by_state_and_queue_only(self) -> bool:
        """No field but ``state`` and ``queue``: what the stats count by themselves."""
        return all(
            getattr(self, f.name) is None for f in fields(self) if f.name not in ("state", "queue")
        )

    def only(self, states: Sequence[str]) -> tuple[str, ...]:
        """The states among ``states`` this filter admits (none: it matches nothing there)."""
        return tuple(s for s in states if self.state is None or self.state == s)


@dataclass(frozen=True)
class JobPage:
    """One page of :meth:`App.find_jobs`, newest first. ``next_before``: pass it as
    ``before`` for the next page (None: there is none). A text search may return fewer
    jobs than asked with a ``next_before`` still set: it read its share of the table and
    stopped there, and the next page searches on below ``next_before``."""

    jobs: list[Job]
    next_before: int | None


@dataclass(frozen=True)
class JobCount:
    """How many jobs match: ``capped`` means "at least ``n``" (the count stopped at its cap,
    or read only the newest jobs)."""

    n: int
    capped: bool

    def __str__(self) -> str:
        return f"{self.n:,}+" if self.capped else f"{self.n:,}"


@dataclass(frozen=True)
class WorkerStatus:
    """A live worker process and the jobs it is running right now."""

    id: str
    host: str
    pid: int
    queues: list[str] | None
    """The queues it takes from (None: every queue)."""
    concurrency: int
    started_at: float
    last_seen: float
    heartbeat_interval: float
    tasks: list[str]
    running: list[Job]
