"""The conductor: start workers and producers, make faults while they work, then check.

Faults, all at once: a random worker SIGKILLed every fraction of a second (and replaced);
every few seconds a worker that is running a job frozen (SIGSTOP) until its lease has
passed and another worker has taken the job over, then thawed (SIGCONT), so its attempt
goes on, stale, and must be refused (on SQLite one frozen worker at a time: a frozen
holder of the one write lock stops every writer); and on PostgreSQL the server restarted
(``fast`` and ``immediate``, a crash with WAL replay) and every worker connection cut with
``pg_terminate_backend``. PostgreSQL runs on a server of the run's own
(:mod:`tests.pg_cluster`), never the shared one.

Checks, once the faults stop and the work drains: every acknowledged enqueue is ``done``
(or ``dead`` because it crashed its worker too often, which the run expects and counts);
the effect table holds each job exactly once; the unguarded fenced table holds exactly one
row per done job, its completing attempt's token, and none for a job not done (a stale
attempt's commit would add one); deliveries beyond one stay within (kills + freezes +
connection cuts) x concurrency; each schedule tick ran once, none lost; nothing is left
``running``; on SQLite no producer or worker saw an error.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import math
import os
import random
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from chaos.tasks import LEASE, TICK_EVERY, prepare

ROOT = Path(__file__).resolve().parent.parent
_TICK_KEY = re.compile(r"^schedule:chaos_tick:(.+)$")
_CAUGHT_UP = re.compile(r"schedule chaos_tick: missed ticks since (\S+ \S+) UTC.*caught_up")
_WORKER = (sys.executable, "-m", "sqljobs", "--app", "chaos.tasks:app", "worker")


@dataclass(frozen=True)
class Plan:
    """What one run does. The defaults are ``make chaos``'s full run."""

    backend: str  # "sqlite" or "postgres"
    seconds: float = 60.0  # how long the producers enqueue, and the faults go on
    jobs: int = 4000
    producers: int = 3
    workers: int = 5
    concurrency: int = 3
    kill_every: float = 0.25  # mean seconds between SIGKILLs
    ripe_after: float = 0.5  # a worker is killed only this long after it said it started
    restart_every: float = 8.0  # PostgreSQL: seconds between server restarts
    cut_every: float = 5.0  # PostgreSQL: seconds between pg_terminate_backend rounds
    freeze_every: float = 3.0  # seconds between freezes of a worker that runs a job
    freeze_for: float = 2 * LEASE  # long enough for the lease to pass and the job to move on
    seed: int = 1
    settle_timeout: float = 120.0  # after the faults stop, how long the drain may take


@dataclass
class Report:
    """What a run measured, and what it found wrong (``problems``: empty is a pass)."""

    plan: Plan
    acknowledged: int = 0
    done: int = 0
    done_under_fire: int = 0
    dead_by_crashes: int = 0
    kills: int = 0
    freezes: int = 0
    restarts: int = 0
    cut_rounds: int = 0
    connections_cut: int = 0
    deliveries: int = 0
    duplicate_deliveries: int = 0
    duplicate_bound: int = 0
    duplicate_effects: int = 0
    missing_effects: int = 0
    stale_commits: int = 0
    missing_fenced: int = 0
    producer_errors: Counter[str] = field(default_factory=Counter)
    worker_error_lines: int = 0
    ticks: int = 0
    ticks_doubled: int = 0
    ticks_lost: int = 0
    ticks_merged: int = 0
    stuck_running: int = 0
    seconds: float = 0.0
    problems: list[str] = field(default_factory=list)
    scratch: str = ""

    def row(self) -> dict[str, str]:
        errors = sum(self.producer_errors.values())
        return {
            "backend": self.plan.backend,
            "jobs acked": f"{self.acknowledged:,}",
            "done": f"{self.done:,}",
            "done under fire": f"{self.done_under_fire:,}",
            "dead (crashes)": str(self.dead_by_crashes),
            "kills": str(self.kills),
            "freezes": str(self.freezes),
            "restarts": str(self.restarts),
            "conns cut": str(self.connections_cut),
            "dup deliveries": f"{self.duplicate_deliveries} (<= {self.duplicate_bound})",
            "dup effects": str(self.duplicate_effects),
            "missing effects": str(self.missing_effects),
            "stale commits": str(self.stale_commits),
            "missing fenced": str(self.missing_fenced),
            "producer errors": str(errors),
            "ticks run": str(self.ticks),
            "ticks doubled": str(self.ticks_doubled),
            "ticks lost": str(self.ticks_lost),
            "ticks merged (misfire)": str(self.ticks_merged),
            "stuck running": str(self.stuck_running),
            "time": f"{self.seconds:.1f} s",
        }


