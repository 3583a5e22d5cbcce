"""SQLite's enqueue: row by row in one write transaction (its own, or the caller's on a
``sqlite3.Connection``), a key checked against the spent keys under the write lock."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from ...errors import BackendError, ConfigurationError
from ...jobs import EnqueueResult, NewJob
from ..shared import SharedBackend
from .sql import Q


class SqliteEnqueuer(SharedBackend):
    """Enqueues for :class:`~sqljobs.backends.sqlite.SqliteBackend`."""

    if TYPE_CHECKING:

        def _writing(self) -> AbstractContextManager[sqlite3.Connection]: ...

    def enqueue_jobs(
        self, jobs: Iterable[NewJob], connection: Any | None = None
    ) -> list[EnqueueResult]:
        jobs = list(jobs)  # built before the write lock is taken
        if connection is not None:
            self._check_connection(connection)
            return self._insert(connection, jobs)
        with self._writing() as conn:
            return self._insert(conn, jobs)

    async def enqueue_jobs_async(
        self, jobs: Sequence[NewJob], connection: Any
    ) -> list[EnqueueResult]:
        raise ConfigurationError(
            f"{type(self).__name__} cannot enqueue on an async connection: on SQLite, run "
            "the enqueue with its sqlite3 connection in a thread "
            "(await asyncio.to_thread(task.with_options(connection=conn).enqueue, ...))"
        )

    def _check_connection(self, connection: Any) -> None:
        if not isinstance(connection, sqlite3.Connection):
            raise ConfigurationError(
                "a SQLite queue needs a sqlite3.Connection to enqueue in the caller's "
                f"transaction, got {type(connection).__name__}"
            )

    def _insert(self, conn: sqlite3.Connection, jobs: Sequence[NewJob]) -> list[EnqueueResult]:
        self._made_work({job.queue for job in jobs})
        now = self.now()
        insert, by_key, release = Q["insert_job"], Q["job_id_by_key"], Q["release_key"]
        out = []
        for job in jobs:
            if job.debounce is not None:
                out.append(self._debounce(conn, job, now))
                continue
            if job.key is not None:
                conn.execute(release, {"key": job.key, "now": now})
            if job.after or job.collect:
                out.append(self._insert_dependent(conn, job))
                continue
            keyed: tuple[Any, ...] = ()
            if job.key is not None:
                # No prune can commit between this check and the insert, as one can on
                # PostgreSQL: this transaction holds SQLite's one write lock from its first
                # write (release, above), and a caller's transaction whose earlier reads
                # predate a prune cannot take that lock at all (SQLITE_BUSY_SNAPSHOT).
                # A caller's connection in autocommit mode commits each statement alone,
                # so there a prune could still come between the two.
                spent = conn.execute(Q["spent_key"], {"key": job.key, "now": now}).fetchone()
                if spent is not None:  # its job was pruned, and the key is still kept
                    out.append(EnqueueResult(int(spent[0]), False))
                    continue
                keyed = (job.key_retention,)
            cur = conn.execute(
                Q["insert_keyed_job"] if keyed else insert,
                (
                    job.queue,
                    job.task,
                    job.payload,
                    job.key,
                    job.priority,
                    job.run_at,
                    now,
                    job.deadline_at,
                    job.max_attempts,
                    job.lease,
                    job.key_hold,
                    job.limit_key,
                    job.limit_max,
                    job.rate_max,
                    job.rate_window,
                    *keyed,
                ),
            )
            if cur.rowcount == 1:
                out.append(EnqueueResult(int(cur.lastrowid or 0), True))
            else:
                (existing,) = conn.execute(by_key, (job.key,)).fetchone()
                out.append(EnqueueResult(int(existing), False))
        return out

    def _debounce(self, conn: sqlite3.Connection, job: NewJob, now: float) -> EnqueueResult:
        """A debounced job: its key's pending job takes its payload and start, else (the
        key's job claimed, ended, or none) it is inserted, a key kept for a pruned job
        notwithstanding."""
        params = {"key": job.key, "payload": job.payload, "run_at": job.run_at}
        row = (
            job.queue, job.task, job.payload, job.key, job.priority, job.run_at, now,
            job.deadline_at, job.max_attempts, job.lease, job.key_hold, job.limit_key,
            job.limit_max, job.rate_max, job.rate_window, job.key_retention,
        )  # fmt: skip
        # more than one round only on a caller's connection in autocommit mode, where
        # another enqueue can come between these statements
        for _ in range(5):
            found = conn.execute(Q["debounce_job"], params).fetchone()
            if found is not None:
                return EnqueueResult(int(found[0]), False)
            conn.execute(Q["release_debounce_key"], {"key": job.key})
            cur = conn.execute(Q["insert_keyed_job"], row)
            if cur.rowcount == 1:
                return EnqueueResult(int(cur.lastrowid or 0), True)
        raise BackendError(
            f"debounced enqueue of {job.task!r} with key {job.key!r}: other enqueues kept "
            "taking the key meanwhile; enqueue in a transaction (or run it again)"
        )

    _enqueue_on = _insert
