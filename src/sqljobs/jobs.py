"""What a job is at each step: the record types that pass between the app, worker and backend.

A Task is a registered function; a Job is one persisted run of it. These dataclasses are
the vocabulary of the backend protocol and carry no behaviour: a job's life (NewJob,
ClaimedJob, Outcome, Job), what an enqueue asks and what it knows of a task
(EnqueueOptions, TaskInfo), and what finding jobs asks and answers (JobFilter, JobPage,
JobCount, WorkerStatus). Those made per job on the worker's hot path (ClaimedJob,
Outcome, HeldJob) have slots and are not frozen: a frozen dataclass's ``__init__`` sets
each field through ``object.__setattr__``, one call a field of records made for every
job (docs/performance.md). Nothing changes them once made.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field, fields
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from .errors import ConfigurationError
from .validate import check_queue_name, is_job_id, is_number, is_searchable

if TYPE_CHECKING:
    from .dependencies import AfterPolicy


class JobState(enum.StrEnum):
    """Where a job is in its life. A retry is ``pending`` again with a later ``run_at``."""

    PENDING = "pending"
    WAITING = "waiting"
    """For its parents (``with_options(after=...)``), or a workflow parked until a time,
    an event or its children: not claimable until then."""
    RUNNING = "running"
    DONE = "done"
    DEAD = "dead"
    CANCELLED = "cancelled"


FINISHED_STATES = (JobState.DONE, JobState.DEAD, JobState.CANCELLED)


@dataclass(frozen=True)
class NewJob:
    """A job about to be inserted."""

    task: str
    payload: str
    queue: str
    priority: int
    run_at: float
    lease: float
    max_attempts: int
    deadline_at: float | None = None
    key: str | None = None
    key_hold: float | None = None
    key_retention: float | None = None
    """Seconds its key (under the "retained" scope) outlives its row once the pruner
    deletes it, ``math.inf`` for ever; None (stored NULL): the pruning App's
    ``key_retention``. Meaningless without a key."""
    delay: float | None = None
    """Seconds from now when no ``run_at`` was asked for: a database many hosts share
    (PostgreSQL) counts them from its own clock, the one claims read, so a host whose
    clock is off cannot make its jobs wait or jump the queue."""
    limit_key: str | None = None
    """At most ``limit_max`` jobs with this key run at once, and at most ``rate_max`` start
    in any ``rate_window`` seconds (see sqljobs.limits)."""
    limit_max: int | None = None
    rate_max: int | None = None
    rate_window: float | None = None
    after: tuple[int, ...] = ()
    """The ids of the jobs it waits for (see sqljobs.dependencies)."""
    after_policy: str = "done"
    collect: bool = False
    """A group's callback: its parents' results, in ``after``'s order, become its first
    argument when it is released."""
    debounce: float | None = None
    """A debounced job (``with_options(debounce=...)``): a pending job with its key takes
    this one's payload and start (``run_at``, or ``delay`` from the server's clock) instead
    of being answered unchanged; a key on a job already claimed names the new job."""


@dataclass(frozen=True)
class SpentKey:
    """A business key the pruner kept when it deleted its job's row: until ``expires_at``
    (``inf``: for ever) an enqueue with it answers with job ``job_id``."""

    key: str
    job_id: int
    task: str
    state: str
    """How the job ended: done, dead or cancelled."""
    spent_at: float
    """When the pruner deleted the job's row."""
    expires_at: float


@dataclass(frozen=True)
class EnqueueResult:
    """What an insert gave: the job id, and whether this call created it."""

    id: int
    created: bool


@dataclass(slots=True)
class ClaimedJob:
    """A job a worker now holds. ``token`` fences every later write about this claim."""

    id: int
    task: str
    payload: str
    queue: str
    priority: int
    attempt: int
    token: int
    lease: float
    max_attempts: int
    created_at: float
    deadline_at: float | None
    key: str | None
    run_at: float = 0.0
    """When it fell due (Unix seconds): with ``created_at``, where its wait began."""


