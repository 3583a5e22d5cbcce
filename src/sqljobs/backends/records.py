"""The parameters records of the backend protocol: one frozen record per method that
would otherwise take many arguments, so a call reads by name and an engine adds a field
without touching every caller."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass

from ..jobs import ExpiredJob, HeldJob, JobFilter, NewJob, Outcome, WorkflowStep
from ..retention import KEY_RETENTION


@dataclass(frozen=True, slots=True)
class Claim:
    """One claim as a worker asks for it (see ``Backend.claim_jobs``): up to ``limit`` due
    jobs of ``queues`` (None: all) and, given ``leases``, of those tasks only; the first
    ``start_now`` (None: all) start at once, the rest wait in the worker's buffer."""

    worker: str
    queues: Sequence[str] | None = None
    limit: int = 1
    leases: Mapping[str, float] | None = None
    """The claiming worker's task names and the lease it gives each (None: any task)."""
    start_now: int | None = None
    started: Sequence[HeldJob] = ()
    """Buffered jobs that have started since the worker's last round trip."""
    limited: bool = False
    """Also claim jobs under a concurrency limit (first: they are few by definition), but
    only as many as start at once, and ``limited_buffer`` more: a limited job waiting in a
    worker's buffer holds a slot that another worker's idle thread could use."""
    limited_buffer: int = 0
    """How many limited jobs may wait in the worker's buffer: none until the worker knows
    its jobs are short enough that a buffered one starts within moments."""

    @property
    def at_once(self) -> int:
        """How many of the claimed jobs start at once."""
        return self.limit if self.start_now is None else self.start_now


@dataclass(frozen=True, slots=True)
class DueQuery:
    """What ``Backend.next_due`` looks ahead for: pending jobs of ``queues`` (None: all)
    and, given, of ``tasks``; with ``limited``, delayed jobs under a concurrency limit and
    rate windows that reopen."""

    queues: Sequence[str] | None = None
    tasks: Collection[str] | None = None
    limited: bool = False


Decide = Callable[[ExpiredJob, float], Outcome]
"""Maps an expired or orphaned job (and the current time) to what should happen to it."""


@dataclass(frozen=True, slots=True)
class Rescue:
    """One batch of ``Backend.rescue_jobs``: ``decide`` applied to up to ``limit`` running
    jobs whose lease expired or, given ``worker``, to every job that worker held."""

    decide: Decide
    worker: str | None = None
    limit: int = 500


@dataclass(frozen=True, slots=True)
class JobSearch:
    """One page of ``Backend.find_jobs``: up to ``limit`` jobs matching ``wanted``, newest
    first, below the id ``before`` (None: from the newest)."""

    wanted: JobFilter
    before: int | None = None
    limit: int = 50


@dataclass(frozen=True, slots=True)
class JobGroup:
    """Jobs enqueued together (see ``Backend.enqueue_group``): ``members``, and ``then``
    (if any) to wait for all of them."""

    members: Sequence[NewJob]
    then: NewJob | None = None


@dataclass(frozen=True, slots=True)
class JobListing:
    """Which jobs ``Backend.list_jobs`` lists: up to ``limit``, of ``state`` and ``queue``
    where given."""

    state: str | None = None
    queue: str | None = None
    limit: int = 50


@dataclass(frozen=True, slots=True)
class PruneFinished:
    """One batch of ``Backend.prune_finished``: up to ``limit`` jobs that ended in
    ``state`` before ``before``; a keyed one's key is kept for ``key_retention`` seconds
    where its job says nothing (``inf``: for ever)."""

    before: float
    limit: int = 1000
    state: str = "done"
    key_retention: float = KEY_RETENTION


@dataclass(frozen=True, slots=True)
class EffectIntent:
    """The intent of an external effect (``Backend.effect_begin``): ``holder`` means to
    make effect ``key`` for job ``job_id`` and holds it for ``hold`` seconds."""

    key: str
    job_id: int | None
    holder: str
    hold: float


@dataclass(frozen=True, slots=True)
class EffectEnd:
    """What became of an effect (``Backend.effect_set``): its ``state`` and the
    ``result`` (JSON text) or ``error`` its holder saw."""

    key: str
    holder: str
    state: str
    result: str | None = None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """A workflow step as ``Backend.save_step`` writes it: ``step`` of the workflow that
    ``held`` names, written only while that claim holds it."""

    held: HeldJob
    step: WorkflowStep


@dataclass(frozen=True, slots=True)
class Park:
    """A workflow's attempt ending to wait (``Backend.park_workflow``): until ``wake_at``
    (Unix seconds, the App's clock), for an event named ``event`` later than the one with
    id ``after_event``, or for ``children`` (job ids) to end; due at once if that has
    happened already."""

    held: HeldJob
    wake_at: float | None = None
    event: str | None = None
    after_event: int = 0
    children: Sequence[int] = ()


@dataclass(frozen=True, slots=True)
class Event:
    """An event as ``Backend.first_event`` finds it: its id (the order events of one name
    committed in), its payload (JSON text) and when it was emitted."""

    id: int
    payload: str | None
    emitted_at: float


@dataclass(frozen=True, slots=True)
class ChildState:
    """A workflow's child job as ``Backend.child_states`` reads it."""

    id: int
    state: str
    result: str | None
    error: str | None
