"""JobContext: what a running handler may know and do about its own job."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from .errors import ConfigurationError, LeaseLost
from .jobs import ClaimedJob, JobState, Outcome

if TYPE_CHECKING:
    from .backends.base import Backend


class JobContext:
    """Passed to a task whose first parameter is annotated ``JobContext``.

    ``lease_lost`` turns True when this worker no longer holds the job (its lease expired,
    it timed out, or it was cancelled): stop early, nothing you report will be written.
    ``shutting_down`` turns True when the worker drains for shutdown.
    """

    def __init__(
        self,
        job: ClaimedJob,
        backend: Backend,
        request_heartbeat: Callable[[], None] = lambda: None,
    ) -> None:
        self.job = job
        self._backend = backend
        self._request_heartbeat = request_heartbeat
        self.lease_lost = False
        self.shutting_down = False
        self.timed_out = False
        self.completed_in_transaction = False
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

    @contextmanager
    def transaction(self) -> Iterator[Any]:
        """A DB-API connection on the queue's database, inside one transaction.

        The handler's writes and the job's completion commit together, and the completion
        is fenced: if this worker lost the job, everything rolls back and ``LeaseLost`` is
        raised. If the block raises, everything rolls back and the job is retried.
        The connection is the backend's own (sqlite3: ``?`` placeholders; psycopg: ``%s``).
        """
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
                done = Outcome(self.job_id, self.token, JobState.DONE)
                if not self._backend.finish_in_transaction(conn, done):
                    raise LeaseLost(
                        f"job {self.job_id} is no longer held by this worker (attempt "
                        f"{self.attempt}, token {self.token}): its writes were rolled back"
                    )
        except BaseException:
            self.completing = False
            raise
        self.completed_in_transaction = True