@dataclass(slots=True)
class Outcome:
    """The end of one claim, written only if the job is still ``running`` under ``token``.

    ``state`` is where the job goes: ``done``, ``pending`` (a retry or a release),
    or ``dead``. ``delay`` (seconds from the backend's now) sets a retry's ``run_at``.
    ``uncharge`` gives the attempt back (a release at shutdown). ``result`` is the
    handler's return value as JSON text (None: nothing to store); ``progress`` the job's
    last reported progress (JSON text) that no flush has written yet. ``hold``: the
    handler still runs (it timed out): the row keeps its lease, and so the job's
    concurrency slot, until the worker says the handler ended (see ``Backend.hold_slots``).
    """

    job_id: int
    token: int
    state: JobState
    delay: float | None = None
    error: str | None = None
    traceback: str | None = None
    history: dict[str, Any] | None = None
    uncharge: bool = False
    errors: int = 0
    lease_expiries: int = 0
    crashes: int = 0
    result: str | None = None
    progress: str | None = None
    hold: bool = False

    @property
    def plain(self) -> bool:
        """A completion with nothing to add to the history: the backends write a batch
        of these in one statement (their hot path)."""
        return self.state is JobState.DONE and self.history is None


@dataclass(frozen=True)
class Due:
    """What a worker needs to know to sleep well: in how many seconds the next delayed job
    falls due (by the database's clock, the one claims read: a worker whose own clock is
    off still wakes on time), whether jobs from crashed workers wait to be run alone, and
    when the earliest schedule or parked workflow falls due (``schedule_at``, Unix seconds
    as the scheduler wrote it: its own clock rules them), so its scheduler need not look
    before then; and in how many seconds the first of those jobs from crashed workers
    falls due (``suspect_wait``, by the database's clock), so a worker wakes to claim it."""

    wait: float | None
    suspects: bool = False
    schedule_at: float | None = None
    suspect_wait: float | None = None


@dataclass(slots=True)
class HeldJob:
    """A (job id, fencing token) pair: what a heartbeat renews."""

    id: int
    token: int


@dataclass(frozen=True)
class ExpiredJob:
    """A running job whose lease ran out, as the reaper sees it."""

    id: int
    token: int
    task: str
    attempt: int
    max_attempts: int
    lease: float
    started_at: float | None
    lease_until: float
    deadline_at: float | None
    worker: str | None
    worker_alive: bool
    errors: int
    lease_expiries: int
    crashes: int
    prefetched: bool = False
    """Claimed into the worker's buffer and not known to have started there."""
    queue: str = ""


@dataclass(frozen=True)
class Progress:
    """What a handler last reported with ``ctx.progress(done, total, note)``, and when
    (Unix seconds)."""

    done: float
    total: float | None
    note: str | None
    updated_at: float

    @property
    def fraction(self) -> float | None:
        """``done / total`` (None without a total)."""
        return None if not self.total else self.done / self.total

    def __str__(self) -> str:
        amount = f"{self.done:g}" if self.total is None else f"{self.done:g}/{self.total:g}"
        if self.total:
            amount += f" ({100 * self.done / self.total:.0f}%)"
        return f"{amount} {self.note}" if self.note else amount


class QueueInfo(NamedTuple):
    """One queue as ``app.queues()`` shows it: whether it is paused, its jobs by state, and
    how long its oldest due pending job has waited (seconds; None: nothing waits)."""

    name: str
    paused: bool
    counts: dict[str, int]
    oldest_due_age: float | None


@dataclass
class Job:
    """A full job row, for inspection (CLI, dashboard, tests)."""

    id: int
    queue: str
    task: str
    args: list[Any]
    kwargs: dict[str, Any]
    key: str | None
    state: JobState
    priority: int
    run_at: float
    created_at: float
    attempts: int
    max_attempts: int
    token: int
    lease: float
    lease_until: float | None
    worker: str | None
    started_at: float | None
    finished_at: float | None
    errors: int
    lease_expiries: int
    crashes: int
    last_error: str | None
    last_traceback: str | None
    deadline_at: float | None
    history: list[dict[str, Any]] = field(default_factory=list)
    result: Any = None
    """The handler's return value (decoded JSON); None until the job is done, or when the
    task returned None or does not store results (``store_result=False``)."""
    progress: Progress | None = None
    limit_key: str | None = None
    """The key its concurrency and rate limits count it by (None: unlimited)."""
    limit_max: int | None = None
    rate_max: int | None = None
    rate_window: float | None = None
    parents: list[int] = field(default_factory=list)
    """The jobs it was enqueued to wait for (``after=``), in the order given."""
    after_policy: str | None = None
    """``done`` (every parent must be done) or ``always`` (ended, however); None: no
    parents."""
    waiting_on: int = 0
    """How many of its parents have not ended yet (while it is ``waiting``)."""
    key_hold: float | None = None
    """How long after the job ends its key keeps refusing duplicates, in seconds: None
    as long as the job is kept (``key_scope="retained"``), 0 only while it has not ended
    (``"active"``)."""
    released_key: str | None = None
    """The key a job held until its scope let go of it (a new job may have taken it)."""
    debounced: int = 0
    """How many debounced enqueues replaced its arguments while it was pending."""

    @property
    def key_scope(self) -> str:
        """The key's scope in words: ``retained``, ``active`` or ``60 s after it ends``."""
        if self.key_hold is None:
            return "retained"
        if self.key_hold == 0:
            return "active"
        return f"{self.key_hold:g} s after it ends"

    @property
    def finished(self) -> bool:
        return self.state in FINISHED_STATES

    @property
    def cancelled_while_running(self) -> bool:
        """Whether the cancel that ended this job cut a run short: that cancel wrote a
        ``cancelled`` history entry ending when the job did (a pending job gets none)."""
        last = self.history[-1] if self.history else None
        if self.state is not JobState.CANCELLED or not isinstance(last, dict):
            return False
        ended, finished = last.get("ended_at"), self.finished_at
        return (
            last.get("outcome") == "cancelled"
            and isinstance(ended, int | float)
            and finished is not None
            and abs(ended - finished) < 0.001
        )

    def to_dict(self) -> dict[str, Any]:
        out = dict(self.__dict__)
        out["state"] = self.state.value
        out["progress"] = None if self.progress is None else asdict(self.progress)
        return out