class _Fleet:
    """The worker processes: start, kill, replace, stop; each with its own log file."""

    def __init__(self, env: dict[str, str], scratch: Path, concurrency: int) -> None:
        self.env, self.scratch, self.concurrency = env, scratch, concurrency
        self.live: list[tuple[subprocess.Popen[bytes], Path]] = []
        self.logs: list[Path] = []
        self.ready_at: dict[Path, float] = {}
        self.frozen: dict[subprocess.Popen[bytes], float] = {}  # -> when to thaw it

    def start(self) -> None:
        log = self.scratch / f"worker-{len(self.logs)}.log"
        self.logs.append(log)
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [*_WORKER, "--concurrency", str(self.concurrency)],
                env=self.env,
                cwd=ROOT,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        self.live.append((proc, log))

    def _ready_since(self, log: Path) -> float | None:
        """When this worker's log first showed its start line (it claims from then on)."""
        if log not in self.ready_at and b" started on " in log.read_bytes():
            self.ready_at[log] = time.monotonic()
        return self.ready_at.get(log)

    def _ripe(self, ripe_after: float) -> list[int]:
        """The live workers, not frozen, that have been working ``ripe_after`` seconds (one
        still importing proves nothing: on a loaded machine that takes seconds); none while
        fewer than two serve, so one worker always serves, as in a rolling deploy."""
        now = time.monotonic()
        serving = [
            (i, ready)
            for i, (proc, log) in enumerate(self.live)
            if proc not in self.frozen and (ready := self._ready_since(log)) is not None
        ]
        if len(serving) < 2:
            return []
        return [i for i, ready in serving if now - ready > ripe_after]

    def kill_one(self, rng: random.Random, ripe_after: float) -> bool:
        """SIGKILL a ripe worker, then start its replacement."""
        ripe = self._ripe(ripe_after)
        if not ripe:
            return False
        proc, _ = self.live.pop(rng.choice(ripe))
        proc.kill()
        proc.wait()
        self.start()
        return True

    def freeze_one(self, rng: random.Random, running: set[int], seconds: float) -> bool:
        """SIGSTOP a serving worker whose pid is in ``running`` (it holds a running job) for
        ``seconds``: thawed, its handler goes on with a token that is no longer the job's."""
        ripe = [i for i in self._ripe(0.0) if self.live[i][0].pid in running]
        if not ripe:
            return False
        proc, _ = self.live[rng.choice(ripe)]
        proc.send_signal(signal.SIGSTOP)
        self.frozen[proc] = time.monotonic() + seconds
        return True

    def thaw(self, until: float = float("inf")) -> None:
        """SIGCONT each frozen worker due to thaw by ``until`` (by default, all)."""
        for proc, at in list(self.frozen.items()):
            if at <= until:
                proc.send_signal(signal.SIGCONT)
                del self.frozen[proc]

    def stop(self, timeout: float = 30.0) -> None:
        self.thaw()
        for proc, _ in self.live:
            proc.send_signal(signal.SIGTERM)
        for proc, _ in self.live:
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.live.clear()


