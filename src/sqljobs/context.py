"""JobContext: what a running handler may know and do about its own job."""

from __future__ import annotations

import json
import logging
import sys
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import TYPE_CHECKING, Any, TypeVar

from .errors import ConfigurationError, JobCancelled, LeaseLost
from .jobs import ClaimedJob, JobState, Outcome
from .payload import storable
from .validate import is_number

if TYPE_CHECKING:
    from concurrent.futures import Future, ThreadPoolExecutor

    from .backends.base import Backend

log = logging.getLogger("sqljobs.worker")
T = TypeVar("T")

_WARNED_ON_LOOP: set[str] = set()
"""Tasks already told that ``ctx.transaction()`` blocks their event loop (said once each)."""


class JobContext:
    """Passed to a task whose first parameter is annotated ``JobContext``.

    ``lease_lost`` turns True when this worker no longer holds the job (its lease expired,
    it timed out, or it was cancelled): stop early, nothing you report will be written.
    ``cancelled`` turns True when someone cancelled the job (``app.cancel``): stop, or call
    :meth:`check_cancelled` between steps. ``shutting_down`` turns True when the worker
    drains for shutdown.
    """

    NOTE_LIMIT = 1000
    """The longest progress note, in characters: it is shown, not stored as data."""

    def __init__(
        self,
        job: ClaimedJob,
        backend: Backend,
        request_heartbeat: Callable[[], None] = lambda: None,
        report_progress: Callable[[JobContext], None] = lambda _ctx: None,
        encode_result: Callable[[Any], str | None] | None = None,
    ) -> None:
        self.job = job
        self._backend = backend
        self._request_heartbeat = request_heartbeat
        self._report_progress = report_progress
        self._encode_result = encode_result  # None: the task stores no result
        self.result_json: str | None = None
        """What :meth:`set_result` was given, as stored JSON (None: nothing set)."""
        self._progress: str | None = None  # reported, not yet written
        self._progress_lock = threading.Lock()
        self.cancelled = False
        self.lease_lost = False
        self.shutting_down = False
        self.timed_out = False
        self.completed_in_transaction = False
        self.parked = False
        """True once a workflow parked this job (waiting, its attempt given back): the
        worker writes no outcome for the attempt."""
        self.completing = False
        """True while a ``ctx.transaction()`` writes the job's completion: a heartbeat
        that finds the job no longer ``running`` then sees the job's own success, not a
        lost lease."""

    @property
    def backend(self) -> Backend:
        """The backend this job was claimed from (read-only): for helpers that record
        state about the job in the queue's database, such as ``sqljobs.perform_once``."""
        return self._backend

    @property
    def job_id(self) -> int:
        return self.job.id

    @property
    def attempt(self) -> int:
        """1 for the first attempt, 2 for the first retry, ..."""
        return self.job.attempt

    @property
    def task(self) -> str:
        return self.job.task

    @property
    def queue(self) -> str:
        return self.job.queue

    @property
    def key(self) -> str | None:
        return self.job.key

    @property
    def token(self) -> int:
        """The claim's fencing token."""
        return self.job.token

    def heartbeat(self) -> bool:
        """Ask the worker to renew leases now; return False if the lease is already lost.

        Leases are renewed every lease/3 anyway; call this around a long blocking step.
        """
        self._request_heartbeat()
        return not self.lease_lost

    def check_cancelled(self) -> None:
        """Raise :class:`~sqljobs.JobCancelled` if the job was cancelled: call it between
        steps of a long handler to stop where it stands. (Raising it is no failure: the
        job is ``cancelled`` already, and no outcome of this attempt is written.)"""
        if self.cancelled:
            raise JobCancelled(self.job_id, self.task)

    def progress(self, done: float, total: float | None = None, note: str | None = None) -> bool:
        """Record how far the job has come (``done`` of ``total``, with a short ``note``),
        for ``handle.refresh()``, ``sqljobs jobs show`` and the dashboard.

        Cheap to call often: the worker writes the latest report at most a few times a
        second, fenced like every write about the job (a report from a worker that no
        longer holds it is refused), and the last one goes out with the job's outcome.
        Returns False once this worker is known not to hold the job any more.
        """
        _check_amount(done, "done")
        if total is not None:
            _check_amount(total, "total")
            if total <= 0:
                raise ConfigurationError(f"ctx.progress(total=...) must be > 0, got {total!r}")
        if note is not None and not isinstance(note, str):
            raise ConfigurationError(f"ctx.progress(note=...) must be a string, got {note!r}")
        if note is not None and len(note) > self.NOTE_LIMIT:
            raise ConfigurationError(
                f"ctx.progress(note=...) is {len(note)} characters, over {self.NOTE_LIMIT}: "
                "a note is a short status line, not data"
            )
        if note is not None:
            note = storable(note)  # as an error message is: shown safely, never refused
        record = {"done": done, "total": total, "note": note, "at": self._backend.now()}
        with self._progress_lock:
            self._progress = json.dumps(record)
        self._report_progress(self)
        return not self.lease_lost

    def take_progress(self) -> str | None:
        """The latest report not yet written (and forget it): for the worker, once per
        job. No report, no lock: one set after this look is taken by the next one, as it
        would be after a look under the lock."""
        if self._progress is None:
            return None
        with self._progress_lock:
            report, self._progress = self._progress, None
        return report

    def set_result(self, value: Any) -> None:
        """Make ``value`` the job's result, stored by the job's completion: with
        ``ctx.transaction()``, in the same commit as the transaction's writes, so a
        ``handle.result()`` woken by that commit, and the jobs waiting for this one
        (``after=``, a group's ``then=`` callback), see it at once.

        Call it before or inside the ``ctx.transaction()`` block (or in a handler without
        one). ``value`` is encoded at once, with the checks a returned value gets (JSON,
        ``max_payload``, the task's result model): one that cannot be stored raises here,
        before anything commits. A later call replaces it until the completion is
        written; ``None`` clears it. Once set, the handler may still return the same
        value, or None; a different one is logged as an error and recorded in the job's
        history (outcome ``result_mismatch``), and the set value is kept.
        """
        if self.completed_in_transaction:
            raise ConfigurationError(
                f"job {self.job_id} already committed its completion in ctx.transaction(): "
                "call ctx.set_result() before the transaction's block ends"
            )
        if self._encode_result is None:
            raise ConfigurationError(
                f"task {self.task!r} stores no result (store_result=False): drop the "
                "ctx.set_result() call, or register the task with store_result=True"
            )
        self.result_json = self._encode_result(value)

    @contextmanager
    def transaction(self) -> Iterator[Any]:
        """A DB-API connection on the queue's database, inside one transaction.

        The handler's writes and the job's completion commit together, and the completion
        is fenced: if this worker lost the job, everything rolls back and ``LeaseLost`` is
        raised. If the block raises, everything rolls back and the job is retried.
        The connection is the backend's own (sqlite3: ``?`` placeholders; psycopg: ``%s``).

        Once it has committed, the job is ``done``: a value given to :meth:`set_result`
        committed with it; a value the handler returns instead is stored when it returns
        (a moment after the commit: waiters and dependent jobs woken by the commit may not
        see it), and anything it raises after the block is logged and recorded in the
        job's history (the job stays done: a retry would repeat the committed writes).

        It blocks the calling thread (waiting for SQLite's write lock, each statement, the
        commit): in an ``async def`` task use :meth:`transaction_async`.
        """
        self._warn_on_loop()
        if self.completed_in_transaction:
            raise ConfigurationError(
                f"job {self.job_id} was already completed by an earlier ctx.transaction(): "
                "open one transaction per attempt, and do all of the job's writes in it"
            )
        try:
            with self._backend.job_transaction() as conn:
                yield conn
                if self.lease_lost:
                    raise LeaseLost(
                        f"job {self.job_id} lost its lease: its writes were rolled back"
                    )
                self.completing = True  # from here the job may stop being `running` by our hand
                done = Outcome(self.job_id, self.token, JobState.DONE, result=self.result_json)
                if not self._backend.finish_in_transaction(conn, done):
                    raise LeaseLost(
                        f"job {self.job_id} is no longer held by this worker (attempt "
                        f"{self.attempt}, token {self.token}): its writes were rolled back"
                    )
        except BaseException:
            self.completing = False
            raise
        self.completed_in_transaction = True

    @asynccontextmanager
    async def transaction_async(self) -> AsyncIterator[AsyncTransaction]:
        """:meth:`transaction` for ``async def`` tasks, without blocking the event loop:
        the transaction (its connection, your statements, the fenced completion and the
        commit) runs on a thread of its own, and each call on the ``AsyncTransaction`` it
        gives is awaited::

            async with ctx.transaction_async() as tx:
                if await tx.run(sqljobs.idempotent, f"order-{order_id}:pay"):
                    await tx.execute("UPDATE accounts SET balance = balance - 100 WHERE id = ?",
                                     (order_id,))

        Everything else is as :meth:`transaction` says: one per attempt, the job is done
        when the block ends, an exception (a cancellation included) rolls it all back.
        """
        from concurrent.futures import ThreadPoolExecutor

        # one thread for the whole transaction: a sqlite3 connection is used only by the
        # thread that opened it, and statements on one connection must not overlap
        pool = ThreadPoolExecutor(1, thread_name_prefix=f"sqljobs-tx-{self.job_id}")
        manager = self.transaction()
        try:
            entering = pool.submit(manager.__enter__)
            try:
                conn = await _awaited(entering)
            except BaseException as exc:  # cancelled while it opened: roll it back there
                pool.submit(_abandon, manager, entering, exc)
                raise
            try:
                yield AsyncTransaction(conn, pool)
            except BaseException as exc:
                await _shielded(pool.submit(manager.__exit__, type(exc), exc, exc.__traceback__))
                raise
            await _shielded(pool.submit(manager.__exit__, None, None, None))
        finally:
            pool.shutdown(wait=False)  # its thread ends once what was queued has run

    def _warn_on_loop(self) -> None:
        """Say once per task that a blocking ``ctx.transaction()`` runs on an event loop."""
        asyncio = sys.modules.get("asyncio")  # not imported: no loop can be running
        if asyncio is None or self.task in _WARNED_ON_LOOP:
            return
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return
        _WARNED_ON_LOOP.add(self.task)
        log.warning(
            "task %s: ctx.transaction() was opened on the event loop, and blocks it until "
            "the transaction commits (waiting for locks, every statement, the commit): "
            "every other async task of this worker stalls meanwhile. Use "
            "`async with ctx.transaction_async() as tx:` in async def tasks",
            self.task,
        )


