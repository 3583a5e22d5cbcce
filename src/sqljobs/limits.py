"""Concurrency limits: at most N jobs with the same key run at once, across the cluster.

A task declares ``@app.task(concurrency=2, concurrency_key=lambda tenant, **_: tenant)``
(or an enqueue gives ``with_options(concurrency_key="acme")``); each job then carries its
*limit key* (``sync_tenant:acme``, or the task's name when it has no key) and the limit.
Jobs without a limit never meet any of this: their claim excludes limited jobs, through
partial indexes that do not hold them.

Limited jobs are claimed by their own statement, per key: the keys with pending jobs are
found by a loose index scan (one index seek per key), each key gets as many jobs as it
has free slots (its limit minus its running jobs), and all of it happens in the claim's
transaction: the limit holds for every worker on every host. On PostgreSQL the keys are
first locked with transaction-scoped advisory locks (``pg_try_advisory_xact_lock``), so
two workers never count the same key's free slots at once, and a key another worker is
claiming is skipped, not waited for; SQLite has one writer, which serialises claims
already. A job over its limit is never claimed (so no attempt is charged), and a slot
frees when its job ends, including by the reaper after a crashed worker's lease expires.
Limited jobs are claimed only for threads free now, never into a worker's buffer, where
they would hold slots that another worker's idle threads could use.

A process that lacks the task enqueues by name with the limit the catalogue carries
(written by the workers that have the task); a key function lives in their code, so such
an enqueue passes ``concurrency_key=...``. Before any worker has registered the task,
such a process knows of no limit, and its jobs carry none.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .errors import ConfigurationError, PayloadError

KeyFunction = Callable[..., Any]

KEY_LIMIT = 200
"""The longest limit key, in characters (it is indexed and shown, never parsed)."""


@dataclass(frozen=True)
class ConcurrencyLimit:
    """At most ``limit`` jobs of a task run at once, per key if ``key`` is given (a
    function of the job's arguments)."""

    limit: int
    key: KeyFunction | None = None

    def __post_init__(self) -> None:
        if isinstance(self.limit, bool) or not isinstance(self.limit, int) or self.limit < 1:
            raise ConfigurationError(f"concurrency must be an int >= 1, got {self.limit!r}")
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
    if not isinstance(key, str) or not key:
        raise ConfigurationError(f"{where} of task {task!r} must be a non-empty string")
    if len(key) > KEY_LIMIT:
        raise PayloadError(
            f"the limit key of task {task!r} is {len(key)} characters, over {KEY_LIMIT}: "
            "key by an id, not by data"
        )
    return key


def define_limit(
    concurrency: int | None, concurrency_key: KeyFunction | None, task: str
) -> ConcurrencyLimit | None:
    """A task's limit from its decorator's arguments (None: unlimited)."""
    if concurrency is None:
        if concurrency_key is not None:
            raise ConfigurationError(
                f"task {task!r}: concurrency_key needs concurrency=N (how many may run at once "
                "per key)"
            )
        return None
    return ConcurrencyLimit(concurrency, concurrency_key)


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