class _Database:
    """The run's database: a SQLite file, or a PostgreSQL server of the run's own."""

    def __init__(self, backend: str, scratch: Path) -> None:
        self.cluster: Any = None
        if backend == "sqlite":
            self.url = f"sqlite:///{scratch / 'chaos.db'}"
        elif backend == "postgres":
            from tests.pg_cluster import PrivateCluster, available

            why_not = available()
            if why_not is not None:
                raise RuntimeError(f"the PostgreSQL chaos run needs a server of its own: {why_not}")
            self.cluster = PrivateCluster()
            self.url = self.cluster.url()
        else:
            raise ValueError(f"backend must be 'sqlite' or 'postgres', got {backend!r}")

    def epoch(self, column: str) -> str:
        """``column`` as Unix seconds: SQLite stores them so, PostgreSQL as timestamptz."""
        return column if self.cluster is None else f"extract(epoch FROM {column})::float8"

    def query(self, sql: str) -> list[tuple[Any, ...]]:
        if self.cluster is None:
            with contextlib.closing(sqlite3.connect(self.url.removeprefix("sqlite:///"))) as c:
                return c.execute(sql).fetchall()
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as conn:
            return conn.execute(sql).fetchall()

    def running_pids(self) -> set[int]:
        """The pids of the workers that hold a running job (a worker id ends
        ``-<pid>-<suffix>``)."""
        rows = self.query("SELECT DISTINCT worker FROM sqljobs_jobs WHERE state = 'running'")
        return {int(worker.rsplit("-", 2)[-2]) for (worker,) in rows if worker}

    def cut_connections(self) -> int:
        """Terminate every other backend on the database: workers and producers alike."""
        rows = self.query(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        return len(rows)

    def close(self) -> None:
        if self.cluster is not None:
            self.cluster.destroy()


def run(plan: Plan, keep: bool = False) -> Report:
    """Run ``plan`` and return its report; the scratch directory is removed unless the run
    found problems or ``keep`` is set."""
    scratch = Path(tempfile.mkdtemp(prefix=f"sqljobs-chaos-{plan.backend}-"))
    report = Report(plan=plan, scratch=str(scratch))
    db = _Database(plan.backend, scratch)
    started = time.monotonic()
    fleet: _Fleet | None = None
    producers: list[subprocess.Popen[bytes]] = []
    try:
        prepare(db.url)
        env = dict(
            os.environ,
            SQLJOBS_URL=db.url,
            CHAOS_STARTS=str(scratch / "starts.log"),
            PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p),
        )
        fleet = _Fleet(env, scratch, plan.concurrency)
        for _ in range(plan.workers):
            fleet.start()
        producers = _start_producers(plan, env, scratch)
        faults_ended = _make_faults(plan, report, fleet, producers, db)
        _settle(plan, db, scratch, faults_ended)
        fleet.stop()
        _check(plan, report, db, scratch, fleet, faults_ended)
    except Exception as exc:
        report.problems.append(f"the run itself failed: {type(exc).__name__}: {exc}")
    finally:
        report.seconds = time.monotonic() - started
        for proc in producers:  # after a failure, nothing of the run is left running
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        if fleet is not None:
            for proc, _ in fleet.live:
                proc.kill()
                proc.wait()
        db.close()
        if report.problems or keep:
            report.scratch = str(scratch)
        else:
            shutil.rmtree(scratch, ignore_errors=True)
    return report


def _start_producers(
    plan: Plan, env: dict[str, str], scratch: Path
) -> list[subprocess.Popen[bytes]]:
    share = plan.jobs // plan.producers
    procs = []
    for n in range(plan.producers):
        count = share + (plan.jobs - share * plan.producers if n == 0 else 0)
        out = scratch / f"producer-{n}.acks"
        with (scratch / f"producer-{n}.log").open("wb") as log:
            procs.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "chaos.producer",
                        f"p{n}",
                        str(count),
                        str(plan.seconds),
                        str(out),
                    ],
                    env=env,
                    cwd=ROOT,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            )
    return procs


