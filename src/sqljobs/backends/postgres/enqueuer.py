"""Enqueueing on PostgreSQL, mixed into PostgresBackend so its module stays about claims.

A batch of jobs is one JSON parameter per statement, parsed by the server. Up to
``ENQUEUE_CHUNK`` jobs are one autocommit statement that also sends the NOTIFYs: one round
trip. A bigger batch is one transaction of chunk statements in pipeline mode: the server
inserts one chunk while Python builds the next (the arguments are checked and encoded as
they are read), faster for big batches than one statement
built first. Any error, in Python or in the server, rolls the whole batch back.

NOTIFY is sent in the enqueue's own statement (or, pipelined, as the last statement of its
transaction); which queues it names, and the trailing NOTIFY after a burst, are decided by
:class:`sqljobs.notifiers.postgres.PostgresNotifier`.
"""

from __future__ import annotations

import functools
import itertools
import json
import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, TypeVar

import psycopg

from ...errors import BackendError, ConfigurationError
from ...jobs import EnqueueResult, NewJob
from ...notifiers.postgres import PostgresNotifier
from ..rows import Result, columns, result
from .pool import PostgresPool

T = TypeVar("T")

ENQUEUE_CHUNK = 1000
"""Jobs per insert statement; a bigger batch is pipelined in chunks of this size."""


