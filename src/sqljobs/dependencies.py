"""Jobs that wait for other jobs: ``with_options(after=[...])`` and ``app.group(...)``.

A child enqueued ``after`` its parents is ``waiting`` (not claimable) until each parent
has ended; the transaction that ends the last one makes it ``pending``, so nothing polls.
Under ``after_policy="done"`` (the default) every parent must end ``done``: a parent that
ends ``dead`` or ``cancelled`` cancels the child at once, with the reason in its
``last_error``, and so on down to the child's own children. ``after_policy="always"`` runs
the child once every parent has ended, however.

Parents exist before their children (an id that names no job is refused), so a cycle
cannot be built. An edge lives in ``sqljobs_deps`` while its parent has not ended; the
parent's end takes it, so each edge is settled once. A group's callback ``collects``: its
parents' results are kept on it as they end, and become its first argument, a list in
the group's order, when it is released.

This module holds the rules; the backends apply them inside their transactions
(:func:`sqljobs.backends.ops.job_graph.settle_children`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from .errors import ConfigurationError, JobNotFound
from .payload import decode, encode, headers, with_headers
from .validate import is_whole

if TYPE_CHECKING:
    from .handles import JobHandle

AfterPolicy = Literal["done", "always"]
AFTER_POLICIES: tuple[AfterPolicy, ...] = ("done", "always")
ENDED = frozenset(("done", "dead", "cancelled"))
FAILED = frozenset(("dead", "cancelled"))


def parent_ids(after: Iterable[JobHandle | int] | None) -> tuple[int, ...]:
    """The job ids in ``after`` (handles or ids), in order; a wrong type or a repeated
    id is refused where it was given."""
    if after is None:
        return ()
    if isinstance(after, str | bytes) or not isinstance(after, Iterable):
        raise ConfigurationError(
            f"after= takes a list of job handles or ids, got {type(after).__name__}"
        )
    ids: list[int] = []
    for item in after:
        job_id = getattr(item, "id", item)
        if not is_whole(job_id, 1):
            raise ConfigurationError(
                f"after= takes job handles or positive integer ids, got {item!r}"
            )
        if job_id in ids:
            raise ConfigurationError(f"after= names job {job_id} twice")
        ids.append(job_id)
    return tuple(ids)


def check_policy(policy: object) -> AfterPolicy:
    for known in AFTER_POLICIES:
        if policy == known:
            return known
    raise ConfigurationError(
        f"after_policy must be 'done' (run only if every parent is done) or 'always' "
        f"(run once every parent has ended), got {policy!r}"
    )


def failed_reason(parent: int, state: str) -> str:
    """What a child cancelled by its parent's end says in its ``last_error``."""
    return (
        f"parent job {parent} ended {state}: this job was enqueued to run after it was "
        "done (after_policy='always' would have run it anyway)"
    )


@dataclass(frozen=True)
class Start:
    """How a new child starts: ``waiting`` for ``open_parents``, ``pending`` (every parent
    has ended as its policy needs), or ``cancelled`` (one failed) with ``reason``."""

    state: str
    open_parents: tuple[int, ...]
    reason: str | None = None
    collected: dict[str, Any] | None = None


def start(
    parents: Sequence[int],
    found: Mapping[int, tuple[str, str | None]],
    policy: str,
    collect: bool,
) -> Start:
    """Decide a child's first state from its parents' ``(state, result)`` as locked in
    the enqueue's transaction; a parent that does not exist is an error."""
    missing = [p for p in parents if p not in found]
    if missing:
        names = ", ".join(map(str, missing))
        raise JobNotFound(
            f"after= names no job {names}: it never existed, or it ended and was pruned "
            "(a job can only wait for jobs that exist)"
        )
    if policy == "done":
        for parent in parents:
            state = found[parent][0]
            if state in FAILED:
                return Start("cancelled", (), failed_reason(parent, state))
    # distinct: two members of a group may be one job (a business key), one edge
    open_parents = tuple(dict.fromkeys(p for p in parents if found[p][0] not in ENDED))
    collected = None
    if collect:
        collected = {str(p): _kept(found[p][1]) for p in parents if found[p][0] in ENDED}
    return Start("waiting" if open_parents else "pending", open_parents, None, collected)


@dataclass(frozen=True)
class Settlement:
    """What the end of some parents does to their children: ``releases`` maps a child to
    the parents that ended as it allows, ``cancels`` a child to why it cannot run."""

    releases: dict[int, list[int]]
    cancels: dict[int, str]


def settle(
    edges: Iterable[tuple[int, int]],
    ended: Mapping[int, str],
    policies: Mapping[int, str | None],
) -> Settlement:
    """Apply each child's policy to the ``(parent, child)`` edges whose parents ended in
    the states ``ended`` gives."""
    releases: dict[int, list[int]] = {}
    cancels: dict[int, str] = {}
    for parent, child in sorted(edges, key=lambda e: (e[1], e[0])):
        state = ended[parent]
        if state in FAILED and policies.get(child, "done") != "always":
            cancels.setdefault(child, failed_reason(parent, state))
        else:
            releases.setdefault(child, []).append(parent)
    for child in cancels:
        releases.pop(child, None)
    return Settlement(releases, cancels)


def results_of(parents: Iterable[int], results: Mapping[int, str | None]) -> str:
    """Parents' stored results as one JSON object by parent id (what a collecting child
    keeps until it is released), each as ``{"t": its JSON text}`` (``{}`` for none): kept
    as text, PostgreSQL's jsonb cannot rewrite it (``1.5e300`` came back an int, ``-0.0``
    as ``0``, objects with their keys sorted), and SQLite's json_patch, which drops a
    null, finds none to drop."""
    return json.dumps({str(p): _kept(results.get(p)) for p in parents})


def _kept(text: str | None) -> dict[str, str]:
    return {} if text is None else {"t": text}


def _collected(entry: Any) -> Any:
    """A parent's result as collected: ``{"t": text}``, or, as rows written before kept
    text, ``[value]``."""
    if isinstance(entry, dict):
        return _value(entry.get("t"))
    return entry[0] if isinstance(entry, list) and entry else None


def with_results(task: str, payload: str, parents: Sequence[int], collected: Any) -> str:
    """A group callback's payload once released: its parents' results, a list in the
    group's order (None for a parent that returned nothing or did not end done), before
    its own arguments. Its headers (a trace context) stay."""
    kept = json.loads(collected) if isinstance(collected, str) else dict(collected or {})
    args, kwargs = decode(payload)
    results = [_collected(kept.get(str(p))) for p in parents]
    return with_headers(encode(task, [results, *args], kwargs), headers(payload))


def _value(text: str | None) -> Any:
    return None if text is None else json.loads(text)


@dataclass(frozen=True)
class Group:
    """What ``app.group`` enqueued: its ``members`` and the callback ``then`` (if any),
    which runs once every member has ended."""

    members: list[JobHandle]
    then: JobHandle | None

    @property
    def ids(self) -> list[int]:
        return [m.id for m in self.members]

    def result(self, timeout: float | None = None) -> Any:
        """The callback's result, or without one, the members' results in order (each
        waited for up to ``timeout`` seconds)."""
        if self.then is not None:
            return self.then.result(timeout)
        return [member.result(timeout) for member in self.members]


__all__ = [
    "AFTER_POLICIES",
    "AfterPolicy",
    "Group",
    "Settlement",
    "Start",
    "check_policy",
    "parent_ids",
    "settle",
    "start",
    "with_results",
]