def _make_faults(
    plan: Plan,
    report: Report,
    fleet: _Fleet,
    producers: list[subprocess.Popen[bytes]],
    db: _Database,
) -> float:
    """Faults until the producers are through and ``plan.seconds`` have passed; return
    when they ended (wall clock, as the jobs' times are)."""
    rng = random.Random(plan.seed)
    begin = time.monotonic()
    next_kill = begin + rng.expovariate(1 / plan.kill_every)
    next_freeze = begin + plan.freeze_every
    next_restart = begin + plan.restart_every
    next_cut = begin + plan.cut_every
    limit = begin + plan.seconds + plan.settle_timeout
    # a frozen worker is thawed on time even after the rest ends: its stale attempt is the test
    while (
        any(p.poll() is None for p in producers)
        or time.monotonic() - begin < plan.seconds
        or fleet.frozen
    ):
        now = time.monotonic()
        if now > limit:
            raise TimeoutError("the producers did not finish: see producer-*.log")
        fleet.thaw(now)
        if now >= next_kill:
            report.kills += fleet.kill_one(rng, plan.ripe_after)
            next_kill = now + rng.expovariate(1 / plan.kill_every)
        if now >= next_freeze and now - begin >= plan.seconds:
            next_freeze = math.inf  # no new freeze once the faults are due to end
        elif now >= next_freeze and plan.backend == "sqlite" and fleet.frozen:
            # one SQLite writer at a time: a freeze that catches the write lock's holder
            # stops every writer, and freezes chained across thaws held it past the
            # producers' 30 s busy timeout; the next comes an interval after the thaw
            next_freeze = max(fleet.frozen.values()) + plan.freeze_every
        elif now >= next_freeze:
            frozen = fleet.freeze_one(rng, db.running_pids(), plan.freeze_for)
            report.freezes += frozen
            # if no worker runs a job at this instant, look again soon
            next_freeze = now + (plan.freeze_every if frozen else 0.05)
        if db.cluster is not None and now >= next_restart:
            db.cluster.restart("immediate" if report.restarts % 2 else "fast")
            report.restarts += 1
            next_restart = time.monotonic() + plan.restart_every
        if db.cluster is not None and now >= next_cut:
            report.connections_cut += db.cut_connections()
            report.cut_rounds += 1
            next_cut = time.monotonic() + plan.cut_every
        wake = min(next_kill, next_freeze, next_restart, next_cut, *fleet.frozen.values())
        time.sleep(max(0.0, wake - time.monotonic()))
    for p in producers:
        if p.wait() != 0:
            raise RuntimeError(f"a producer exited with {p.returncode}: see producer-*.log")
    return time.time()


def _acks(scratch: Path) -> Iterator[tuple[str, int]]:
    for path in sorted(scratch.glob("producer-*.acks")):
        for line in path.read_text().splitlines():
            if line.startswith("ack "):
                _, item, job_id = line.split()
                yield item, int(job_id)


def _settle(plan: Plan, db: _Database, scratch: Path, faults_ended: float) -> None:
    """Wait, with the faults over, until every acknowledged job has ended and a tick due
    after the faults has run (so no tick of the faulty period is still to come)."""
    ids = ",".join(str(job_id) for _, job_id in _acks(scratch)) or "0"
    deadline = time.monotonic() + plan.settle_timeout
    while True:
        open_jobs = db.query(
            f"SELECT count(*) FROM sqljobs_jobs WHERE id IN ({ids}) "
            "AND state NOT IN ('done', 'dead', 'cancelled')"
        )[0][0]
        last_tick = db.query(
            f"SELECT max({db.epoch('last_run_at')}) FROM sqljobs_schedules "
            "WHERE name = 'chaos_tick'"
        )[0][0]
        tick_done = db.query(
            "SELECT count(*) FROM sqljobs_jobs WHERE task = 'chaos_tick' "
            "AND state NOT IN ('done', 'dead', 'cancelled')"
        )[0][0]
        if open_jobs == 0 and (last_tick or 0) > faults_ended and tick_done == 0:
            break
        if time.monotonic() > deadline:
            raise TimeoutError(f"{open_jobs} acknowledged jobs still open after the drain")
        time.sleep(0.2)  # a poll of the database: the jobs end in other processes


