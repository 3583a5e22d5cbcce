"""The Backend protocol's methods that are the same on every engine, each handed to the
query module of its group (:mod:`.ops`) over this backend as the executor. What stays in
``sqlite/`` and ``postgres/`` is what the engines really do differently: connections and
transactions, the claim, the batch writes of outcomes and leases, and the enqueue.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import Any

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
from ..rollup import MetricAmount
from ..schedules import Schedule, ScheduleState, Tick, TickResult
from ..stats import Stats, WorkerScope
from .base import EffectRecord, WorkerInfo
from .executor import Executor
from .migrations import apply_migrations, up_to_date
from .ops import (
    browsing,
    claims,
    flow_control,
    job_graph,
    markers,
    monitoring,
    pruning,
    schedule_store,
    workers,
    workflows,
)
from .ops.claims import LimitedScans
from .records import (
    Checkpoint,
    ChildState,
    Claim,
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


class SharedBackend(Executor):
    """The engine-independent half of a backend: an engine subclasses it and supplies the
    executor's abstract methods."""

    _scans: LimitedScans
    """When this backend's limited claims may only hand slots over."""

    def migrate(self) -> list[str]:
        if up_to_date(self.read, self.sql, self.migrations):
            return []
        return apply_migrations(
            self.transaction, self.run_script, self.sql, self.migrations, self.now
        )

    # -- claims and outcomes (the claim itself is the engine's) ---------------------------

    def claim_jobs(self, claim: Claim) -> list[ClaimedJob]:
        return self.finish_and_claim([], claim)[1]

    def finish_and_claim(
        self, outcomes: Sequence[Outcome], claim: Claim
    ) -> tuple[list[int], list[ClaimedJob]]:
        if claim.limit <= 0:
            return self.finish_jobs(outcomes, claim.started), []
        return self._finish_and_claim(outcomes, claim)

    def claim_suspect(self, claim: Claim) -> ClaimedJob | None:
        return claims.claim_suspect(self, claim)

    def next_due(self, query: DueQuery) -> Due:
        return claims.next_due(self, query)

    def finish_jobs(
        self, outcomes: Sequence[Outcome], started: Sequence[HeldJob] = ()
    ) -> list[int]:
        return claims.finish_jobs(self, outcomes, started)

    def finish_in_transaction(self, connection: Any, outcome: Outcome) -> bool:
        return claims.finish_in_transaction(self, connection, outcome)

    def amend_done_job(self, outcome: Outcome) -> bool:
        return claims.amend_done_job(self, outcome)

    def rescue_jobs(self, rescue: Rescue) -> list[Outcome]:
        return claims.rescue_jobs(self, rescue)

    def register_worker(self, info: WorkerInfo) -> None:
        workers.register_worker(self, info)

    def live_workers(self) -> int:
        return workers.live_workers(self)

    def unregister_worker(self, worker: str) -> None:
        workers.unregister_worker(self, worker)

    def task_names(self) -> list[str]:
        return workers.task_names(self)

    def task_info(self, name: str) -> TaskInfo | None:
        return workers.task_info(self, name)

    def served_tasks(self) -> set[str]:
        return workers.served_tasks(self)

    def worker_scopes(self) -> list[WorkerScope]:
        return workers.worker_scopes(self)

    def stats(self) -> Stats:
        return monitoring.stats(self)

    def add_metric_amounts(self, amounts: Sequence[MetricAmount]) -> None:
        monitoring.add_metric_amounts(self, amounts)

    def attempts_by_minute(
        self, since: int, queue: str | None = None
    ) -> list[tuple[int, str, float]]:
        return monitoring.attempts_by_minute(self, since, queue)

    def metric_totals(self) -> list[MetricAmount]:
        return monitoring.metric_totals(self)

    def metric_label_sets(self) -> list[tuple[str, str, bool]]:
        return monitoring.metric_label_sets(self)

    def get_job(self, job_id: int) -> Job | None:
        return browsing.get_job(self, job_id)

    def list_jobs(self, listing: JobListing) -> list[Job]:
        return browsing.list_jobs(self, listing)

    def find_jobs(self, search: JobSearch) -> JobPage:
        return browsing.find_jobs(self, search)

    def count_jobs(self, wanted: JobFilter, cap: int) -> JobCount:
        return browsing.count_jobs(self, wanted, cap)

    def retry_jobs(self, wanted: JobFilter, states: Sequence[str]) -> int:
        return browsing.retry_jobs(self, wanted, states)

    def cancel_jobs_matching(self, wanted: JobFilter, states: Sequence[str]) -> int:
        return browsing.cancel_jobs_matching(self, wanted, states)

    def delete_jobs(self, wanted: JobFilter, states: Sequence[str]) -> int:
        return browsing.delete_jobs(self, wanted, states)

    def worker_statuses(self) -> list[WorkerStatus]:
        return browsing.worker_statuses(self)

    def job_children(self, job_id: int, limit: int) -> list[int]:
        return browsing.job_children(self, job_id, limit)

    def cancel_job(self, job_id: int) -> bool:
        return job_graph.cancel_job(self, job_id)

    def enqueue_group(
        self, group: JobGroup, connection: Any | None = None
    ) -> tuple[list[EnqueueResult], EnqueueResult | None]:
        return job_graph.enqueue_group(self, group, connection)

    def open_parents(self, job_id: int, parents: Sequence[int]) -> list[int]:
        return job_graph.open_parents(self, job_id, parents)

    def cancelled_among(self, job_ids: Collection[int]) -> set[int]:
        return job_graph.cancelled_among(self, job_ids)

    def ended_among(self, job_ids: Collection[int]) -> set[int]:
        return job_graph.ended_among(self, job_ids)

    def limited_pending(
        self, queues: Sequence[str] | None, tasks: Collection[str] | None = None
    ) -> bool:
        return flow_control.limited_pending(self, queues, tasks)

    def limit_usage(self, key: str, window: float) -> tuple[int, int]:
        return flow_control.limit_usage(self, key, window)

    def queue_limit(self, name: str) -> QueueLimit | None:
        return flow_control.queue_limit(self, name)

    def pause_queue(self, name: str) -> bool:
        return flow_control.pause_queue(self, name)

    def resume_queue(self, name: str) -> bool:
        return flow_control.resume_queue(self, name)

    def queue_states(self) -> dict[str, tuple[bool, float | None]]:
        return flow_control.queue_states(self)

    def prune_finished(self, prune: PruneFinished) -> int:
        return pruning.prune_finished(self, prune)

    def prune_spent_keys(self, before: float, limit: int = 1000) -> int:
        return pruning.prune_spent_keys(self, before, limit)

    def spent_key_of_job(self, job_id: int) -> SpentKey | None:
        return pruning.spent_key_of_job(self, job_id)

    def prune_starts(self, before: float, limit: int = 1000) -> int:
        return pruning.prune_starts(self, before, limit)

    def prune_idempotency(self, before: float, limit: int = 1000) -> int:
        return pruning.prune_idempotency(self, before, limit)

    def prune_metric_minutes(self, before: float, limit: int = 1000) -> int:
        return pruning.prune_metric_minutes(self, before, limit)

    def mark_idempotent(self, connection: Any, key: str, ttl: float | None = None) -> bool:
        return markers.mark_in_transaction(self, connection, key, ttl)

    def effect_begin(self, intent: EffectIntent) -> EffectRecord:
        return markers.effect_begin(self, intent)

    def effect_set(self, end: EffectEnd) -> None:
        markers.effect_set(self, end)

    def effect_forget(self, key: str, holder: str) -> None:
        markers.effect_forget(self, key, holder)

    def save_schedule(self, schedule: Schedule, next_run_at: float) -> ScheduleState:
        return schedule_store.save_schedule(self, schedule, next_run_at)

    def get_schedule(self, name: str) -> ScheduleState | None:
        return schedule_store.get_schedule(self, name)

    def list_schedules(self) -> list[ScheduleState]:
        return schedule_store.list_schedules(self)

    def upcoming_schedules(self, limit: int) -> list[ScheduleState]:
        return schedule_store.upcoming_schedules(self, limit)

    def delete_schedule(self, name: str) -> bool:
        return schedule_store.delete_schedule(self, name)

    def pause_schedule(self, name: str) -> bool:
        return schedule_store.pause_schedule(self, name)

    def resume_schedule(self, name: str, next_run_at: float) -> bool:
        return schedule_store.resume_schedule(self, name, next_run_at)

    def fire_schedule(self, tick: Tick) -> TickResult:
        return schedule_store.fire_schedule(self, tick)

    def run_schedule_now(self, name: str, job: NewJob) -> TickResult | None:
        return schedule_store.run_schedule_now(self, name, job)

    def settle_children(self, conn: Any, ended: Sequence[tuple[int, str]]) -> None:
        """Settle the children of parents that ended in the caller's transaction."""
        job_graph.settle_children(self, conn, ended)

    # -- durable workflows (ops/workflows.py) ----------------------------------------

    def workflow_steps(self, job_id: int) -> list[WorkflowStep]:
        return workflows.workflow_steps(self, job_id)

    def save_step(self, checkpoint: Checkpoint, connection: Any | None = None) -> bool:
        return workflows.save_step(self, checkpoint, connection)

    def park_workflow(self, park: Park) -> str | None:
        return workflows.park_workflow(self, park)

    def wake_workflows(self, now: float, limit: int = 500) -> int:
        return workflows.wake_workflows(self, now, limit)

    def next_wake(self) -> float | None:
        return workflows.next_wake(self)

    def emit_event(self, name: str, payload: str | None, connection: Any = None) -> int:
        return workflows.emit_event(self, name, payload, connection)

    def first_event(self, name: str, after: int) -> Event | None:
        return workflows.first_event(self, name, after)

    def child_states(self, job_ids: Collection[int]) -> list[ChildState]:
        return workflows.child_states(self, job_ids)

    def workflow_jobs(
        self, tasks: Sequence[str], state: str | None, limit: int
    ) -> list[dict[str, Any]]:
        return workflows.workflow_jobs(self, tasks, state, limit)

    def prune_events(self, before: float, limit: int = 1000) -> int:
        return workflows.prune_events(self, before, limit)

    def _insert_dependent(self, conn: Any, job: NewJob) -> EnqueueResult:
        return job_graph.insert_dependent(self, conn, job)

    def watch_job(self, job_id: int) -> None:
        if "watch_job" in self.sql:  # an engine that pushes a job's end to those waiting
            self.change("watch_job", {"id": job_id})

    # -- wake-ups: guarantee 8 lives in sqljobs.notifiers ---------------------------------

    def subscribe(
        self, callback: Callable[[], None], queues: Collection[str] | None = None
    ) -> None:
        self.notifier.subscribe(callback, queues)

    @property
    def pushes_changes(self) -> bool:
        return self.notifier.pushes

    def change_marker(self) -> int | None:
        return self.notifier.change_marker()
