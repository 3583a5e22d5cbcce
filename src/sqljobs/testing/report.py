"""What :func:`~sqljobs.testing.run_until_empty` saw: every attempt that ended, and what
each job came to."""

from __future__ import annotations

from dataclasses import dataclass

from ..jobs import Job


@dataclass(frozen=True)
class Attempt:
    """One attempt that ended: ``state`` is where it left the job (``done``, ``pending``
    for a retry, ``dead``, ``cancelled``); ``error`` what the handler raised, if it did."""

    job_id: int
    task: str
    attempt: int
    state: str
    error: str | None


@dataclass(frozen=True)
class JobRun:
    """One job as the drain left it: its last state, how many attempts it has had, and the
    error of its last attempt (None when it succeeded)."""

    id: int
    task: str
    state: str
    attempts: int
    error: str | None


@dataclass(frozen=True)
class DrainReport:
    """What one drain ran, in order (each job's attempts in attempt order, whatever order
    the worker reported them in), and what it left: ``pending`` are the jobs still
    waiting, for a time the drain did not reach (no controllable clock, or past
    ``until``) or in a paused queue;
    ``advanced`` is how far it moved the test clock, in seconds."""

    attempts: tuple[Attempt, ...]
    pending: tuple[Job, ...]
    advanced: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "attempts", _each_job_in_order(self.attempts))

    @property
    def jobs(self) -> dict[int, JobRun]:
        """Every job that ran, by id, as its last attempt left it."""
        runs: dict[int, JobRun] = {}
        for a in self.attempts:
            runs[a.job_id] = JobRun(a.job_id, a.task, a.state, a.attempt, a.error)
        return runs

    def job(self, job_id: int) -> JobRun:
        """The job ``job_id`` as the drain left it; KeyError naming what ran if it did not."""
        try:
            return self.jobs[job_id]
        except KeyError:
            ran = ", ".join(f"{r.id} ({r.task})" for r in self.jobs.values()) or "none"
            raise KeyError(
                f"job {job_id} did not run in this drain; jobs that ran: {ran}"
            ) from None

    @property
    def done(self) -> int:
        """Jobs that ended ``done``."""
        return sum(1 for r in self.jobs.values() if r.state == "done")

    @property
    def dead(self) -> int:
        """Jobs that ended ``dead``."""
        return sum(1 for r in self.jobs.values() if r.state == "dead")

    @property
    def failed(self) -> int:
        """Attempts whose handler failed (retried or dead)."""
        return sum(1 for a in self.attempts if a.error is not None)

    @property
    def errors(self) -> list[str]:
        """Every failed attempt, as ``job 3 (send) attempt 1: ValueError: ...``."""
        return [
            f"job {a.job_id} ({a.task}) attempt {a.attempt}: {a.error}"
            for a in self.attempts
            if a.error is not None
        ]

    def __str__(self) -> str:
        """A summary, then the last attempts (a failing test's message, kept short)."""
        lines = [f"{len(self.attempts)} attempts: {self.done} done, {self.dead} dead, "
                 f"{self.failed} failed; {len(self.pending)} left pending"]  # fmt: skip
        shown = self.attempts[-_SHOWN:]
        if len(self.attempts) > len(shown):
            lines.append(f"  ... {len(self.attempts) - len(shown)} earlier attempts")
        lines += [f"  job {a.job_id} ({a.task}) attempt {a.attempt}: {a.state}"
                  + (f" ({a.error})" if a.error else "") for a in shown]  # fmt: skip
        return "\n".join(lines)


_SHOWN = 30  # attempts a report's text lists


def _each_job_in_order(attempts: tuple[Attempt, ...]) -> tuple[Attempt, ...]:
    """``attempts`` with each job's own in attempt order, in the places its attempts held:
    a worker's two claim lanes may report a retry's next attempt before the attempt that
    scheduled it (the other lane claimed the retry as soon as it was committed)."""
    by_job: dict[int, list[Attempt]] = {}
    for a in attempts:
        by_job.setdefault(a.job_id, []).append(a)
    turns = {job_id: iter(sorted(runs, key=lambda a: a.attempt)) for job_id, runs in by_job.items()}
    return tuple(next(turns[a.job_id]) for a in attempts)