class AsyncTransaction:
    """What ``async with ctx.transaction_async() as tx`` gives: the job's transaction,
    driven from the event loop, every call run on the transaction's own thread."""

    def __init__(self, connection: Any, pool: ThreadPoolExecutor) -> None:
        self._connection = connection
        self._pool = pool

    async def execute(self, sql: str, params: Any = ()) -> list[tuple[Any, ...]]:
        """Run one statement (the backend's placeholders: sqlite3 ``?``, psycopg ``%s``)
        and return its rows (none for a statement that returns none)."""
        return await self.run(_execute, sql, params)

    async def run(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        """``fn(connection, *args, **kwargs)`` on the transaction's thread, with the DB-API
        connection: for anything :meth:`execute` does not give (``rowcount``,
        ``executemany``, ``sqljobs.idempotent(connection, key)``). Keep the connection
        inside ``fn``: used from the event loop, it would block it (and sqlite3 refuses
        a connection another thread opened)."""
        return await _awaited(self._pool.submit(fn, self._connection, *args, **kwargs))


def _execute(connection: Any, sql: str, params: Any) -> list[tuple[Any, ...]]:
    cursor = connection.execute(sql, params)
    return [tuple(row) for row in cursor.fetchall()] if cursor.description else []


async def _awaited(future: Future[T]) -> T:
    """Await a thread's work (a cancel before it began means it never runs)."""
    import asyncio

    return await asyncio.wrap_future(future)


async def _shielded(future: Future[T]) -> T:
    """Await a thread's work that must run even if the awaiting task is cancelled (a
    rollback, a commit): a cancel stops the wait, never the work."""
    import asyncio

    return await asyncio.shield(asyncio.wrap_future(future))


def _abandon(manager: Any, entering: Future[Any], exc: BaseException) -> None:
    """Roll back a transaction whose opener stopped waiting for it (the task was
    cancelled): on the transaction's thread, after it was opened, if it was."""
    if entering.cancelled() or entering.exception() is not None:
        return
    try:
        manager.__exit__(type(exc), exc, exc.__traceback__)
    except BaseException:
        log.exception("a cancelled ctx.transaction_async() could not be rolled back")


def _check_amount(value: object, name: str) -> None:
    if not is_number(value):
        raise ConfigurationError(f"ctx.progress({name}=...) must be a finite number, got {value!r}")
    if value < 0:
        raise ConfigurationError(f"ctx.progress({name}=...) must be >= 0, got {value!r}")