class PostgresEnqueue(PostgresPool):
    """The enqueue method of the Backend protocol, for PostgreSQL."""

    notifier: PostgresNotifier

    def enqueue_jobs(
        self, jobs: Iterable[NewJob], connection: Any | None = None
    ) -> list[EnqueueResult]:
        if connection is not None:
            return self._enqueue_in(connection, list(jobs))
        chunks = _Replayable(_chunked(jobs, ENQUEUE_CHUNK))
        first, second = chunks.peek(2)
        if not first:
            return []
        if any(j.debounce is not None for j in first):  # a read-and-write: a transaction
            every = [job for chunk in chunks for job in chunk]
            return self._run(lambda c: self._enqueue_in(c, every))
        if not second and not any(_one_by_one(j) for j in first):  # one statement: one trip
            notify, later = self.notifier.debounce({j.queue for j in first})
            rows = self._run(
                lambda c: result(self._plain(c, first, notify, undo=True)), transaction=False
            )
            sent = [(first, rows)]
        else:
            piped = self._run(lambda c: self._send_pipelined(c, chunks), transaction=False)
            if piped is None:  # jobs that wait for others: nothing was committed
                every = [job for chunk in chunks for job in chunk]
                return self._run(lambda c: self._enqueue_in(c, every))
            sent, later = piped
        self.notifier.notify_later(later)  # after our commit: not to wake workers too early
        # outside the retried work: a lookup failing after the commit must not insert again
        return [r for chunk, rows in sent for r in _results(chunk, rows, self._keyed_ids)]

    def _keyed_ids(self, keys: list[str]) -> dict[str, int]:
        return dict(self.query("job_ids_by_key", {"keys": keys}).pick("key", "id"))

    def _enqueue_in(self, connection: Any, jobs: list[NewJob]) -> list[EnqueueResult]:
        """In the caller's transaction, never committing it; built in full before any SQL
        runs, so a bad argument leaves nothing behind in a transaction they may commit."""
        self._check_connection(connection)
        if not jobs:
            return []
        notify = self.notifier.in_callers_transaction({j.queue for j in jobs})
        if any(_one_by_one(j) for j in jobs):
            return self._enqueue_one_by_one(connection, jobs, notify)
        try:  # the notify is delivered only if the caller commits
            return [
                result
                for start in range(0, len(jobs), ENQUEUE_CHUNK)
                for result in self._insert(
                    connection, jobs[start : start + ENQUEUE_CHUNK], notify if not start else []
                )
            ]
        except psycopg.Error as exc:
            raise BackendError(f"PostgreSQL enqueue failed: {str(exc).strip()}") from exc

    def _enqueue_on(self, conn: Any, jobs: list[NewJob]) -> list[EnqueueResult]:
        return self._enqueue_in(conn, jobs)

    def _check_connection(self, connection: Any) -> None:
        if not isinstance(connection, psycopg.Connection):
            raise ConfigurationError(
                "a PostgreSQL queue needs a psycopg Connection to enqueue in the caller's "
                f"transaction, got {type(connection).__name__}"
            )

    def _enqueue_one_by_one(
        self, conn: psycopg.Connection[Any], jobs: Sequence[NewJob], notify: list[str]
    ) -> list[EnqueueResult]:
        """A batch with jobs that wait for others or are debounced: each job its own
        statements, in order (a job's parents are locked and read before it is inserted)."""
        try:
            out = []
            for job in jobs:
                if job.debounce is not None:
                    out.append(self._debounce(conn, job))
                elif _waits(job):
                    if job.key is not None:  # a finished job's key its scope lets go of
                        conn.execute(
                            self.sql["release_keys"], {"keys": [job.key], **self._caller_now()}
                        )
                    out.append(self._insert_dependent(conn, job))
                else:
                    out += self._insert(conn, [job], notify)
                    notify = []
            if notify:
                conn.execute(
                    self.sql["notify"], {"channel": self.notifier.channel, "notify": notify}
                )
            return out
        except psycopg.Error as exc:
            raise BackendError(f"PostgreSQL enqueue failed: {str(exc).strip()}") from exc

    def _insert(
        self, conn: psycopg.Connection[Any], jobs: Sequence[NewJob], notify: list[str]
    ) -> list[EnqueueResult]:
        """One statement inserts the jobs and sends the NOTIFYs (in ``conn``'s transaction);
        a job inserted past a key kept meanwhile is deleted again (see insert_jobs)."""
        rows = result(self._plain(conn, jobs, notify, undo=False))
        if raced := _raced(rows):
            conn.execute(self.sql["undo_inserts"], {"ids": list(raced)})

        def lookup(keys: list[str]) -> dict[str, int]:
            found = result(conn.execute(self.sql["job_ids_by_key"], {"keys": keys}))
            return dict(found.pick("key", "id"))

        return _results(jobs, rows, lookup)

    def _debounce(self, conn: psycopg.Connection[Any], job: NewJob) -> EnqueueResult:
        """A debounced job (see debounce_job), in ``conn``'s transaction."""
        (found,) = conn.execute(self.sql["debounce_job"], self._debounce_params(job))
        return EnqueueResult(int(found[0]), bool(found[1]))

    def _debounce_params(self, job: NewJob) -> dict[str, Any]:
        row = _job_rows([job], self.server_clock)[0]
        row.append(_json_seconds(job.key_retention))
        return {"job": json.dumps(row)}

    def _send_pipelined(
        self, conn: psycopg.Connection[Any], chunks: Iterable[list[NewJob]]
    ) -> tuple[list[tuple[list[NewJob], Result]], list[str]] | None:
        """One transaction, BEGIN and COMMIT included, in one pipeline: the chunk
        statements go out without waiting for each other, and the NOTIFYs last, once every
        queue is known. The client waits for the server once, at the end. None, with
        nothing committed, if a chunk holds jobs that wait for others (they cannot be one
        plain insert)."""
        sent: list[tuple[list[NewJob], psycopg.Cursor[Any]]] = []
        queues: set[str] = set()
        with conn.pipeline(), conn.transaction():
            for chunk in chunks:
                if any(_one_by_one(j) for j in chunk):
                    sent = []
                    raise psycopg.Rollback  # ends the transaction block, rolled back
                sent.append((chunk, self._plain(conn, chunk, [], undo=True)))
                queues.update(j.queue for j in chunk)
            notify, later = self.notifier.debounce(queues)
            if notify:
                params = {"channel": self.notifier.channel, "notify": notify}
                conn.execute(self.sql["notify"], params)
        if not sent:
            return None
        return [(chunk, result(cur)) for chunk, cur in sent], later

    def _plain(
        self, conn: psycopg.Connection[Any], jobs: Sequence[NewJob], notify: list[str], undo: bool
    ) -> psycopg.Cursor[Any]:
        """Send the insert of jobs that wait for nothing (one statement); ``undo``: a job
        inserted past a key kept meanwhile fails the statement, to be run again (for a
        statement that commits on its own), rather than come back to be deleted."""
        keys, sql, params = self._plain_statement(jobs, notify, undo)
        if keys:
            conn.execute(self.sql["release_keys"], {"keys": keys, **self._caller_now()})
        return conn.cursor().execute(sql, params)

    def _plain_statement(
        self, jobs: Sequence[NewJob], notify: list[str], undo: bool
    ) -> tuple[list[str], str, dict[str, Any]]:
        """The keys whose finished jobs' scope lets go of them first, and the insert of
        jobs that wait for nothing, with its parameters."""
        keys = [j.key for j in jobs if j.key is not None]
        if keys:  # and how long each key outlives its row: NULL, seconds or "Infinity"
            return keys, self.sql["insert_jobs"], self._keyed_params(jobs, notify, undo)
        rows_json = json.dumps(_job_rows(jobs, self.server_clock))
        params = {"jobs": rows_json, "channel": self.notifier.channel, "notify": notify,
                  **self._caller_now()}  # fmt: skip
        return keys, self.sql["insert_unkeyed_jobs"], params

    def _keyed_params(
        self, jobs: Sequence[NewJob], notify: list[str], undo: bool
    ) -> dict[str, Any]:
        """insert_jobs' parameters: each row also says how long its key outlives it, and
        ``now`` is when a key kept after its job was pruned must still be valid."""
        rows = _job_rows(jobs, self.server_clock)
        for row, job in zip(rows, jobs, strict=True):
            row.append(_json_seconds(job.key_retention))
        rows_json = json.dumps(rows)
        return {
            "jobs": rows_json,
            "channel": self.notifier.channel,
            "notify": notify,
            "now": self.now(),
            "undo": undo,
        }

    async def enqueue_jobs_async(
        self, jobs: Sequence[NewJob], connection: Any
    ) -> list[EnqueueResult]:
        """Insert ``jobs`` on the caller's ``psycopg.AsyncConnection``, in its transaction
        and never committing it (``App.enqueue_async`` with ``connection=``): the same
        statements as a sync enqueue, awaited."""
        if not isinstance(connection, psycopg.AsyncConnection):
            raise ConfigurationError(
                "an async enqueue on PostgreSQL needs a psycopg AsyncConnection, got "
                f"{type(connection).__name__}"
            )
        jobs = list(jobs)
        if any(j.debounce is not None for j in jobs):
            return await self._debounce_async(jobs, connection)
        if any(_waits(j) for j in jobs):
            raise ConfigurationError(
                "jobs that run after others (after=, groups) cannot be enqueued on an "
                "AsyncConnection yet: enqueue them on a sync connection, in a thread"
            )
        notify = self.notifier.in_callers_transaction({j.queue for j in jobs})
        out: list[EnqueueResult] = []
        try:
            for start in range(0, len(jobs), ENQUEUE_CHUNK):
                chunk = jobs[start : start + ENQUEUE_CHUNK]
                keys, sql, params = self._plain_statement(chunk, [] if start else notify, False)
                if keys:
                    await connection.execute(
                        self.sql["release_keys"], {"keys": keys, **self._caller_now()}
                    )
                cursor = await connection.execute(sql, params)
                rows = Result(columns(cursor) or (), await cursor.fetchall(), cursor.rowcount)
                if raced := _raced(rows):  # see _insert
                    await connection.execute(self.sql["undo_inserts"], {"ids": list(raced)})
                missing = [k for o, i, _ in rows.pick("ord", "id", "created")
                           if i is None and (k := chunk[o - 1].key)]  # fmt: skip
                found: dict[str, int] = {}
                if missing:
                    looked = await connection.execute(self.sql["job_ids_by_key"], {"keys": missing})
                    found = {k: i for k, i in await looked.fetchall()}
                out += _results(chunk, rows, functools.partial(_known, found))
        except psycopg.Error as exc:
            raise BackendError(f"PostgreSQL enqueue failed: {str(exc).strip()}") from exc
        return out

    async def _debounce_async(
        self, jobs: Sequence[NewJob], connection: psycopg.AsyncConnection[Any]
    ) -> list[EnqueueResult]:
        """Debounced jobs on the caller's AsyncConnection (see :meth:`_debounce`)."""
        if any(_waits(j) for j in jobs):
            raise ConfigurationError("a debounced job cannot wait for others (after=)")
        notify = self.notifier.in_callers_transaction({j.queue for j in jobs})
        out: list[EnqueueResult] = []
        try:
            for job in jobs:
                if job.debounce is None:
                    out += await self.enqueue_jobs_async([job], connection)
                    continue
                cur = await connection.execute(self.sql["debounce_job"], self._debounce_params(job))
                (found,) = await cur.fetchall()
                out.append(EnqueueResult(int(found[0]), bool(found[1])))
            if notify:
                params = {"channel": self.notifier.channel, "notify": notify}
                await connection.execute(self.sql["notify"], params)
        except psycopg.Error as exc:
            raise BackendError(f"PostgreSQL enqueue failed: {str(exc).strip()}") from exc
        return out


