"""The backend protocol: everything the app and worker ask of a database.

Methods are verb-first and batch-first (``claim_jobs(n)``, ``finish_jobs([...])``,
``renew_leases([...])``). Every write about a claimed job is conditional on the job still
being ``running`` under the claim's fencing token, so a worker that lost its lease cannot
overwrite anything. The protocol is synchronous; the worker runs async tasks on a loop.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol

from ..jobs import (
    ClaimedJob,
    Due,
    EnqueueResult,
    HeldJob,
    Job,
    JobCount,
    JobFilter,
    JobPage,
    NewJob,
    Outcome,
    SpentKey,
    TaskInfo,
    WorkerStatus,
    WorkflowStep,
)
from ..limits import QueueLimit
from ..notifiers.base import Notifier
from ..rollup import MetricAmount
from ..schedules import Schedule, ScheduleState, Tick, TickResult
from ..stats import Stats, WorkerScope
from .records import (
    Checkpoint,
    ChildState,
    Claim,
    Decide,
    DueQuery,
    EffectEnd,
    EffectIntent,
    Event,
    JobGroup,
    JobListing,
    JobSearch,
    Park,
    PruneFinished,
    Rescue,
)

__all__ = [
    "MISSING_SCHEMA",
    "Backend",
    "Checkpoint",
    "ChildState",
    "Claim",
    "Decide",
    "DueQuery",
    "EffectEnd",
    "EffectIntent",
    "EffectRecord",
    "Event",
    "JobGroup",
    "JobListing",
    "JobSearch",
    "Park",
    "PruneFinished",
    "Rescue",
    "WorkerInfo",
]


@dataclass(frozen=True)
class WorkerInfo:
    """A worker process as registered in the database."""

    id: str
    host: str
    pid: int
    queues: Sequence[str] | None
    concurrency: int
    heartbeat_interval: float
    tasks: Sequence[TaskInfo] = ()
    """The tasks it runs (jobs of other tasks are left to workers that have them), with
    their defaults, which go to the task catalogue for enqueues by name elsewhere."""
    queue_limits: Sequence[QueueLimit] = ()
    """The limits of the queues it serves (none: cleared), for the catalogue too."""


@dataclass(frozen=True)
class EffectRecord:
    """What the database knows of an external effect (see :mod:`sqljobs.effects`)."""

    key: str
    state: str
    result: str | None
    error: str | None
    attempts: int
    mine: bool


MISSING_SCHEMA = (
    "the database lacks the sqljobs schema or its latest migration: run `sqljobs migrate` "
    "(or open it with App(migrate=True), the default)"
)
"""Said with a database error whose cause is a schema that was never migrated."""


class Backend(Protocol):
    """A database that stores jobs. Implementations: SQLite, PostgreSQL."""

    url: str
    claim_lanes: int
    """How many of one worker's claim round trips may usefully be in flight at once."""
    async_connections: bool
    """Whether :meth:`enqueue_jobs_async` can enqueue on the caller's async connection
    (PostgreSQL: a psycopg ``AsyncConnection``; SQLite has none)."""

    def now(self) -> float:
        """The backend's clock, Unix seconds."""

    def migrate(self) -> list[str]:
        """Apply pending migrations; return the names applied."""

    def enqueue_jobs(
        self, jobs: Iterable[NewJob], connection: Any | None = None
    ) -> list[EnqueueResult]:
        """Insert jobs in one transaction (or in the caller's, never committing it). ``jobs``
        may be a generator: a backend may insert some while the rest are built, and an
        exception from it rolls everything back."""

    async def enqueue_jobs_async(
        self, jobs: Sequence[NewJob], connection: Any
    ) -> list[EnqueueResult]:
        """Insert ``jobs`` on the caller's async connection, in its transaction and never
        committing it. Only where ``async_connections``; elsewhere it refuses, saying
        what to do instead."""

    def claim_jobs(self, claim: Claim) -> list[ClaimedJob]:
        """Atomically take up to ``claim.limit`` due jobs, highest priority, then oldest
        first.

        The first ``claim.start_now`` of them (in that order; None: all) start at once; the
        rest wait in the worker's buffer and are marked ``prefetched``, as are none of
        ``claim.started``, buffered jobs that have started since the worker's last round
        trip: a crash of the worker blames only jobs that were running in it.

        ``claim.leases`` maps the claiming worker's task names to the lease it gives them
        (the task as registered where it runs decides). Given, only jobs of those tasks are
        claimed: a worker never takes a job it cannot run. None claims any task.

        Jobs under a concurrency limit are claimed only if ``claim.limited`` (first, each
        key up to its free slots; see :mod:`sqljobs.limits`), as many as start at once and
        at most ``claim.limited_buffer`` more."""

    def finish_and_claim(
        self, outcomes: Sequence[Outcome], claim: Claim
    ) -> tuple[list[int], list[ClaimedJob]]:
        """``finish_jobs`` then ``claim_jobs`` in one commit where the backend can: the
        worker's hot path, one round trip per batch instead of two."""

    def claim_suspect(self, claim: Claim) -> ClaimedJob | None:
        """Take one job that was held by a worker that crashed (normal claims skip these),
        to be run alone: if it crashes its worker again, it alone is blamed. Of
        ``claim.queues`` and ``claim.leases``' tasks, as for :meth:`claim_jobs`; the
        claim's limit and buffer are not used."""

    def next_due(self, query: DueQuery) -> Due:
        """The earliest ``run_at`` among pending jobs of ``query.queues`` (and, given, of
        its tasks), whether jobs from crashed workers wait, and when the earliest schedule
        that is not paused falls due (one cheap statement). With
        ``query.limited``, also the next delayed job under a concurrency limit (one that is due
        already waits for a slot: a completion announces that, not the clock)."""

    def finish_jobs(
        self, outcomes: Sequence[Outcome], started: Sequence[HeldJob] = ()
    ) -> list[int]:
        """Apply outcomes (fenced); return the ids that were written. ``started`` as for
        :meth:`claim_jobs`."""

    def renew_leases(self, worker: str, held: Sequence[HeldJob]) -> set[int]:
        """Extend the lease of every held job (fenced) in one statement; mark the worker seen."""

    def hold_slots(self, keep: Sequence[HeldJob], end: Sequence[HeldJob]) -> None:
        """Handlers that run on after their job left ``running`` (cancelled, or timed out
        with an ``Outcome.hold``): renew the lease of those in ``keep``, so their rows go on
        holding the job's concurrency slot and its schedule's overlap, and clear it for
        those in ``end``, whose handlers have ended (fenced by token; rare: its own
        transaction)."""

    def rescue_jobs(self, rescue: Rescue) -> list[Outcome]:
        """Apply ``rescue.decide`` to running jobs whose lease expired (or, given
        ``rescue.worker``, to every job that worker held); return the outcomes written."""

    def register_worker(self, info: WorkerInfo) -> None: ...

    def live_workers(self) -> int:
        """How many workers have been seen within their heartbeat."""

    def unregister_worker(self, worker: str) -> None: ...

    # -- wake-ups: thin delegations to ``notifier`` (see sqljobs.notifiers) ---------------

    @property
    def notifier(self) -> Notifier:
        """How this backend's workers learn of new work (guarantee 8)."""

    def subscribe(
        self, callback: Callable[[], None], queues: Collection[str] | None = None
    ) -> None:
        """Have ``callback`` called when another process enqueues (into one of ``queues``;
        None: any), if the backend can push."""

    @property
    def pushes_changes(self) -> bool:
        """True if ``subscribe`` callbacks announce every enqueue (no need to poll
        ``change_marker``)."""

    def change_marker(self) -> int | None:
        """A number that changes when another connection commits, if the backend has one."""

    def job_transaction(self) -> AbstractContextManager[Any]:
        """A new DB-API connection inside one transaction; commits on success."""

    def finish_in_transaction(self, connection: Any, outcome: Outcome) -> bool:
        """Apply one fenced outcome inside the caller's transaction."""

    def amend_done_job(self, outcome: Outcome) -> bool:
        """Add what came after a ``ctx.transaction()`` committed the job's completion:
        ``outcome.result``, or an ``error``, ``traceback`` and ``history`` entry for what
        the handler raised. Fenced: written only while the job is still ``done`` under
        ``outcome.token``; True if it was."""

    def mark_idempotent(self, connection: Any, key: str, ttl: float | None = None) -> bool:
        """Insert the idempotency marker ``key`` in the caller's transaction (on
        ``connection``, one this backend handed out), timed by this backend's clock, and
        expiring after ``ttl`` seconds (None: never); True if it was not there yet."""

    # -- periodic schedules (see sqljobs.schedules and sqljobs.maintenance.scheduler) -----

    def save_schedule(self, schedule: Schedule, next_run_at: float) -> ScheduleState:
        """Insert or update a schedule by name. An existing one keeps its ``next_run_at``
        (and its paused flag) unless its timing (cron, every, tz) changed."""

    def get_schedule(self, name: str) -> ScheduleState | None: ...

    def list_schedules(self) -> list[ScheduleState]: ...

    def delete_schedule(self, name: str) -> bool: ...

    def pause_schedule(self, name: str) -> bool: ...

    def resume_schedule(self, name: str, next_run_at: float) -> bool:
        """Unpause; a schedule that was paused starts again at ``next_run_at``."""

    def upcoming_schedules(self, limit: int) -> list[ScheduleState]:
        """The ``limit`` unpaused schedules that fall due first, earliest first: the due
        ones and when the next falls due, in one cheap statement."""

    def fire_schedule(self, tick: Tick) -> TickResult:
        """In one transaction: move the schedule from ``tick.expected`` to
        ``tick.next_run_at`` only if it still holds ``tick.expected``, and enqueue
        ``tick.job`` (keyed per tick) unless overlap forbids it. Of replicas racing for a
        tick, exactly one gets ``claimed=True``."""

    def run_schedule_now(self, name: str, job: NewJob) -> TickResult | None:
        """Enqueue ``job`` as a run of the schedule now, serialised with its ticks and
        obeying ``overlap="skip"``; None if there is no such schedule."""

    def stats(self) -> Stats: ...

    def task_names(self) -> list[str]:
        """Every task name in the catalogue (for "did you mean" on a typo)."""

    def task_info(self, name: str) -> TaskInfo | None:
        """The task as a worker of this database last registered it, or None."""

    def served_tasks(self) -> set[str]:
        """The task names that live workers run."""

    def worker_scopes(self) -> list[WorkerScope]:
        """What each live worker claims: its tasks, and its queues (None: every queue)."""

    def get_job(self, job_id: int) -> Job | None: ...

    def list_jobs(self, listing: JobListing) -> list[Job]:
        """Up to ``listing.limit`` jobs of its state and queue (where given), newest first."""

    # -- browsing and bulk actions (sqljobs.jobs) -------------------------------------

    def find_jobs(self, search: JobSearch) -> JobPage:
        """A page of jobs matching ``search.wanted``, newest first, below ``search.before``
        (an id)."""

    def count_jobs(self, wanted: JobFilter, cap: int) -> JobCount:
        """How many jobs match, counted up to ``cap``."""

    def retry_jobs(self, wanted: JobFilter, states: Sequence[str]) -> int:
        """Send the matches in ``states`` (dead, cancelled) back to pending."""

    def cancel_jobs_matching(self, wanted: JobFilter, states: Sequence[str]) -> int:
        """Cancel the matches in ``states`` (pending, waiting, running)."""

    def delete_jobs(self, wanted: JobFilter, states: Sequence[str]) -> int:
        """Delete the matches in ``states`` (done, dead, cancelled)."""

    def worker_statuses(self) -> list[WorkerStatus]:
        """The live workers and what each is running."""

    def job_children(self, job_id: int, limit: int) -> list[int]:
        """The ids of up to ``limit`` jobs enqueued after ``job_id``, oldest first."""

    # -- control over work in flight -------------------------------------------------------

    # -- dependencies (sqljobs.dependencies) ----------------------------------------------

    def enqueue_group(
        self, group: JobGroup, connection: Any | None = None
    ) -> tuple[list[EnqueueResult], EnqueueResult | None]:
        """Insert ``group.members`` and then ``group.then`` to wait for all of them, in one
        transaction (or in the caller's, never committing it)."""

    def open_parents(self, job_id: int, parents: Sequence[int]) -> list[int]:
        """Which of a waiting job's ``parents`` have not ended yet."""

    def cancel_job(self, job_id: int) -> bool:
        """Cancel a pending or running job (False: it was neither). A running job's worker
        is told through the notifier where there is one, else at its next heartbeat."""

    def cancelled_among(self, job_ids: Collection[int]) -> set[int]:
        """Those of ``job_ids`` that are ``cancelled``."""

    def ended_among(self, job_ids: Collection[int]) -> set[int]:
        """Those of ``job_ids`` that are done, dead or cancelled."""

    def watch_job(self, job_id: int) -> None:
        """Someone is about to wait on ``job_id``: have its end pushed, if the engine can."""

    def save_progress(self, reports: Sequence[tuple[HeldJob, str]]) -> set[int]:
        """Write each held job's progress (JSON text), fenced; return the ids written."""

    def limited_pending(
        self, queues: Sequence[str] | None, tasks: Collection[str] | None = None
    ) -> bool:
        """Whether jobs under a concurrency or rate limit wait in these queues, for these
        tasks."""

    def limit_usage(self, key: str, window: float) -> tuple[int, int]:
        """A limit key's running jobs, and its starts within the last ``window`` seconds."""

    def queue_limit(self, name: str) -> QueueLimit | None:
        """The limit workers recorded for queue ``name`` (None: none)."""

    def pause_queue(self, name: str) -> bool:
        """Stop claims from queue ``name``; True if this call paused it."""

    def resume_queue(self, name: str) -> bool:
        """Let claims take queue ``name`` again; True if it was paused."""

    def queue_states(self) -> dict[str, tuple[bool, float | None]]:
        """Queues with a stored setting: name -> (paused, paused since)."""

    def prune_finished(self, prune: PruneFinished) -> int:
        """Delete up to ``prune.limit`` jobs that ended in ``prune.state`` before
        ``prune.before``, keeping the key of each keyed one in the spent keys, in the same
        transaction, for as long as its job says (``prune.key_retention`` seconds, ``inf``
        for ever, where it says nothing)."""

    def prune_spent_keys(self, before: float, limit: int = 1000) -> int:
        """Delete up to ``limit`` spent keys whose period ended by ``before``."""

    def spent_key_of_job(self, job_id: int) -> SpentKey | None:
        """The key pruned job ``job_id`` left in the spent keys, while it is kept."""

    def prune_starts(self, before: float, limit: int = 1000) -> int:
        """Delete up to ``limit`` rate-limit starts made before ``before``."""

    def prune_idempotency(self, before: float, limit: int = 1000) -> int:
        """Delete idempotency markers whose ``ttl`` ran out before ``before``."""

    def add_metric_amounts(self, amounts: Sequence[MetricAmount]) -> None:
        """Add a worker's tallies to the per-minute rollup and to the totals, in one
        transaction (see :mod:`sqljobs.rollup`); concurrent adds to a row all count."""

    def attempts_by_minute(
        self, since: int, queue: str | None = None
    ) -> list[tuple[int, str, float]]:
        """``(minute, outcome, attempts)`` of the minutes from ``since`` (Unix seconds) on."""

    def metric_totals(self) -> list[MetricAmount]:
        """Every amount of the totals table (never pruned: Prometheus's counters)."""

    def metric_label_sets(self) -> list[tuple[str, str, bool]]:
        """``(queue, task, scheduled)``: each task of the catalogue (scheduled False) and
        each schedule's task (True), with its queue."""

    def prune_metric_minutes(self, before: float, limit: int = 1000) -> int:
        """Delete up to ``limit`` minutes of the rollup older than ``before``; return the
        rows deleted."""

    def effect_begin(self, intent: EffectIntent) -> EffectRecord:
        """Record the intent of an external effect (committed) and hold it for
        ``intent.hold`` seconds, or return what is known of it and whether
        ``intent.holder`` now holds it."""

    def effect_set(self, end: EffectEnd) -> None:
        """Record what became of an effect its holder made (committed, durably)."""

    def effect_forget(self, key: str, holder: str) -> None:
        """Drop a pending intent whose call failed for certain, so a retry may call again."""

    # -- durable workflows (see sqljobs.workflows) -------------------------------------

    def workflow_steps(self, job_id: int) -> list[WorkflowStep]:
        """A workflow's checkpoints, by position."""

    def save_step(self, checkpoint: Checkpoint, connection: Any | None = None) -> bool:
        """Insert or move on a step's checkpoint, only while ``checkpoint.held`` holds the
        workflow (its row locked until the commit); on ``connection``, in the caller's
        transaction (never committing it). True if it was written."""

    def park_workflow(self, park: Park) -> str | None:
        """End the workflow's attempt, given back, and leave it ``waiting`` for what
        ``park`` names (or ``pending`` at once if that has happened); fenced by the
        claim's token. The state it left the job in; None if the claim no longer held it."""

    def wake_workflows(self, now: float, limit: int = 500) -> int:
        """Make due the parked workflows whose ``wake_at`` has come; how many."""

    def next_wake(self) -> float | None:
        """The earliest ``wake_at`` of a parked workflow (Unix seconds)."""

    def emit_event(self, name: str, payload: str | None, connection: Any = None) -> int:
        """Store an event (``payload`` as JSON text) and make due every workflow waiting
        for ``name``, in one transaction (or the caller's, on ``connection``); its id.
        Emits and parks of one name are ordered: none is missed between them."""

    def first_event(self, name: str, after: int) -> Event | None:
        """The first event named ``name`` with an id above ``after``."""

    def child_states(self, job_ids: Collection[int]) -> list[ChildState]:
        """The state, result and last error of these jobs (a pruned one is missing)."""

    def workflow_jobs(
        self, tasks: Sequence[str], state: str | None, limit: int
    ) -> list[dict[str, Any]]:
        """Jobs of these (workflow) tasks, newest first, with their step counts and what
        each waits for."""

    def prune_events(self, before: float, limit: int = 1000) -> int:
        """Delete up to ``limit`` events emitted before ``before``; how many."""

    def close(self) -> None: ...
