"""The completer: what handlers return, on its way to the database.

Executor threads hand it each run's outcome (:meth:`Completer.report`); the coordinator
collects them (freeing their slots) into a buffer that the producer's next round trip
carries, with its claim when one is going; once written, the completer counts them,
tells the events and tallies the metrics. It also keeps the slots that the rows of
given-up jobs hold while their threads run on, and writes the hand-backs of jobs the
worker lets go of unfinished.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable, Collection
from dataclasses import replace

from ..backends.base import Backend
from ..errors import BackendError
from ..jobs import ClaimedJob, HeldJob, JobState, Outcome
from ..rollup import AttemptOutcome, Meter
from .events import Emitter, EventKind
from .execute import Running
from .holding import Holding
from .log_lines import failed_attempt, job_fields
from .metering import Sample, attempt_outcome, tally

log = logging.getLogger("sqljobs.worker")


class Completer:
    """Collects handlers' outcomes, buffers them for the next round trip, accounts for
    them once written, and tracks slots held for handlers that run on after their job
    left ``running``. ``runtime`` is the moving average of handler run time (seconds),
    which sizes the producer's claims."""

    def __init__(
        self,
        *,
        worker_id: str,
        clock: Callable[[], float],
        holding: Holding,
        counters: collections.Counter[str],
        meter: Meter,
        wake: threading.Event,
        emit: Emitter,
    ) -> None:
        self._worker_id = worker_id
        self._clock = clock
        self._held = holding
        self.inflight = holding.inflight
        self.counters = counters
        self._meter = meter
        self._wake = wake
        self._emit = emit
        self._on_event = emit.on_event
        self.runtime: float | None = None
        self._results: collections.deque[tuple[Running, Outcome]] = collections.deque()
        self._to_write: list[Outcome] = []
        # by (job id, token): attempts whose outcome awaits writing, for the event (filled
        # only when someone listens, and for unusual ends)
        self._finishing: dict[tuple[int, int], ClaimedJob] = {}
        # by (job id, token): finished attempts whose outcome awaits writing, to tally
        self.metered: dict[tuple[int, int], Sample] = {}
        # (id, token) of thread handlers that run on after their job left `running`
        # (cancelled, timed out): True once the row holds the slot
        self._holds: dict[tuple[int, int], bool] = {}
        self._ended_holds: set[tuple[int, int]] = set()  # returned while their timeout's
        # outcome was on its way
        self._unhold: list[HeldJob] = []  # their handlers ended: the slots go free

    # -- from the handlers ---------------------------------------------------------------

    def report(self, run: Running, outcome: Outcome) -> None:
        """Called by executor threads when a handler returns. A wake-up already set covers
        this result too: the coordinator clears it before it takes the results, never
        after. Setting it again costs a lock and a notify per job, in the threads that
        share the interpreter with the coordinator."""
        self._results.append((run, outcome))
        if not self._wake.is_set():
            self._wake.set()

    @property
    def returned(self) -> bool:
        """Handlers returned since the last :meth:`collect`."""
        return bool(self._results)

    def collect(self) -> bool:
        """Take what handlers returned: free their slots and queue their outcomes for the
        next round trip. True if a slot was freed."""
        freed = False
        finished = 0
        results, abandoned = self._results, self._held.abandoned
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
                # tallied once its outcome is written (see account); as metering.sample()
                # says, inlined: this runs per job
                due = job.run_at if job.run_at > job.created_at else job.created_at
                taken: Sample = job, took, run.started_wall + (begun - run.started) - due
            else:
                taken = job, None, None
            if run.ctx.parked:  # a workflow wrote its own park
                self.counters["parked"] += 1
                tally(self._meter, taken, AttemptOutcome.PARKED, self._clock())
                self._emit("parked", run.job, JobState.WAITING.value)
                continue
            if run.ctx.completed_in_transaction:
                self.counters[JobState.DONE.value] += 1
                tally(self._meter, taken, AttemptOutcome.DONE, self._clock())
                self._emit("finished", run.job, JobState.DONE.value)
                continue
            attempt = outcome.job_id, outcome.token  # (a retry's next attempt may be
            # collected before this one's outcome is written: another lane claimed it)
            self.metered[attempt] = taken
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
        self._emit("discarded", run.job, outcome.state.value,
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

    # -- the buffer ----------------------------------------------------------------------

    def queue(self, outcome: Outcome, job: ClaimedJob, taken: Sample | None) -> None:
        """Buffer the outcome of an attempt that ended without a handler's return (its
        payload undecodable, its task unknown here, its timeout passed)."""
        self._to_write.append(outcome)
        self._finishing[outcome.job_id, outcome.token] = job
        if taken is not None:
            self.metered[outcome.job_id, outcome.token] = taken

    def hand_back(self, jobs: list[ClaimedJob]) -> None:
        """Jobs a claim brought back as the stop came: never started, handed back."""
        wall = self._clock()
        for job in jobs:
            self._to_write.append(
                handed_back(job, "released_unstarted", self._worker_id, wall, wall)
            )
            self._finishing[job.id, job.token] = job  # "released" once written

    @property
    def buffered(self) -> bool:
        """Outcomes wait to be written."""
        return bool(self._to_write)

    def take(self) -> list[Outcome]:
        """The buffered outcomes, for a round trip to carry."""
        batch, self._to_write = self._to_write, []
        return batch

    def carry_back(self, outcomes: list[Outcome]) -> None:
        """A round trip wrote nothing: its outcomes go first in the next one."""
        self._to_write = outcomes + self._to_write

    def waiting(self) -> list[HeldJob]:
        """The jobs whose outcome waits to be written (the database was unreachable when
        their handlers returned): still ours, so the heartbeat renews them too."""
        return [HeldJob(o.job_id, o.token) for o in self._to_write]

    def account(self, batch: list[Outcome], written: Collection[int]) -> float | None:
        """Count what was written, log what was discarded; return when the earliest of our
        own retries written here falls due (the App's clock; None: no retry)."""
        wall = self._clock()
        written = set(written)  # a backend may answer with a list: one lookup per outcome
        finishing = self._finishing  # filled only for events and unusual ends
        metered, meter = self.metered, self._meter
        done_state = JobState.DONE
        done = 0
        retry_due: float | None = None
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
                    self._emit("discarded", job, state.value, "no longer held when written")
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
                self._emit(kind, job, outcome.state.value, outcome.error)
            if outcome.state is JobState.PENDING and not outcome.uncharge:
                self.counters["retried"] += 1
            if outcome.state is JobState.PENDING and outcome.delay is not None:
                retry_at = wall + outcome.delay  # our own retries: wake for them on time
                retry_due = retry_at if retry_due is None else min(retry_due, retry_at)
        if done:
            self.counters[JobState.DONE.value] += done
        if completed:
            meter.attempts(completed, AttemptOutcome.DONE, wall)
        return retry_due

    # -- slots held for handlers that run on ---------------------------------------------

    def hold_for_cancelled(self, run: Running) -> None:
        """A cancelled run: a thread may run it on, so the row holds its slot until then;
        an async task is cancelled at its next await, so the slot goes free now."""
        attempt = run.job.id, run.job.token
        if run.future is None:
            self._holds[attempt] = True
        else:
            self._unhold.append(HeldJob(*attempt))

    def timed_out(self, run: Running, outcome: Outcome, taken: Sample) -> Outcome:
        """Buffer a timed-out run's failure; a thread that runs on keeps its slot, held by
        the row once the outcome is written. Returns the outcome as buffered."""
        if run.future is None:  # its thread runs on: the row keeps holding its slot
            outcome = replace(outcome, hold=True)
            self._holds[outcome.job_id, outcome.token] = False  # (once written)
        self.queue(outcome, run.job, taken)
        return outcome

    def kept_slots(self) -> list[HeldJob]:
        """The rows that hold a slot for a handler still running: renewed by the heartbeat."""
        return [HeldJob(*attempt) for attempt, holding in self._holds.items() if holding]

    def free_slots(self, backend: Backend) -> bool:
        """Free the slots held for handlers that have ended since (one statement); True if
        there were any."""
        if not self._unhold:
            return False
        end, self._unhold = self._unhold, []
        try:
            backend.hold_slots((), end)
        except Exception:
            self._unhold = end + self._unhold
            raise
        return True

    def _handler_ended(self, run: Running) -> None:
        """A handler given up while it ran on (cancelled, timed out) has returned, or was
        never started: the slot its job's row held is free."""
        attempt = run.job.id, run.job.token
        held = self._holds.pop(attempt, None)
        if held is None:
            return
        if held:
            self._unhold.append(HeldJob(*attempt))
            return
        for i, outcome in enumerate(self._to_write):  # its timeout's outcome, not yet sent
            if outcome.hold and (outcome.job_id, outcome.token) == attempt:
                self._to_write[i] = replace(outcome, hold=False)
                return
        self._ended_holds.add(attempt)  # on its way: freed once written (see account)

    # -- hand-backs ----------------------------------------------------------------------

    def release(self, backend: Backend, runs: list[Running], label: str) -> None:
        """Hand ``runs`` (and a suspect still waiting to run alone) back to pending, no
        attempt charged, in a statement of their own."""
        wall = self._clock()
        outcomes = []
        held = self._held
        if held.suspect is not None:
            job, held.suspect = held.suspect, None
            outcomes.append(Outcome(job.id, job.token, JobState.PENDING, delay=0.0, uncharge=True))
        for run in runs:
            run.closed = True
            self.inflight.pop(run.job.id, None)
            # taken off the thread queue, so no thread will report it: a given-up run
            # (a cancelled or lost buffered job) must not hold a slot for ever
            held.abandoned.discard(run)
            if self._holds:
                self._handler_ended(run)
            outcomes.append(handed_back(run.job, label, self._worker_id, run.started_wall, wall))
        if not outcomes:
            return
        try:
            written = backend.finish_jobs(outcomes)
        except BackendError:  # the jobs are no longer in inflight: keep their outcomes
            self._to_write = outcomes + self._to_write
            raise
        self.counters["released"] += len(written)
        for run in runs:
            if run.job.id in written:
                self._emit("released", run.job, JobState.PENDING.value, label)
        log.info("worker %s: released %d jobs it held (%s)", self._worker_id, len(written), label)


def handed_back(job: ClaimedJob, label: str, worker: str, started_at: float, now: float) -> Outcome:
    """A held job given back at shutdown: pending again at once, no attempt charged, the
    hand-back noted in its history as ``label``."""
    entry = {
        "attempt": job.attempt,
        "outcome": label,
        "started_at": started_at,
        "ended_at": now,
        "worker": worker,
    }
    return Outcome(job.id, job.token, JobState.PENDING, delay=0.0, history=entry, uncharge=True)
