"""What PostgreSQL's backends are doing while workers drain: sampled, not traced.

pg_stat_statements is not loaded on this server (and the benchmarks install no server
extension), so a statement's time is read the other way round: a side thread looks at
``pg_stat_activity`` every ~10 ms, from the admin database so the sampling is not itself
sampled, and counts the scratch database's backends that are running a statement, which
statement (by the text sqljobs sends, named as in its ``.sql`` files), and what each one
waits on. By Little's law, the mean number of backends inside the claim statements over a
window, times the window, divided by the claims made in it, is the mean time a claim
takes; the same with the backends waiting on a lock gives the lock wait per claim.

Each sample also reads ``procs_running`` from ``/proc/stat``, the threads runnable at that
instant on the whole machine, and the CPU counters: above the number of cores, work waits
for a CPU, which is contention too, but not for a lock.
"""

from __future__ import annotations

import collections
import contextlib
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pg_server
import psycopg

from sqljobs.backends.sqlfile import load_statements

CLAIMS = ("claim", "complete_and_claim")
"""The statements that claim jobs in a worker that serves unlimited queues: the first
claim, then one round trip that completes a batch and claims the next."""

SAMPLE = """
SELECT extract(epoch FROM clock_timestamp())::float8, left(query, 80), wait_event_type,
       wait_event
FROM pg_stat_activity WHERE datname = %s AND state = 'active'
"""


def _prefixes() -> dict[str, str]:
    """sqljobs' PostgreSQL statements by the text they start with (up to the first
    placeholder), as ``pg_stat_activity.query`` shows them."""
    files = ("queries.sql", "limits.sql", "schedules.sql", "dependencies.sql", "rollup.sql")
    statements = load_statements("sqljobs.backends.postgres.sql", *files)
    heads: dict[str, set[str]] = collections.defaultdict(set)
    for name, text in statements.items():
        heads[text.split("{", 1)[0].split("%(", 1)[0][:60]].add(name)
    # the longest first, so a statement whose text starts like another's is told apart; a
    # start that several statements share names none of them
    ordered = sorted(heads, key=len, reverse=True)
    return {
        head: next(iter(heads[head]))
        for head in ordered
        if len(heads[head]) == 1 and len(head) >= 10
    }


@dataclass
class Sample:
    """One look at the scratch database's active backends."""

    at: float  # the server's clock, Unix seconds
    active: int
    claiming: int  # of them, inside a claim statement
    lock: int  # waiting on a heavyweight lock (a row's transaction, a relation extension)
    lwlock: int  # waiting on a lightweight lock (a buffer's content, WAL insertion, ...)
    runnable: int  # threads runnable on the machine (procs_running)
    cpu_busy: int  # the machine's busy and total CPU ticks so far
    cpu_total: int
    waits: list[str] = field(default_factory=list)  # "statement: type/event" of each waiter


@dataclass(frozen=True)
class Window:
    """The samples between two instants, summed up."""

    samples: int
    seconds: float
    mean_active: float
    mean_claiming: float
    mean_lock: float
    mean_lwlock: float
    any_lock_share: float  # of the samples, those with any backend waiting on a lock
    mean_runnable: float
    cpu_busy_share: float
    top_waits: list[tuple[str, float]]  # "statement: type/event", waiting backends on average


def _cpu() -> tuple[int, int, int]:
    """(busy ticks, total ticks, runnable threads) of the whole machine, from /proc/stat."""
    busy = total = running = 0
    with contextlib.suppress(OSError):
        for line in Path("/proc/stat").read_text().splitlines():
            if line.startswith("cpu "):
                ticks = [int(x) for x in line.split()[1:]]
                total = sum(ticks[:8])
                busy = total - ticks[3] - ticks[4]  # less idle and iowait
            elif line.startswith("procs_running"):
                running = int(line.split()[1]) - 1  # less the sampler reading it
    return busy, total, running


class ActivitySampler:
    """Samples ``pg_stat_activity`` for one database in a daemon thread until stopped."""

    def __init__(self, url: str, period: float = 0.01) -> None:
        self.database = url.rsplit("/", 1)[1]
        self.period = period
        self.samples: list[Sample] = []
        self._names = _prefixes()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pg-activity", daemon=True)
        self._error: BaseException | None = None

    def __enter__(self) -> ActivitySampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)
        if self._error is not None and exc[0] is None:
            raise RuntimeError(f"sampling pg_stat_activity failed: {self._error!r}")

    def name(self, query: str) -> str:
        for head, name in self._names.items():
            if query.startswith(head):
                return name
        return query.split("\n", 1)[0][:30]

    def _run(self) -> None:
        try:
            with psycopg.connect(pg_server.ADMIN_URL, autocommit=True) as conn:
                while not self._stop.is_set():
                    busy, total, runnable = _cpu()
                    rows = conn.execute(SAMPLE, (self.database,)).fetchall()
                    self.samples.append(self._sample(rows, busy, total, runnable))
                    self._stop.wait(self.period)
        except BaseException as exc:  # reported by __exit__
            self._error = exc

    def _sample(self, rows: list[tuple[float, str, str | None, str | None]], busy: int,
                total: int, runnable: int) -> Sample:  # fmt: skip
        at = rows[0][0] if rows else time.time()
        sample = Sample(at, len(rows), 0, 0, 0, runnable, busy, total)
        for _, query, wait_type, wait_event in rows:
            name = self.name(query or "")
            sample.claiming += name in CLAIMS
            if wait_type == "Lock":
                sample.lock += 1
            elif wait_type == "LWLock":
                sample.lwlock += 1
            if wait_type in ("Lock", "LWLock"):
                sample.waits.append(f"{name}: {wait_type}/{wait_event}")
        return sample

    def window(self, start: float, end: float) -> Window:
        """The samples taken between ``start`` and ``end`` (the server's Unix time)."""
        inside = [s for s in self.samples if start <= s.at <= end]
        if len(inside) < 2:
            raise RuntimeError(f"{len(inside)} samples in a {end - start:.3f} s window")
        n = len(inside)
        waits: collections.Counter[str] = collections.Counter()
        for s in inside:
            waits.update(s.waits)
        ticks = inside[-1].cpu_total - inside[0].cpu_total
        return Window(
            samples=n,
            seconds=end - start,
            mean_active=sum(s.active for s in inside) / n,
            mean_claiming=sum(s.claiming for s in inside) / n,
            mean_lock=sum(s.lock for s in inside) / n,
            mean_lwlock=sum(s.lwlock for s in inside) / n,
            any_lock_share=sum(bool(s.lock or s.lwlock) for s in inside) / n,
            mean_runnable=sum(s.runnable for s in inside) / n,
            cpu_busy_share=(inside[-1].cpu_busy - inside[0].cpu_busy) / ticks if ticks else 0.0,
            top_waits=[(w, count / n) for w, count in waits.most_common(3)],
        )


def cores() -> int:
    return os.cpu_count() or 1