def _check(
    plan: Plan, report: Report, db: _Database, scratch: Path, fleet: _Fleet, faults_ended: float
) -> None:
    acked = dict(_acks(scratch))
    report.acknowledged = len(acked)
    if report.acknowledged != plan.jobs:
        report.problems.append(f"{plan.jobs - report.acknowledged} enqueues never acknowledged")
    rows = db.query(
        f"SELECT id, state, last_error, {db.epoch('finished_at')}, token, history FROM sqljobs_jobs"
    )
    states = {row[0]: (row[1], row[2] or "") for row in rows}
    histories = {row[0]: row[5] for row in rows}
    finished = {row[0]: row[3] for row in rows}
    tokens = {row[0]: row[4] for row in rows}
    report.done_under_fire = sum(
        1 for job_id in acked.values() if (finished.get(job_id) or faults_ended) < faults_ended
    )
    for item, job_id in acked.items():
        state, error = states.get(job_id, ("missing", ""))
        if state == "done":
            report.done += 1
        elif state == "dead" and "crashed its worker" in error:
            report.dead_by_crashes += 1
        else:
            report.problems.append(f"acknowledged job {job_id} ({item}) is {state}: {error}")
    effects = Counter(item for (item,) in db.query("SELECT item FROM chaos_effects"))
    report.duplicate_effects = sum(n - 1 for n in effects.values() if n > 1)
    done_items = {item for item, job_id in acked.items() if states.get(job_id, ("",))[0] == "done"}
    report.missing_effects = len(done_items - set(effects))
    _check_fenced(
        report, db, {job_id: tokens[job_id] for item, job_id in acked.items() if item in done_items}
    )
    starts_log = scratch / "starts.log"
    starts = starts_log.read_text().splitlines() if starts_log.exists() else []
    job_starts = Counter(line.split()[1] for line in starts if line.startswith("job "))
    _check_blame(report, acked, states, histories, starts)
    report.deliveries = sum(job_starts.values())
    report.duplicate_deliveries = report.deliveries - len(job_starts)
    cuts = report.restarts * plan.workers + report.connections_cut
    report.duplicate_bound = (report.kills + report.freezes + cuts) * plan.concurrency
    _check_ticks(report, db, fleet)
    running = db.query("SELECT count(*) FROM sqljobs_jobs WHERE state = 'running'")
    report.stuck_running = running[0][0]
    for path in sorted(scratch.glob("producer-*.acks")):
        for line in path.read_text().splitlines():
            if line.startswith("error "):
                report.producer_errors[line.split()[1]] += 1
    report.worker_error_lines = sum(
        1
        for log in fleet.logs
        for line in log.read_text(errors="replace").splitlines()
        if " ERROR " in line or line.startswith("Traceback")
    )
    _judge(plan, report)


def _check_fenced(report: Report, db: _Database, done: dict[int, int]) -> None:
    """Each done job's fenced row must be there once, with the token of the attempt that
    completed it; any other row (a second one, an earlier attempt's, a row of a job not
    done) is a commit the fenced completion should have refused."""
    expected = set(done.items())  # (job id, token)
    rows = Counter(tuple(row) for row in db.query("SELECT job_id, token FROM chaos_fenced"))
    kept = expected & set(rows)
    report.stale_commits = sum(rows.values()) - len(kept)
    report.missing_fenced = len(expected) - len(kept)


def _check_blame(
    report: Report,
    acked: dict[str, int],
    states: dict[int, tuple[str, str]],
    histories: dict[int, Any],
    starts: list[str],
) -> None:
    """A job dead for crashing its worker must have been running in each worker it is
    blamed for: every ``crashed`` attempt in its history names a worker (``host-pid-...``)
    whose process logged the job's start. Blame for a kill that came while the job sat in
    a buffer, or ran elsewhere, is an innocent job killed by the poison rule."""
    started_in = {(parts[1], parts[2]) for parts in map(str.split, starts) if len(parts) == 3}
    for item, job_id in acked.items():
        if states.get(job_id, ("",))[0] != "dead":
            continue
        history = histories.get(job_id) or []
        if isinstance(history, str):
            history = json.loads(history)
        for entry in history:
            if entry.get("outcome") != "crashed":
                continue
            pid = str(entry.get("worker", "")).rsplit("-", 2)[-2:-1]
            if not pid or (item, pid[0]) not in started_in:
                report.problems.append(
                    f"innocent job {job_id} ({item}) blamed for a crash of "
                    f"{entry.get('worker')}, where it never started"
                )


