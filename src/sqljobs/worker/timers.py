"""When the coordinator next does each of its periodic duties."""

from __future__ import annotations

from dataclasses import dataclass

from .config import WorkerConfig

SCHEDULE_ANSWER_HOLDS = 2
"""How many poll intervals a next_due answer about the schedules stands in for the
scheduler's own fallback pass. An idle worker asks every poll interval, so while it idles
its scheduler reads the schedule table only when a tick falls due or another connection
commits; a busy worker (full claims, no such question) is back on its own fallback pass
within this many intervals."""

FIRST_LOOK = 0.05
"""Seconds after start-up before a worker first looks for jobs from crashed workers and
for limited jobs its code lacks (two statements): its first claim, which neither could
change, goes first."""


@dataclass
class Timers:
    """When the coordinator next does each of its periodic duties (monotonic seconds,
    except ``due``, the wall-clock time the next delayed job falls due as the database last
    said, and ``retry_due``, when the earliest retry this worker wrote since falls due).
    The scheduler passes at its next tick, when another connection committed (at most every
    ``schedule_interval``, since a schedule may have been added) and every poll interval."""

    heartbeat: float
    reap: float
    prune: float
    schedule: float
    schedule_last: float
    schedule_marker: int | None
    poll: float
    suspect_check: float
    heartbeat_interval: float
    due: float | None = None
    retry_due: float | None = None
    marker: int | None = None
    local_marker: int = 0  # the App's count of its own process's wake-ups, last seen
    want_claim: bool = True
    want_due: bool = False
    due_hold: float = 0.0  # a short batch's question waits for its jobs' start until then
    polled: bool = False  # the due question in flight is the fallback poll's
    progress: float = 0.0  # the next flush of ctx.progress() reports may go out then
    wall: float | None = None  # the App's clock at the last pass (to notice it jumping)
    wall_at: float = 0.0  # and the monotonic time it was read

    def __init__(self, now: float, heartbeat_interval: float, config: WorkerConfig) -> None:
        self.heartbeat = now + heartbeat_interval  # registering was the first
        self.reap = now
        self.prune = now + config.prune_interval
        self.schedule = now
        self.schedule_last = now
        self.schedule_marker = None
        self.poll = now
        self.suspect_check = now + FIRST_LOOK
        self.heartbeat_interval = heartbeat_interval
        self.due = None
        self.retry_due = None
        self.marker = None
        self.local_marker = 0
        self.want_claim = True
        self.want_due = False
        self.due_hold = now
        self.polled = False
        self.progress = now
        self.wall = None
        self.wall_at = now

    def schedules_read(self, now: float, wall: float, at: float | None, poll: float) -> None:
        """next_due read, at ``wall`` (the App's clock) and ``now`` (monotonic), that the
        earliest schedule falls due at ``at`` (None: there is none): the scheduler's next
        pass is then, or after ``SCHEDULE_ANSWER_HOLDS`` poll intervals, not sooner. (An
        answer read before a concurrent pass can only be early: one spare pass. A schedule
        saved afterwards is announced, and the marker brings the pass forward.)"""
        hold = SCHEDULE_ANSWER_HOLDS * poll
        self.schedule = now + (hold if at is None else min(hold, max(0.0, at - wall)))
