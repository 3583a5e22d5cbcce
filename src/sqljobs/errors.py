"""Errors raised by sqljobs, and the control-flow signals a task may raise.

SqljobsError
 ├── ConfigurationError      bad URL, option or worker setting, found at definition time
 │    └── UnknownTask         enqueue by a task name that nothing has registered
 ├── PayloadError            arguments that are not JSON, or a stored payload that won't decode
 │    └── PayloadTooLarge     an encoded payload bigger than the app's ``max_payload``
 ├── JobNotFound             no job with that id
 ├── JobFailed               a job waited on ended ``dead`` (carries its last error)
 ├── JobCancelled            a job waited on was cancelled; or, in a handler, its own job
 ├── ResultTimeout           ``handle.result(timeout=...)`` ran out first (a TimeoutError)
 ├── ScheduleNotFound        no schedule with that name
 ├── LeaseLost               this worker no longer holds the job; its writes were rolled back
 ├── WorkflowChanged         a workflow's replay met another step than its history holds
 ├── BackendError            the database refused or could not be reached (``__cause__`` kept)
 └── DrainIncomplete         a test's ``run_until_empty()`` timed out or hit ``max_jobs`` (an
                             AssertionError: a test fails on it)

JobSignal                    raised by a task to choose its outcome; not an error
 ├── RetryLater              run again after ``delay`` seconds (counts as an attempt)
 └── Discard                 give up now: the job ends ``dead`` with the reason
      ├── EffectUncertain     an external effect may have happened: never called blindly
      │                       again (see sqljobs.perform_once)
      └── StepFailed          a workflow step failed on every attempt its ``retry=`` gave it
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .testing.report import DrainReport


class SqljobsError(Exception):
    """Base of every error sqljobs raises."""


class ConfigurationError(SqljobsError, ValueError):
    """A URL, option or setting is invalid; raised where it was given."""


class UnknownTask(ConfigurationError):
    """An enqueue or schedule names a task that neither this App nor any worker of its
    database has registered: most often a typo, which would otherwise be stored and fail
    in a worker hours later. ``task`` is the name; ``suggestions`` the close matches."""

    def __init__(self, message: str, task: str = "", suggestions: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.task = task
        self.suggestions = suggestions


class PayloadError(SqljobsError, ValueError):
    """Arguments cannot be stored as JSON, or a stored payload cannot be decoded."""


class PayloadTooLarge(PayloadError):
    """An encoded payload exceeds the app's ``max_payload``: a queue row is no place for
    bulk data (every claim reads it); pass a reference and load the data in the task."""


class JobNotFound(SqljobsError, LookupError):
    """No job has the given id."""


class JobFailed(SqljobsError):
    """``handle.result()`` found the job ``dead``: ``error`` is its last error and
    ``state`` its state, so a caller can report what went wrong without another query."""

    def __init__(self, job_id: int, task: str, state: str, error: str | None) -> None:
        super().__init__(f"job {job_id} ({task}) ended {state}: {error or 'no error recorded'}")
        self.job_id = job_id
        self.task = task
        self.state = state
        self.error = error


class JobCancelled(SqljobsError):
    """The job was cancelled. ``handle.result()`` raises it for a cancelled job; inside a
    handler, ``ctx.check_cancelled()`` raises it so the handler stops where it stands."""

    def __init__(self, job_id: int, task: str) -> None:
        super().__init__(f"job {job_id} ({task}) was cancelled")
        self.job_id = job_id
        self.task = task


class ResultTimeout(SqljobsError, TimeoutError):
    """``handle.result(timeout=...)`` waited that long and the job had not ended; the job
    goes on (waiting never changes a job)."""


class ScheduleNotFound(SqljobsError, LookupError):
    """No schedule has the given name."""


class BackendError(SqljobsError):
    """The database failed; the driver's exception is kept as ``__cause__``."""


class DrainIncomplete(SqljobsError, AssertionError):
    """``sqljobs.testing.run_until_empty()`` could not finish: its timeout passed, or more
    than ``max_jobs`` attempts ran (a task that enqueues itself forever). ``report`` holds
    what did run."""

    def __init__(self, message: str, report: DrainReport) -> None:
        super().__init__(f"{message}\n{report}")
        self.report = report


class JobSignal(Exception):
    """Base for exceptions a task raises on purpose to pick its outcome."""


class RetryLater(JobSignal):
    """Ask for another attempt after ``delay`` seconds, whatever the retry policy says."""

    def __init__(self, delay: float, reason: str = "retry requested by the task") -> None:
        if delay < 0:
            raise ConfigurationError(f"RetryLater delay must be >= 0, got {delay!r}")
        super().__init__(reason)
        self.delay = float(delay)
        self.reason = reason


class Discard(JobSignal):
    """Give up on this job now; it ends ``dead`` with ``reason`` and is not retried."""

    def __init__(self, reason: str = "discarded by the task") -> None:
        super().__init__(reason)
        self.reason = reason


class LeaseLost(SqljobsError):
    """This worker no longer holds the job (its lease expired and the job moved on).

    Raised by ``ctx.transaction()`` when the fenced completion finds the job taken over:
    the transaction is rolled back, so the handler's writes never happen twice.
    """


class EffectUncertain(Discard):
    """The effect may already have happened and nothing can tell: the job ends ``dead``
    instead of being retried into a second charge (see :func:`sqljobs.perform_once`)."""


class WorkflowChanged(SqljobsError):
    """A workflow's replay met a different step than its history holds at the same
    position: its code changed under a running workflow. The attempt fails and the job
    keeps its history, for an operator to decide (retry with the new code, or cancel).
    ``position`` is the step's place; ``recorded`` and ``found`` the two names."""

    def __init__(self, job_id: int, position: int, recorded: str, found: str) -> None:
        super().__init__(
            f"workflow {job_id} changed: its history holds step {recorded!r} at position "
            f"{position}, where the code now takes {found!r}; deterministic replay needs the "
            "steps in the same order (see docs/workflows.md on changing a running workflow)"
        )
        self.job_id = job_id
        self.position = position
        self.recorded = recorded
        self.found = found


class StepFailed(Discard):
    """A workflow step with its own ``retry=`` failed on every attempt it was given: the
    workflow ends ``dead`` (its own retries would only replay the failure), unless it
    catches this. ``step`` is the step's name, ``error`` its last error."""

    def __init__(self, step: str, attempts: int, error: str) -> None:
        super().__init__(f"step {step!r} failed {attempts} time(s): {error}")
        self.step = step
        self.attempts = attempts
        self.error = error
