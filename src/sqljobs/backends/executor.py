"""The executor: what an engine gives the queries both engines share, its statements and
the ways to run work on them.

The shared queries (:mod:`.ops`, and :mod:`.migrations`) are written once over this. An
engine supplies only what really differs: how a connection is had and a transaction is
run (SQLite: a connection per thread, ``BEGIN IMMEDIATE`` and one writer at a time;
PostgreSQL: a pool, autocommit for single statements, retries on serialization
failure), how a list is bound, and a few hooks below (the batch write of outcomes, the
enqueue on a connection, the announcements after a commit).
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any, TypeVar

from ..jobs import ClaimedJob, EnqueueResult, HeldJob, NewJob, Outcome
from ..notifiers.base import Notifier
from .migrations import Migration
from .records import Claim
from .rows import Result, result

T = TypeVar("T")


class Executor(ABC):
    """Statements, a clock and ways to run work. Every method that takes ``work`` calls it
    with a DB-API connection (sqlite3 or psycopg) and returns what it returns."""

    url: str
    sql: Mapping[str, str]
    """The engine's named statements (its ``.sql`` files), ready to run."""
    migrations: Sequence[Migration]
    notifier: Notifier
    one_writer: bool = False
    """The engine has one write lock for the whole database (SQLite): periodic work that
    usually finds nothing to write looks first, so a long ``ctx.transaction()`` holding
    that lock does not stall the worker that runs it (the rescue of expired leases reads
    ``any_expired`` before it takes the lock)."""
    server_clock: bool = False
    """Whether a delay counts from the database server's clock (PostgreSQL's setting)."""

    @abstractmethod
    def now(self) -> float:
        """The backend's clock (the App's), Unix seconds."""

    @abstractmethod
    def read(self, work: Callable[[Any], T]) -> T:
        """Reads, outside any explicit transaction."""

    @abstractmethod
    def write(self, work: Callable[[Any], T]) -> T:
        """Writes as cheaply as the engine allows: on PostgreSQL each statement commits on
        its own (one round trip, not three); SQLite has one safe way, a write transaction."""

    @abstractmethod
    def transaction(self, work: Callable[[Any], T]) -> T:
        """All of ``work`` in one transaction, committed when it returns."""

    @abstractmethod
    def durable(self, work: Callable[[Any], T]) -> T:
        """Like :meth:`write`, but the commit survives a server crash whatever the
        backend's own commit setting (effects must never be forgotten)."""

    def durable_write(self, work: Callable[[Any], T]) -> T:
        """A write whose commit must survive a server crash, where ``work``'s statements
        say so themselves on an engine that can (PostgreSQL: ``set_config(
        'synchronous_commit', 'on', true)`` in the statement, one round trip); elsewhere
        :meth:`durable`."""
        return self.durable(work)

    @abstractmethod
    def durable_transaction(self, work: Callable[[Any], T]) -> T:
        """Like :meth:`transaction`, committed as :meth:`durable` commits: a schedule's
        tick (its row moved on and its job enqueued) commits as an enqueue does."""

    def snapshot(self, work: Callable[[Any], T]) -> T:
        """Reads that must agree with each other, all from one snapshot of the database
        (a job moving from pending to running between two counts is in exactly one)."""
        return self.read(work)

    @abstractmethod
    def run_script(self, conn: Any, script: str) -> None:
        """Run a script of several statements (a migration)."""

    @abstractmethod
    def filtered(
        self, name: str, queues: Sequence[str] | None, tasks: Collection[str] | None
    ) -> tuple[str, dict[str, Any]]:
        """The statement ``name`` limited to these queues and (given) these tasks, with the
        parameters the limit needs: what a worker can run."""

    @abstractmethod
    def array(self, values: Iterable[Any]) -> Any:
        """A list as a parameter (a JSON text for SQLite's json_each, an array for psycopg)."""

    def query(self, name: str, params: Mapping[str, Any] | None = None) -> Result:
        """Run the read statement ``name``."""
        sql = self.sql[name]
        return self.read(lambda conn: result(conn.execute(sql, params or {})))

    def change(self, name: str, params: Mapping[str, Any]) -> Result:
        """Run the write statement ``name``, committed."""
        sql = self.sql[name]
        return self.write(lambda conn: result(conn.execute(sql, params)))

    # -- the engine's hooks: what the shared queries call where engines differ ----------

    @abstractmethod
    def _finish(
        self, conn: Any, outcomes: Sequence[Outcome], started: Sequence[HeldJob] = ()
    ) -> list[int]:
        """Write fenced outcomes (and clear ``prefetched`` on ``started``) on ``conn``;
        return the ids written."""

    @abstractmethod
    def _finish_and_claim(
        self, outcomes: Sequence[Outcome], claim: Claim
    ) -> tuple[list[int], list[ClaimedJob]]:
        """Write ``outcomes`` and take the jobs ``claim`` asks for, in as few round trips
        and commits as the engine allows: the worker's hot path."""

    @abstractmethod
    def enqueue_jobs(
        self, jobs: Iterable[NewJob], connection: Any | None = None
    ) -> list[EnqueueResult]: ...

    @abstractmethod
    def _enqueue_on(self, conn: Any, jobs: list[NewJob]) -> list[EnqueueResult]:
        """Insert ``jobs`` on ``conn``, inside a transaction it already has."""

    @abstractmethod
    def _check_connection(self, connection: Any) -> None:
        """Refuse, clearly, a caller's connection of the wrong driver."""

    def _next_rate_opening(
        self, queues: Sequence[str] | None, tasks: Collection[str] | None
    ) -> float | None:
        """In how many seconds the first rate-limited key that has due jobs and a full
        window may start one (None: no rate holds any back)."""
        return None

    def _made_work(self, queues: Collection[str] | None) -> None:
        """The transaction in progress made jobs claimable in ``queues`` (None: in any):
        an engine whose statements do not NOTIFY announces them after its commit."""
        return None  # PostgreSQL's statements NOTIFY

    def _made_events(self, kind: str, job_ids: Sequence[int]) -> None:
        """The transaction in progress made job events (``"cancel"``): an engine whose
        statements do not NOTIFY announces them after its commit."""
        return None  # PostgreSQL's statements NOTIFY

    def _event_channel(self) -> str | None:
        """Where statements that end or cancel jobs NOTIFY those concerned (None: the
        engine has no push; waiters and workers learn by looking)."""
        return None

    def _claim_statement(self, name: str, claim: Claim) -> tuple[str, dict[str, Any]]:
        """The claim statement ``name`` for ``claim``, with its parameters."""
        tasks = None if claim.leases is None else list(claim.leases)
        sql, params = self.filtered(name, claim.queues, tasks)
        params["worker"] = claim.worker
        params["now"] = self.now()
        params["limit"] = claim.limit
        params["start_now"] = claim.at_once
        params["all_buffered"] = int(claim.at_once == 0)  # (SQLite's limited claim_ids)
        params["leases"] = json.dumps(dict(claim.leases or {}))
        return sql, params

    def _prune_batch(self, params: Mapping[str, Any]) -> int:
        """Delete one batch of finished jobs and keep its keys (one statement: see
        prune_finished's SQL); return how many it deleted."""
        counted = self.change("prune_finished", params).first("n")
        return int(counted[0]) if counted else 0
