"""Concurrency and rate limits: at most N jobs with the same key run at once, and at most
M start in any window of a rate's unit, across the cluster.

A task declares ``@app.task(concurrency=2, concurrency_key=lambda tenant, **_: tenant)``
(or an enqueue gives ``with_options(concurrency_key="acme")``); each job then carries its
*limit key* (``sync_tenant:acme``, or the task's name when it has no key) and the limit.
Jobs without a limit never meet any of this: their claim excludes limited jobs, through
partial indexes that do not hold them.

Limited jobs are claimed by their own statement, per key: the keys with pending jobs are
found by a loose index scan (one index seek per key), each key gets as many jobs as it
has free slots (its limit minus its running jobs), and all of it happens in the claim's
transaction: the limit holds for every worker on every host. On PostgreSQL the keys are
first locked, in key order, with transaction-scoped advisory locks, so two workers never
count the same key's free slots at once; a key another worker is claiming is waited for
(a statement's time, at most 200 ms, then the claim looks again later); SQLite has one
writer, which serialises claims already. A job over its limit is never claimed (so no
attempt is charged), and a slot frees when its job ends, including by the reaper after a
crashed worker's lease expires. Limited jobs are claimed only for threads free now,
never into a worker's buffer, where they would hold slots that another worker's idle
threads could use.

A rate (``rate="14/s"``) is a sliding window of starts kept per key (``sqljobs_starts``):
the same claim counts the key's starts within the window, takes no more than the rate
allows, writes its own starts and drops those the window has passed, so no window of the
rate's length ever holds more starts than its count. A worker whose due jobs wait for a
rate asks when the window opens and sleeps until then.

A process that lacks the task enqueues by name with the limit the catalogue carries
(written by the workers that have the task); a key function lives in their code, so such
an enqueue passes ``concurrency_key=...``. Before any worker has registered the task,
such a process knows of no limit, and its jobs carry none.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .errors import ConfigurationError, PayloadError
from .validate import check_text, is_whole

KeyFunction = Callable[..., Any]

KEY_LIMIT = 200
"""The longest limit key, in characters (it is indexed and shown, never parsed)."""


RATE = re.compile(r"\s*([0-9]{1,9})\s*/\s*(s|sec|second|m|min|minute|h|hour)\s*", re.IGNORECASE)
UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0}
RATE_MOST = 10_000
"""The largest rate count (its window keeps one row per start)."""


@dataclass(frozen=True)
class Rate:
    """At most ``count`` starts in any ``window`` seconds (``"14/s"``: 14 in any second)."""

    count: int
    window: float

    @classmethod
    def parse(cls, text: object, task: str, owner: str = "task") -> Rate:
        """``owner`` names what ``task`` is in an error: a task, or a queue."""
        match = RATE.fullmatch(text) if isinstance(text, str) else None
        if match is None:
            raise ConfigurationError(
                f"{owner} {task!r}: rate must read like '14/s', '100/m' or '3600/h', got {text!r}"
            )
        count, unit = int(match.group(1)), match.group(2)[0].lower()
        if not 1 <= count <= RATE_MOST:
            raise ConfigurationError(
                f"{owner} {task!r}: a rate's count must be 1 to {RATE_MOST:,}, got {count} (for "
                "more, use a longer unit: 600/m rather than 10/s is the same rate)"
            )
        return cls(count, UNITS[unit])

    def __str__(self) -> str:
        unit = {1.0: "s", 60.0: "m", 3600.0: "h"}.get(self.window, f"{self.window:g}s")
        return f"{self.count}/{unit}"


@dataclass(frozen=True)
class Limit:
    """A task's flow limits: at most ``concurrency`` jobs run at once and at most
    ``rate.count`` start in any ``rate.window`` seconds, counted per key if ``key`` is
    given (a function of the job's arguments), else for the whole task."""

    concurrency: int | None = None
    key: KeyFunction | None = None
    rate: Rate | None = None

    def __post_init__(self) -> None:
        limit = self.concurrency
        bad = not is_whole(limit, 1)
        if limit is not None and bad:
            raise ConfigurationError(f"concurrency must be an int >= 1, got {limit!r}")
        if self.key is not None and not callable(self.key):
            raise ConfigurationError(
                f"concurrency_key must be a function of the task's arguments, got {self.key!r}"
            )

    def key_for(self, task: str, arguments: Mapping[str, Any], given: str | None = None) -> str:
        """The job's limit key: the one given at enqueue, else the key function's answer
        for the job's arguments (passed by name, defaults filled in, so ``lambda tenant,
        **_: tenant`` picks one out), else the task's name (one limit for the task)."""
        if given is not None:
            if not isinstance(given, str) or not given:
                raise ConfigurationError(
                    f"with_options(concurrency_key=...) of task {task!r} must be a non-empty "
                    f"string, got {given!r}"
                )
            return _checked(task, f"{task}:{given}", "with_options(concurrency_key=...)")
        if self.key is None:
            return task
        try:
            value = self.key(**arguments)
        except Exception as exc:
            raise PayloadError(
                f"the concurrency_key function of task {task!r} failed on these arguments: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        if value is None:
            raise PayloadError(
                f"the concurrency_key function of task {task!r} returned None: return the "
                "key the limit counts by (a tenant id, an account, a host)"
            )
        return _checked(task, f"{task}:{value}", "concurrency_key")


def _checked(task: str, key: object, where: str) -> str:
    if isinstance(key, str) and len(key) > KEY_LIMIT:
        raise PayloadError(
            f"the limit key of task {task!r} is {len(key)} characters, over {KEY_LIMIT}: "
            "key by an id, not by data"
        )
    return check_text(key, f"{where} of task {task!r}")


def define_limit(
    concurrency: int | None,
    concurrency_key: KeyFunction | None,
    rate: str | None,
    task: str,
) -> Limit | None:
    """A task's limits from its decorator's arguments (None: unlimited)."""
    if concurrency is None and rate is None:
        if concurrency_key is not None:
            raise ConfigurationError(
                f"task {task!r}: concurrency_key needs concurrency=N (how many may run at once "
                "per key) or rate='N/s'"
            )
        return None
    return Limit(concurrency, concurrency_key, None if rate is None else Rate.parse(rate, task))


QUEUE_KEY = "queue:{queue}"
"""The limit key of the jobs a queue's limit counts (one key for the whole queue)."""


@dataclass(frozen=True)
class QueueLimit:
    """A queue's limits as the catalogue stores them (all None: the queue has none)."""

    queue: str
    concurrency: int | None = None
    rate_max: int | None = None
    rate_window: float | None = None

    @classmethod
    def of(cls, queue: str, limit: Limit | None) -> QueueLimit:
        if limit is None:
            return cls(queue)
        rate = limit.rate
        if rate is None:
            return cls(queue, limit.concurrency)
        return cls(queue, limit.concurrency, rate.count, rate.window)

    def limit(self) -> Limit | None:
        """As a Limit (None if the queue has none)."""
        if self.concurrency is None and self.rate_max is None:
            return None
        rate = None if self.rate_max is None else Rate(self.rate_max, self.rate_window or 1.0)
        return Limit(self.concurrency, None, rate)


def define_queue_limit(queue: str, concurrency: int | None, rate: str | None) -> Limit:
    """A queue's limits from ``app.limit_queue``'s arguments."""
    if concurrency is None and rate is None:
        raise ConfigurationError(
            f"limit_queue({queue!r}) needs concurrency=N (how many of its jobs may run at once "
            "across the cluster) or rate='N/s' (how many may start)"
        )
    parsed = None if rate is None else Rate.parse(rate, queue, owner="queue")
    return Limit(concurrency, None, parsed)


def arguments_by_name(
    signature: inspect.Signature, args: tuple[Any, ...] | list[Any], kwargs: Mapping[str, Any]
) -> dict[str, Any]:
    """A call's arguments by parameter name, defaults filled in; a ``**kwargs`` parameter's
    entries are spread out (a key function asks for ``tenant``, not ``kwargs``)."""
    bound = signature.bind(*args, **kwargs)
    bound.apply_defaults()
    out: dict[str, Any] = {}
    for name, value in bound.arguments.items():
        if signature.parameters[name].kind is inspect.Parameter.VAR_KEYWORD:
            out.update(value)
        else:
            out[name] = value
    return out


def queue_limit_records(limits: Mapping[str, Limit], queues: Iterable[str]) -> list[QueueLimit]:
    """What a worker records in the catalogue for the queues it serves: each one's limit
    in ``limits`` (an App's ``queue_limits``), or none (which clears a limit since taken
    out of the code)."""
    names = set(queues) | set(limits)
    return [QueueLimit.of(name, limits.get(name)) for name in sorted(names)]
