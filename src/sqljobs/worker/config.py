"""Worker settings, checked before a worker starts."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import ConfigurationError
from ..validate import is_whole, parse_size


@dataclass(frozen=True)
class WorkerConfig:
    """How a worker process runs.

    ``drain_timeout`` bounds the wait for in-flight jobs at shutdown; it must be shorter
    than the shortest lease of the tasks the worker runs (the App's ``default_lease`` counts
    only through tasks that took it), so held jobs are released before anyone could reap
    them.
    ``heartbeat=False`` stops lease renewal (for demonstrating what a lease alone does).
    ``supervisor_pid``, set by ``--processes``, makes the worker drain and exit if its
    supervisor dies, instead of living on as an orphan.
    ``change_check_interval`` is how often an idle SQLite worker looks at the database's
    change counter (no table access); PostgreSQL pushes changes with LISTEN/NOTIFY instead.
    ``poll_interval`` (jittered by 10%) is the fallback look for what no change signal
    announces: an idle worker asks when the next job and the next schedule fall due (one
    read), a busy one claims. ``prefetch`` jobs are claimed beyond ``concurrency`` so threads
    never wait on the database (default: adapted to the jobs' run time, from none for long
    jobs up to ``8 * concurrency`` per claim lane for very short ones); at shutdown the
    ones not started are handed back at once.
    ``claim_lanes`` is how many claim round trips may be in flight at once, each on its
    own connection (default: the backend's choice, 2 on PostgreSQL, 1 on SQLite, which has
    one writer).
    ``scheduler`` runs the periodic-schedule service in this worker (every worker may: one
    run per tick however many do). It reads the schedule table when the next tick falls
    due, every ``poll_interval`` unless the idle poll's answer said when that is, and
    after another connection committed (a schedule may have been added) but then at most
    once per ``schedule_interval``. A tick more than
    ``misfire_grace`` seconds late counts as missed, and the schedule's misfire policy
    applies.
    ``cancel_grace`` is how long a cancelled thread handler may go on before it is called
    stuck: logged, and under ``--processes`` the worker process drains its other jobs and
    is replaced, which ends the handler (a thread cannot be stopped any other way).
    ``max_tasks_per_process`` and ``max_memory_per_process`` (bytes, or a size such as
    ``"512MB"``; stored as bytes) recycle a process under ``--processes``: once it has run
    that many jobs, or its resident set size is over that, it stops claiming, drains and
    is replaced by its supervisor.
    """

    concurrency: int = 8
    queues: tuple[str, ...] | None = None
    drain_timeout: float | None = None
    heartbeat: bool = True
    poll_interval: float = 5.0
    change_check_interval: float = 0.002
    reap_interval: float | None = None
    prune_interval: float = 60.0
    max_crashes: int = 3
    prefetch: int | None = None
    claim_lanes: int | None = None
    worker_id: str | None = None
    install_signal_handlers: bool = True
    synchronous: str = "NORMAL"
    supervisor_pid: int | None = None
    scheduler: bool = True
    schedule_interval: float = 1.0
    misfire_grace: float = 2.0
    cancel_grace: float = 30.0
    max_tasks_per_process: int | None = None
    max_memory_per_process: int | str | None = None

    def __post_init__(self) -> None:
        if not is_whole(self.concurrency, 1):
            raise ConfigurationError(f"concurrency must be >= 1, got {self.concurrency}")
        if self.prefetch is not None and not is_whole(self.prefetch, 0):
            raise ConfigurationError(f"prefetch must be >= 0, got {self.prefetch}")
        if self.claim_lanes is not None and not is_whole(self.claim_lanes, 1):
            raise ConfigurationError(f"claim_lanes must be >= 1, got {self.claim_lanes}")
        if self.poll_interval <= 0 or self.change_check_interval <= 0:
            raise ConfigurationError("poll_interval and change_check_interval must be > 0")
        if self.drain_timeout is not None and self.drain_timeout < 0:
            raise ConfigurationError(f"drain_timeout must be >= 0, got {self.drain_timeout}")
        if self.schedule_interval <= 0 or self.misfire_grace < 0:
            raise ConfigurationError("schedule_interval must be > 0 and misfire_grace >= 0")
        if not self.cancel_grace > 0:
            raise ConfigurationError(f"cancel_grace must be > 0 seconds, got {self.cancel_grace}")
        if self.max_tasks_per_process is not None and not is_whole(self.max_tasks_per_process, 1):
            raise ConfigurationError(
                "max_tasks_per_process must be a whole number >= 1, got "
                f"{self.max_tasks_per_process!r}"
            )
        if self.max_memory_per_process is not None:
            size = parse_size(self.max_memory_per_process, "max_memory_per_process")
            object.__setattr__(self, "max_memory_per_process", size)  # frozen: normalised once
        if not is_whole(self.max_crashes, 1):
            raise ConfigurationError(f"max_crashes must be >= 1, got {self.max_crashes}")

    def checked_drain_timeout(self, shortest_lease: float) -> float:
        """The drain timeout to use, refusing one that is not shorter than every lease."""
        if self.drain_timeout is None:
            return min(10.0, shortest_lease / 2)
        if self.drain_timeout >= shortest_lease:
            raise ConfigurationError(
                f"drain_timeout {self.drain_timeout:g} s is not shorter than the shortest "
                f"lease of this worker's tasks, {shortest_lease:g} s: jobs still held at the "
                "end of the drain could already have been reaped and re-run; lower "
                "drain_timeout or raise that task's lease"
            )
        return self.drain_timeout