def _check_ticks(report: Report, db: _Database, fleet: _Fleet) -> None:
    """Ticks are ``TICK_EVERY`` apart from the schedule's first (one period after it was
    first stored). A gap is *merged* when the run at its left edge is a catch-up, one that
    a worker logged it caught up from (the schedule's misfire policy: ticks over
    ``misfire_grace`` late, while a restart or a frozen SQLite writer kept every worker
    from the database, run once, keyed by the first of them); any other gap is *lost*."""
    keys = [row[0] for row in db.query("SELECT key FROM sqljobs_jobs WHERE task = 'chaos_tick'")]
    times = sorted(
        datetime.fromisoformat(m.group(1)).timestamp()
        for key in keys
        if key and (m := _TICK_KEY.match(key))
    )
    report.ticks = len(times)
    ran = Counter(tick for (tick,) in db.query("SELECT tick FROM chaos_ticks"))
    report.ticks_doubled = sum(n - 1 for n in ran.values() if n > 1) + len(times) - len(set(times))
    created = db.query(
        f"SELECT {db.epoch('created_at')} FROM sqljobs_schedules WHERE name = 'chaos_tick'"
    )
    first_due = created[0][0] + TICK_EVERY if created else (times[0] if times else 0.0)
    leading = round((times[0] - first_due) / TICK_EVERY) if times else 0
    caught_up = {
        datetime.fromisoformat(m.group(1) + "+00:00").timestamp()
        for log in fleet.logs
        for m in _CAUGHT_UP.finditer(log.read_text(errors="replace"))
    }
    # the first due tick is the gap's left edge for ticks missing before the first run
    edges = [first_due - TICK_EVERY, *times] if leading > 0 else times
    for earlier, later in itertools.pairwise(edges):
        missing = round((later - earlier) / TICK_EVERY) - 1
        if missing <= 0:
            continue
        # the catch-up run is keyed by the first missed tick, which the log names cut to
        # the second
        if any(0.0 <= earlier - since < 1.0 for since in caught_up):
            report.ticks_merged += missing
        else:
            report.ticks_lost += missing


def _judge(plan: Plan, report: Report) -> None:
    figures = {
        "duplicate effects": report.duplicate_effects,
        "missing effects": report.missing_effects,
        "stale commits (fenced rows beyond one per done job)": report.stale_commits,
        "done jobs without their fenced row": report.missing_fenced,
        "ticks doubled": report.ticks_doubled,
        "ticks lost": report.ticks_lost,
        "jobs stuck running": report.stuck_running,
    }
    if plan.backend == "sqlite":
        figures["producer errors"] = sum(report.producer_errors.values())
        figures["worker error lines"] = report.worker_error_lines
    for what, n in figures.items():
        if n:
            report.problems.append(f"{what}: {n}")
    if report.duplicate_deliveries > report.duplicate_bound:
        report.problems.append(
            f"{report.duplicate_deliveries} duplicate deliveries, over the bound of "
            f"{report.duplicate_bound} (kills and cuts x concurrency)"
        )
    if report.ticks < 2:
        report.problems.append(f"only {report.ticks} schedule ticks ran")
    if report.done_under_fire < report.acknowledged // 4:
        report.problems.append(
            f"only {report.done_under_fire} of {report.acknowledged} jobs ended while the "
            "faults went on: the run proved little (fewer kills, or a quieter machine)"
        )


def table(reports: list[Report]) -> str:
    """The reports as one plain-text table, a column per run."""
    rows = [r.row() for r in reports]
    names = list(rows[0])
    width = max(len(n) for n in names)
    cols = [max(len(r[n]) for n in names) for r in rows]
    lines = []
    for n in names:
        cells = "  ".join(r[n].rjust(w) for r, w in zip(rows, cols, strict=True))
        lines.append(f"{n.ljust(width)}  {cells}")
    return "\n".join(lines)