KeyScope = Literal["active", "retained"] | float | timedelta
"""How long a business key refuses duplicates: while the job is kept and its
``key_retention`` after (``"retained"``), only while it has not ended (``"active"``),
or that long after it ended (seconds or a timedelta)."""


@dataclass(frozen=True)
class EnqueueOptions:
    """Per-enqueue choices; None means "the task's default"."""

    key: str | None = None
    delay: float | None = None
    run_at: float | None = None
    priority: int | None = None
    queue: str | None = None
    connection: Any = None
    key_hold: float | None = None
    concurrency_key: str | None = None
    after: tuple[int, ...] = ()
    """The ids of jobs it waits for (see sqljobs.dependencies)."""
    after_policy: AfterPolicy = "done"
    key_retention: float | Literal["default"] | None = "default"
    """Seconds its key outlives its row (None: for ever); "default": the task's setting,
    else the pruning App's ``Retention.keys``."""
    debounce: float | None = None
    """Seconds of quiet before a keyed job starts: another enqueue with its key while it is
    pending replaces its arguments and starts the wait again (see ``with_options``)."""


@dataclass(frozen=True)
class TaskInfo:
    """What an enqueue needs to know of a task besides its function: where and how its
    jobs run. A :class:`Task` gives its own (``task.info``); a task only another service
    registers is described by the catalogue its workers write, so an enqueue by name gets
    that service's queue, lease and retry policy rather than this app's defaults."""

    name: str
    queue: str
    priority: int
    lease: float
    max_attempts: int
    deadline: float | None
    concurrency: int | None = None
    """At most this many of its jobs run at once (per key if ``keyed``), cluster-wide."""
    keyed: bool = False
    rate_max: int | None = None
    """At most this many of its jobs start in any ``rate_window`` seconds (per key if
    ``keyed``), cluster-wide."""
    rate_window: float | None = None


# -- finding jobs: what an operator asks for and what comes back. Everything that scans
# is bounded, so a dashboard answers fast over a million jobs: a count stops at a cap, and
# a page of an argument-text search reads at most TEXT_SCAN jobs and says where it stopped.

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
            if value is not None and not is_searchable(value):
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
            if value is not None and not is_number(value):
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


@dataclass(frozen=True)
class WorkflowStep:
    """One checkpointed position of a workflow (``app.workflow_history``): a step's
    ``name`` and ``kind`` (``step``, ``transaction``, ``sleep``, ``wait``, ``run``,
    ``gather``, ``now``, ``uuid``, ``random``), its ``state`` (``running``, ``waiting``,
    ``done``, ``failed``), its ``result`` as stored JSON text (``value`` decodes it) or
    ``error``, what it waits for or started (``detail``: a wake-up time, an event and the
    event taken, child job ids), the attempt that wrote it and when it started and ended
    (Unix seconds)."""

    position: int
    name: str
    kind: str
    state: str
    result: str | None = None
    error: str | None = None
    detail: dict[str, Any] = field(default_factory=dict)
    attempt: int = 0
    started_at: float | None = None
    ended_at: float | None = None

    @property
    def value(self) -> Any:
        """The step's result, decoded (None: none)."""
        return None if self.result is None else json.loads(self.result)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["value"] = self.value
        return out