def _one_by_one(job: NewJob) -> bool:
    """Whether ``job`` needs statements of its own (it waits for others, or is debounced)."""
    return _waits(job) or job.debounce is not None


def _json_seconds(value: float | None) -> float | str | None:
    """``value`` as JSON can carry it: for ever (``inf``) as PostgreSQL's "Infinity"."""
    return "Infinity" if value is not None and math.isinf(value) else value


def _job_rows(jobs: Sequence[NewJob], server_clock: bool) -> list[list[Any]]:
    """The insert statements' rows, in the order their ``e.j ->> n`` columns read them."""
    return [
        [
            j.queue,
            j.task,
            j.payload,
            j.key,
            j.priority,
            j.run_at,
            j.deadline_at,
            j.max_attempts,
            j.lease,
            j.key_hold,
            j.delay if server_clock else None,
            j.limit_key,
            j.limit_max,
            j.rate_max,
            j.rate_window,
        ]
        for j in jobs
    ]


def _known(found: dict[str, int], keys: list[str]) -> dict[str, int]:
    """A lookup of keys already looked up (the async path reads them before)."""
    return found


def _waits(job: NewJob) -> bool:
    """Whether ``job`` waits for other jobs (or collects their results)."""
    return bool(job.after) or job.collect


def _raced(inserted: Result) -> dict[int, int]:
    """The jobs an insert made past a key kept meanwhile (insert_jobs' ``kept``), each
    with the pruned job its key names: those rows are to be deleted again."""
    if "kept" not in inserted.names:  # unkeyed jobs: no key to race on
        return {}
    return {id_: kept for id_, kept in inserted.pick("id", "kept") if kept is not None}


