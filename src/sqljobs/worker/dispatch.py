"""Dispatch and outcomes: hand a claimed job to a thread or the event loop, collect what
handlers return, and write the outcomes (carried by the next claim when one is going)."""

from __future__ import annotations

import logging
import time
from collections.abc import Collection
from dataclasses import replace
from typing import Any

from ..backends.base import Backend
from ..context import JobContext
from ..errors import PayloadError
from ..jobs import ClaimedJob, HeldJob, JobState, Outcome
from ..payload import decode
from ..rollup import AttemptOutcome
from .events import EventKind
from .execute import Running, failure, result_encoder
from .lanes import Trip
from .metering import attempt_outcome, tally
from .report import failed_attempt, job_fields
from .state import Sample, WorkerState
from .timers import Timers

log = logging.getLogger("sqljobs.worker")


class Dispatching(WorkerState):
    def _dispatch(self, backend: Backend, job: ClaimedJob, prefetched: bool = False) -> None:
        """Hand one claimed job (counted as ``claimed`` by the caller) to a thread or the
        event loop, or queue its failure if it cannot run here."""
        if self._on_event is not None:
            self._event("claimed", job, detail="buffered" if prefetched else None)
        wall = self.app.clock()
        task = self.app.tasks.get(job.task)
        ctx = JobContext(
            job, backend, self.request_heartbeat, self._progress_reported, result_encoder(task)
        )
        if self._stopping:
            ctx.shutting_down = True
        try:
            args, kwargs = decode(job.payload)
        except PayloadError as exc:
            entry = {
                "attempt": job.attempt,
                "outcome": "undecodable",
                "error": str(exc),
                "started_at": wall,
                "ended_at": wall,
                "worker": self.id,
            }
            self._to_write.append(
                Outcome(job.id, job.token, JobState.DEAD, error=str(exc), history=entry)
            )
            self._finishing[job.id, job.token] = job
            self._metered[job.id, job.token] = job, None, None
            log.error("job %s: %s", job.id, exc)
            return
        if task is None:
            from ..tasks import Task

            stand_in = Task(
                self.app,
                _unregistered,
                name=job.task,
                queue=job.queue,
                lease=job.lease,
                retry=self.app.default_retry,
                priority=0,
                timeout=None,
            )
            run = Running(job, stand_in, ctx, args, kwargs, wall, worker=self.id, rng=self.rng)
            error = LookupError(f"task {job.task!r} is not registered here (worker {self.id})")
            self._to_write.append(failure(run, error, wall))
            self._finishing[job.id, job.token] = job
            self._metered[job.id, job.token] = job, None, None
            log.error("job %s: %s", job.id, error)
            return
        run = Running(
            job, task, ctx, args, kwargs, wall, prefetched=prefetched, worker=self.id, rng=self.rng
        )
        if task.timeout is not None:
            run.deadline = run.started + task.timeout
        self.inflight[job.id] = run
        if task.is_async:
            assert self._async is not None
            self._async.submit(run)
        else:
            assert self._threads is not None
            self._threads.submit(run)

    def _progress_reported(self, ctx: JobContext) -> None:
        """Called by a handler's thread (``ctx.progress``): the report waits for the next
        flush, at most a few a second (see Upkeep._flush_progress)."""
        with self._progress_lock:
            self._progress_dirty.add(ctx.job_id)
            first, self._progress_signalled = not self._progress_signalled, True
        if first:
            self._wake.set()

    def _started(self, run: Running) -> None:
        """Called by an executor thread (or the event loop) as a handler begins."""
        self._event("started", run.job)

    def _report(self, run: Running, outcome: Outcome) -> None:
        """Called by executor threads when a handler returns. A wake-up already set covers
        this result too: the coordinator clears it before it takes the results, never
        after. Setting it again costs a lock and a notify per job, in the threads that
        share the interpreter with the coordinator."""
        self._results.append((run, outcome))
        if not self._wake.is_set():
            self._wake.set()

    def _collect(self) -> bool:
        """Take what handlers returned: free their slots and queue their outcomes for the
        next round trip. True if a slot was freed."""
        freed = False
        finished = 0
        results, abandoned = self._results, self._abandoned
        while results:
            run, outcome = results.popleft()
            if run in abandoned:
                abandoned.discard(run)
                freed = True  # its thread is free again
            if run.closed:
                if self._holds:
                    self._handler_ended(run)
                self._late_result(run, outcome)
                continue
            run.closed = True
            self.inflight.pop(run.job.id, None)
            freed = True
            finished += 1
            job, begun = run.job, run.begun
            if begun is not None:
                took = time.monotonic() - begun
                self.runtime = took if self.runtime is None else 0.8 * self.runtime + 0.2 * took
                # tallied once its outcome is written (see _account); as metering.sample()
                # says, inlined: this runs per job
                due = job.run_at if job.run_at > job.created_at else job.created_at
                taken: Sample = job, took, run.started_wall + (begun - run.started) - due
            else:
                taken = job, None, None
            if run.ctx.completed_in_transaction:
                self.counters[JobState.DONE.value] += 1
                tally(self._meter, taken, AttemptOutcome.DONE, self.app.clock())
                self._event("finished", run.job, JobState.DONE.value)
                continue
            attempt = outcome.job_id, outcome.token  # (a retry's next attempt may be
            # collected before this one's outcome is written: another lane claimed it)
            self._metered[attempt] = taken
            if self._on_event is not None:  # "finished" once it is written
                self._finishing[attempt] = run.job
            if outcome.state is not JobState.DONE:
                failed_attempt(run, outcome)
            report = run.ctx.take_progress()
            if report is not None:  # the last report goes out with the outcome
                outcome = replace(outcome, progress=report)
            self._to_write.append(outcome)
        if finished:
            self.counters["finished"] += finished
        return freed

    def _late_result(self, run: Running, outcome: Outcome) -> None:
        """A handler returned for a job this worker no longer holds: its outcome is
        discarded (the job was cancelled, timed out, or its lease lost)."""
        if run.begun is None:
            return  # given up before a thread started it: nothing ran
        self.counters["stale_results"] += 1
        self._event("discarded", run.job, outcome.state.value,
                    "late result: the job is no longer held here")  # fmt: skip
        if run.ctx.cancelled:
            log.info(
                "job %s (%s): the handler returned %.1f s after the job was "
                "cancelled; its outcome (%s) is discarded",
                run.job.id, run.job.task,
                time.monotonic() - (run.cancelled_at or time.monotonic()),
                outcome.state, extra=job_fields(run),
            )  # fmt: skip
            return
        log.warning(
            "job %s: late result of attempt %s discarded (%s): the job is no "
            "longer held by this worker",
            run.job.id,
            run.job.attempt,
            outcome.state,
        )

    def _write_outcomes(self, backend: Backend, t: Timers | None = None) -> None:
        """Outcomes no claim carried go out once no round trip is in flight (one in flight
        takes them on its return, in the next claim: write-only trips beside claims only
        cost commits), with the question of when to look again if a short batch raised it
        (once that batch's jobs have begun, see DUE_QUESTION_HOLD: outcomes that came
        meanwhile wait the moment with it, rather than take a round trip of their own)."""
        assert self._lanes is not None
        if t is not None and t.want_due and self._due_question_wait(t):
            return
        ask_due = t is not None and t.want_due
        if not (self._to_write or ask_due) or self._lanes.busy:  # (flips of `prefetched`
            # wait for the next trip: until then a crash blames no buffered job)
            return
        if t is not None:
            t.want_due = False
        if ask_due:
            self.counters["due_checks"] += 1
        batch, self._to_write = self._to_write, []
        trip = Trip(batch, 0, ask_due=ask_due, started=self._began_since())
        self._lanes.send(trip, inline=not self.inflight)
        self._take_trips(backend, t)

    def _account(self, batch: list[Outcome], written: Collection[int], t: Timers | None) -> None:
        """Count what was written, log what was discarded, wake for our own retries."""
        wall = self.app.clock()
        written = set(written)  # a backend may answer with a list: one lookup per outcome
        finishing = self._finishing  # filled only for events and unusual ends
        metered, meter = self._metered, self._meter
        done_state = JobState.DONE
        done = 0
        completed: list[Sample] = []  # tallied for the metrics rollup in one call
        for outcome in batch:
            job_id, state = outcome.job_id, outcome.state
            attempt = job_id, outcome.token
            if outcome.hold:  # the row holds the slot now; or its handler ended meanwhile
                if attempt in self._ended_holds:
                    self._ended_holds.discard(attempt)
                    self._unhold.append(HeldJob(*attempt))
                elif attempt in self._holds:
                    self._holds[attempt] = True
            job = finishing.pop(attempt, None) if finishing else None
            taken = metered.pop(attempt, None)
            if job_id not in written:
                self.counters["stale_results"] += 1
                if job is not None:
                    self._event("discarded", job, state.value,
                                         "no longer held when written")  # fmt: skip
                log.warning(
                    "job %s: outcome %s discarded: the job is no longer held by this "
                    "worker (lease lost or cancelled)",
                    job_id,
                    state,
                )
                continue
            if state is done_state:
                if taken is not None:
                    completed.append(taken)
                if job is None:
                    done += 1  # the common case: counted once for the batch
                    continue
            elif taken is not None:  # the attempt's end, for the metrics rollup
                counted = attempt_outcome(outcome)
                if counted is not None:
                    meter.attempt(taken[0].queue, taken[0].task, counted, wall, taken[1], taken[2])
            self.counters[state.value] += 1
            if job is not None:
                kind: EventKind = "released" if outcome.uncharge else "finished"
                self._event(kind, job, outcome.state.value, outcome.error)
            if outcome.state is JobState.PENDING and not outcome.uncharge:
                self.counters["retried"] += 1
            if t is not None and outcome.state is JobState.PENDING and outcome.delay is not None:
                retry_at = wall + outcome.delay  # our own retries: wake for them on time
                t.retry_due = retry_at if t.retry_due is None else min(t.retry_due, retry_at)
        if done:
            self.counters[JobState.DONE.value] += done
        if completed:
            meter.attempts(completed, AttemptOutcome.DONE, wall)


def _unregistered(*_args: Any, **_kwargs: Any) -> None:
    """Stand-in for a task this worker does not have."""
