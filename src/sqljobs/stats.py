"""Backlog health in one call: counts by queue and state, and the age of the oldest due job.

What it costs. ``app.stats()`` runs on every ``/metrics`` scrape, every dashboard refresh
and every ``sqljobs stats``, while the jobs table keeps every finished job until the pruner
takes it: a million retained ``done`` jobs are normal. So nothing scans the table: every
figure is read through a partial index, and what each costs is bounded by what it is for:

- ``pending`` and ``running`` (the working set) and ``dead`` (jobs that need a person) are
  exact; their cost grows with those jobs only, not with the finished ones kept.
- ``done`` and ``cancelled`` grow with retention, and nobody acts on their exact number, so
  each queue's are counted only up to :data:`COUNT_CAP`. A count that reached the cap is
  named in :attr:`Stats.capped`: it holds the cap and the queue has more (shown "10000+").
  Below the cap every number is exact, as it always was.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from .jobs import JobState
from .limits import Rate

COUNT_CAP = 10_000
"""How many ``done`` (and ``cancelled``) jobs of one queue are counted before the count
stops and says "more": high enough that a small or young queue's numbers stay exact, low
enough that counting them is cheap (a stretch of one index, about a millisecond a queue)."""

LIMITS_SHOWN = 50
"""How many limit keys stats name (the busiest: most due jobs waiting, then most running);
a limit per tenant may have thousands of keys, and a metrics label per key would flood."""

CAPPED_STATES = (JobState.DONE, JobState.CANCELLED)
"""The states whose counts stop at :data:`COUNT_CAP`: the ones that grow with retention."""


def count_text(state: JobState | str, n: int, cap: int = COUNT_CAP) -> str:
    """A count as a person should read it where only the number is at hand (a
    ``QueueInfo``): a done or cancelled count that reached the cap is a lower bound."""
    return f"{n}+" if n >= cap and str(state) in CAPPED_STATES else str(n)


@dataclass(frozen=True)
class LimitUsage:
    """One limit key as stats see it: its due jobs that wait (for a slot, for the rate's
    window, or for a free worker), its running jobs, and its limits."""

    key: str
    queue: str
    waiting: int
    running: int
    concurrency: int | None
    rate: str | None
    """Like ``"14/s"``; None: no rate."""

    @property
    def full(self) -> bool:
        """Whether every slot is taken: its waiting jobs wait for one to free."""
        return self.concurrency is not None and self.running >= self.concurrency


@dataclass(frozen=True)
class Stats:
    """A snapshot of the queue.

    ``counts[queue][state]`` is the number of jobs, exact except where :attr:`capped` says
    it stopped at :attr:`count_cap`. ``oldest_pending_age`` is how long the oldest *due*
    pending job has waited, in seconds (None when nothing is waiting). It is the number to
    alert on: a count says how much work there is, the age says whether workers keep up.
    """

    counts: dict[str, dict[str, int]]
    oldest_pending_age: float | None
    oldest_pending_age_by_queue: dict[str, float] = field(default_factory=dict)
    workers: int = 0
    unserved: dict[str, int] = field(default_factory=dict)
    """Pending jobs by task that no live worker would claim: none has registered the task,
    or none that has serves the job's queue (``--queues``). They wait until such a worker
    starts (a worker claims only the tasks it has, from the queues it serves)."""
    paused: list[str] = field(default_factory=list)
    """Queues paused with ``app.pause_queue``: workers claim none of their jobs."""
    capped: dict[str, list[str]] = field(default_factory=dict)
    """The counts that are lower bounds, queue → states (``done``, ``cancelled``): that
    queue has more than :attr:`count_cap` jobs in that state, and ``counts`` holds the cap.
    Empty when every count is exact."""
    count_cap: int = COUNT_CAP
    """Where ``done`` and ``cancelled`` counts stop, per queue."""
    limits: dict[str, LimitUsage] = field(default_factory=dict)
    """Concurrency and rate limit keys with jobs waiting or running, the busiest
    :data:`LIMITS_SHOWN` of them, by key."""

    def total(self, state: JobState | str) -> int:
        """Jobs in ``state`` across all queues: a lower bound when ``is_capped(state)``."""
        key = str(state)
        return sum(by_state.get(key, 0) for by_state in self.counts.values())

    def is_capped(self, state: JobState | str, queue: str | None = None) -> bool:
        """Whether ``counts[queue][state]`` (or, with no queue, ``total(state)``) stopped
        at the cap: the true number is larger."""
        key = str(state)
        if queue is not None:
            return key in self.capped.get(queue, ())
        return any(key in states for states in self.capped.values())

    def count_text(self, state: JobState | str, queue: str | None = None) -> str:
        """The count as a person should read it: ``"42"``, or ``"10000+"`` where it is a
        lower bound (of ``queue``, or with no queue the total)."""
        n = self.total(state) if queue is None else self.counts.get(queue, {}).get(str(state), 0)
        return f"{n}+" if self.is_capped(state, queue) else str(n)

    def to_dict(self) -> dict[str, Any]:
        return {
            "counts": {q: dict(s) for q, s in self.counts.items()},
            "capped": {q: list(s) for q, s in self.capped.items()},
            "count_cap": self.count_cap,
            "oldest_pending_age": self.oldest_pending_age,
            "oldest_pending_age_by_queue": dict(self.oldest_pending_age_by_queue),
            "workers": self.workers,
            "unserved": dict(self.unserved),
            "paused": list(self.paused),
            "limits": {key: asdict(usage) for key, usage in self.limits.items()},
        }


def capped_counts(
    rows: Iterable[Sequence[Any]], cap: int
) -> tuple[dict[str, dict[str, int]], dict[str, list[str]]]:
    """Counts by queue and state from ``(queue, state, jobs)`` rows (a state may come in
    several rows; they add up), with every state present for every queue, and which counts
    are capped: a ``done`` or ``cancelled`` row over ``cap`` (counted up to ``cap + 1``
    only) becomes ``cap`` and is named in the second dictionary."""
    counts: dict[str, dict[str, int]] = {}
    capped: dict[str, list[str]] = {}
    for queue, state, jobs in rows:
        n = int(jobs)
        if state in CAPPED_STATES and n > cap:
            n = cap
            capped.setdefault(queue, []).append(state)
        by_state = counts.setdefault(queue, {s.value: 0 for s in JobState})
        by_state[state] += n
    by_queue = {q: counts[q] for q in sorted(counts)}
    return by_queue, {q: sorted(capped[q]) for q in sorted(capped)}


def with_queues(stats: Stats, queues: Iterable[str]) -> Stats:
    """``stats`` with every one of ``queues`` in its counts, all zeros where it has no
    jobs: a queue that a task uses exists before its first job and after the pruner has
    taken its last, and code that reads its counts should not have to know which."""
    missing = set(queues) - set(stats.counts)
    if not missing:
        return stats
    empty = {s.value: 0 for s in JobState}
    counts = {**stats.counts, **{q: dict(empty) for q in missing}}
    return replace(stats, counts={q: counts[q] for q in sorted(counts)})


def limit_usages(
    waiting: Iterable[Sequence[Any]], running: Iterable[Sequence[Any]], most: int = LIMITS_SHOWN
) -> dict[str, LimitUsage]:
    """The busiest limit keys, from ``(key, queue, waiting|running, limit_max, rate_max,
    rate_window)`` rows of due waiting jobs and of running ones."""
    found: dict[str, list[Any]] = {}
    for rows, slot in ((waiting, 2), (running, 3)):
        for key, queue, n, limit_max, rate_max, window in rows:
            entry = found.setdefault(key, [key, queue, 0, 0, limit_max, rate_max, window])
            entry[slot] += int(n)
    busiest = sorted(found.values(), key=lambda e: (-e[2], -e[3], e[0]))[:most]
    usages = {}
    for key, queue, waiting_n, running_n, limit_max, rate_max, window in busiest:
        rate = None if rate_max is None else str(Rate(int(rate_max), float(window or 1.0)))
        usages[key] = LimitUsage(key, queue, waiting_n, running_n, limit_max, rate)
    return usages


def oldest_due_ages(rows: Iterable[Sequence[Any]]) -> dict[str, float]:
    """Each queue's age of its oldest due pending job, in seconds and never below zero,
    from ``(queue, age)`` rows: a queue may come in several, and age None (nothing due)."""
    ages: dict[str, float] = {}
    for queue, age in rows:
        if age is not None:
            ages[queue] = max(ages.get(queue, 0.0), float(age))
    return ages


@dataclass(frozen=True)
class WorkerScope:
    """What one live worker claims: jobs of its ``tasks`` in its ``queues`` (None: in
    every queue)."""

    tasks: frozenset[str]
    queues: frozenset[str] | None

    def serves(self, task: str, queue: str) -> bool:
        return task in self.tasks and (self.queues is None or queue in self.queues)


def worker_scope(tasks: str, queues: str | None) -> WorkerScope:
    """A worker's scope from its row: both columns hold JSON lists (queues null: all)."""
    names = json.loads(queues) if queues else None
    return WorkerScope(frozenset(json.loads(tasks)), None if names is None else frozenset(names))


def unserved_tasks(
    pending_by_task: Iterable[Sequence[Any]],
    scopes: Sequence[WorkerScope],
    pending_queues: Iterable[str],
    pending_in_queue: Callable[[str], Iterable[Sequence[Any]]],
) -> dict[str, int]:
    """Pending counts, by task, of the jobs no live worker would claim: their task is run
    by none, or by none that serves their queue. From ``(task, pending)`` rows (a task may
    come in several, which add up), the queues that have pending jobs, and a way to ask
    for one queue's ``(task, pending)`` rows: asked only of a queue where a task that some
    worker runs is not run by a worker serving that queue (never, while every worker
    serves every queue)."""
    served = {name for scope in scopes for name in scope.tasks}
    pending: dict[str, int] = {}
    for task, n in pending_by_task:
        pending[task] = pending.get(task, 0) + int(n)
    unserved = {task: n for task, n in pending.items() if task not in served}
    runnable = set(pending) & served
    for queue in sorted(set(pending_queues)):
        here = {name for s in scopes if s.queues is None or queue in s.queues for name in s.tasks}
        if runnable <= here:
            continue
        for task, n in pending_in_queue(queue):
            if task in served and task not in here:
                unserved[task] = unserved.get(task, 0) + int(n)
    return unserved