def _results(
    jobs: Sequence[NewJob], inserted: Result, lookup: Callable[[list[str]], dict[str, int]]
) -> list[EnqueueResult]:
    """Results in call order; a key whose row a concurrent enqueue committed after our
    statement's snapshot is looked up (``id`` came back NULL); a job inserted past a key
    kept meanwhile (deleted again by the caller) is answered by the job the key names."""
    rows = inserted.pick("ord", "id", "created")
    raced = _raced(inserted)
    missing = [k for ord_, id_, _ in rows if id_ is None and (k := jobs[ord_ - 1].key)]
    found = lookup(missing) if missing else {}
    return [
        EnqueueResult(raced[id_], False)
        if id_ in raced
        else EnqueueResult(
            int(id_ if id_ is not None else found[str(jobs[ord_ - 1].key)]), bool(new)
        )
        for ord_, id_, new in rows
    ]


def _chunked(items: Iterable[T], size: int) -> Iterator[list[T]]:
    iterator = iter(items)
    while chunk := list(itertools.islice(iterator, size)):
        yield chunk


class _Replayable:
    """Chunks read once from their source, kept, and given again from the start to each
    new iteration: a retried transaction sends the same jobs, not the rest of them."""

    def __init__(self, source: Iterator[list[NewJob]]) -> None:
        self._source = source
        self._seen: list[list[NewJob]] = []

    def peek(self, n: int) -> list[list[NewJob]]:
        """The first ``n`` chunks (empty lists where there are fewer)."""
        while len(self._seen) < n and (chunk := next(self._source, None)) is not None:
            self._seen.append(chunk)
        return self._seen[:n] + [[]] * (n - len(self._seen[:n]))

    def __iter__(self) -> Iterator[list[NewJob]]:
        yield from self._seen
        for chunk in self._source:
            self._seen.append(chunk)
            yield chunk
