"""What every room of the worker shares: the coordinator's state, declared once.

The worker is one class assembled from rooms (signals, claiming, dispatch, upkeep,
drain), each a mixin in its own module. Only the coordinator thread touches this state,
except where a field says otherwise.
"""

from __future__ import annotations

import collections
import random
import threading
from collections.abc import Collection
from typing import TYPE_CHECKING

from .. import rollup

if TYPE_CHECKING:
    from ..app import App
    from ..backends.base import Backend
    from ..context import JobContext
    from ..jobs import ClaimedJob, HeldJob, Outcome
    from ..maintenance import Pruner, Reaper, Scheduler
    from ..rollup import Meter
    from .config import WorkerConfig
    from .events import EventKind, OnEvent
    from .execute import AsyncRunner, Running, ThreadPool
    from .lanes import Lanes
    from .timers import Timers


Sample = rollup.Sample
"""A finished attempt to tally once its outcome is written: the job, how long its handler
ran and how long it waited from its due time to its start (None: it never started)."""


class WorkerState:
    """The fields the rooms read and write, and the methods they call across rooms."""

    app: App
    config: WorkerConfig
    id: str
    shortest_lease: float
    drain_timeout: float
    runtime: float | None  # moving average of handler run time, seconds
    inflight: dict[int, Running]  # claimed jobs this worker holds, started or buffered
    counters: collections.Counter[str]
    rng: random.Random  # jitter for polls and retries, apart from the global generator
    stopped: threading.Event
    _leases: dict[str, float]  # the lease each task gets; its keys: what we can run
    _limited: bool  # some task has a concurrency limit: claims look for limited jobs too
    _alone: bool  # no other live worker (at the last heartbeat): limited jobs may be buffered
    _abandoned: set[Running]  # given up, but their threads still run them
    _results: collections.deque[tuple[Running, Outcome]]  # appended by executor threads
    _to_write: list[Outcome]
    _finishing: dict[tuple[int, int], ClaimedJob]  # by (id, token): attempts whose outcome
    # awaits writing, for the event
    _meter: Meter  # attempts, durations and waits tallied until the next heartbeat's flush
    _metered: dict[tuple[int, int], Sample]  # by (id, token): finished attempts whose
    # outcome awaits writing, to tally
    _wake: threading.Event  # set by any thread that has news for the coordinator
    _stopping: bool
    _immediate: bool
    _drain_deadline: float
    _heartbeat_requested: bool
    _suspect: ClaimedJob | None  # claimed, waiting to run alone
    _holds: dict[tuple[int, int], bool]  # (id, token) of thread handlers that run on after
    # their job left `running` (cancelled, timed out): True once the row holds the slot
    _ended_holds: set[tuple[int, int]]  # returned while their timeout's outcome was on its way
    _unhold: list[HeldJob]  # their handlers ended: the slots the rows hold go free
    _solo: int | None  # id of the suspect running alone
    _backend: Backend | None
    _pushed: bool  # the notifier pushes (else an own enqueue is seen by the App's count)
    _checks_changes: bool  # wakes every change_check_interval to read the change counter
    _threads: ThreadPool | None
    _async: AsyncRunner | None
    _lanes: Lanes | None
    _reaper: Reaper
    _pruner: Pruner
    _scheduler: Scheduler | None
    _signals: int  # counted by the signal handler, acted on by the coordinator
    _signals_taken: int
    _relay_write: int | None
    _on_event: OnEvent | None
    _progress_lock: threading.Lock  # handler threads report, the coordinator flushes
    _progress_dirty: set[int]  # jobs with a ctx.progress() report not yet written
    _progress_signalled: bool  # the coordinator was woken for them
    replace_requested: bool  # a cancelled handler would not stop: replace this process

    if TYPE_CHECKING:  # implemented by the rooms; declared here for the others

        def stop(self, immediate: bool = False) -> None: ...
        def request_heartbeat(self) -> None: ...
        def _event(
            self,
            kind: EventKind,
            job: ClaimedJob,
            state: str | None = None,
            detail: str | None = None,
        ) -> None: ...
        def _dispatch(self, backend: Backend, job: ClaimedJob, prefetched: bool = ...) -> None: ...
        def _report(self, run: Running, outcome: Outcome) -> None: ...
        def _collect(self) -> bool: ...
        def _write_outcomes(self, backend: Backend, t: Timers | None = None) -> None: ...
        def _account(
            self, batch: list[Outcome], written: Collection[int], t: Timers | None
        ) -> None: ...
        def _take_trips(self, backend: Backend, t: Timers | None) -> None: ...
        def _release(self, backend: Backend, runs: list[Running], label: str) -> None: ...
        def _release_all(self, backend: Backend) -> None: ...
        def _close(self, run: Running, *, abandon: bool) -> None: ...
        def _began_since(self) -> list[HeldJob]: ...
        def _handler_ended(self, run: Running) -> None: ...
        def _due_question_wait(self, t: Timers) -> float: ...
        def _progress_reported(self, ctx: JobContext) -> None: ...
        @property
        def lanes_busy(self) -> bool: ...
