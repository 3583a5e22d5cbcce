"""E2: crash recovery. Without a lease, a killed worker's jobs stay ``running`` forever;
with sqljobs' lease and reaper they run again on another worker.

Both variants run in real processes, and the kill is a real SIGKILL.
"""

from __future__ import annotations

import os
import signal
import time

from ..app import App
from .common import enqueue
from .db import Db
from .procs import Fleet, Proc, fleet, wait_for
from .results import Progress, Result, Row, no_progress

ARTICLE = {
    "A1": {"jobs": 40, "runs": 36, "duplicates": 0, "done": 36, "stuck running": 4,
           "time s": 6.03},
    "A2": {"jobs": 40, "runs": 40, "duplicates": 0, "done": 40, "stuck running": 0,
           "time s": 3.39},
}  # fmt: skip
PROCESSES, THREADS, KILLED = 4, 2, 2  # 8 workers; 2 processes = 4 workers are killed


def run_variant(
    url: str, queue: str, naive: bool, lease: float, cap: float, work: float, jobs: int
) -> dict[str, float | int]:
    app = App(url)
    db = Db(url)
    try:
        enqueue(app, "lab_work", queue, [[work] for _ in range(jobs)])
        with fleet(url, lease) as f:
            procs = [
                f.naive_worker(queue, THREADS, work) if naive else f.sqljobs_worker(queue, THREADS)
                for _ in range(PROCESSES)
            ]
            first = wait_for(f.runs.first_start, 30)
            busy = wait_for(lambda: _busy(f, procs) if len(_busy(f, procs)) >= KILLED else [], 30)
            time.sleep(max(0.0, first + 0.2 - time.time()))  # the article kills at 200 ms
            for proc in busy[:KILLED]:
                os.kill(proc.pid, signal.SIGKILL)

            def finished() -> bool:
                return _count(db, queue, "done") == jobs

            wait_for(finished, cap - (time.time() - first), 0.02)
            elapsed = time.time() - first
            starts, ends = f.runs.jobs("start"), f.runs.jobs("end")
        return {
            "jobs": jobs,
            "runs": len(ends),
            "duplicates": len(ends) - len(set(ends)),
            "interrupted": len(starts) - len(ends),
            "done": _count(db, queue, "done"),
            "stuck running": _count(db, queue, "running"),
            "time s": round(elapsed, 2),
        }
    finally:
        db.close()
        app.close()


def _busy(f: Fleet, procs: list[Proc]) -> list[Proc]:
    """The processes that have started a job, so a kill abandons work in hand."""
    started = f.runs.pids_started()
    return [p for p in procs if p.pid in started]


def _count(db: Db, queue: str, state: str) -> int:
    return int(db.value("SELECT count(*) FROM sqljobs_jobs WHERE queue = ? AND state = ?",
                        (queue, state)))  # fmt: skip


def run(url: str, quick: bool = False, progress: Progress = no_progress) -> Result:
    jobs, work = 40, 0.15
    lease, cap = (1.0, 3.0) if quick else (3.0, 6.0)
    result = Result(
        "E2",
        "crash recovery: no lease vs lease",
        f"{jobs} jobs of {work * 1000:g} ms, {PROCESSES} worker processes x {THREADS} threads; "
        f"200 ms after the first start, {KILLED} processes ({KILLED * THREADS} workers) get "
        f"SIGKILL; time cap {cap:g} s",
        ["jobs", "runs", "duplicates", "interrupted", "done", "stuck running", "time s"],
        chart="stuck running",
    )
    a1 = run_variant(url, "lab-e2-a1", True, lease, cap, work, jobs)
    result.rows.append(Row("A1 no lease", a1, ARTICLE["A1"], broken=True))
    progress(0.5)
    a2 = run_variant(url, "lab-e2-a2", False, lease, cap + lease, work, jobs)
    result.rows.append(Row(f"A2 sqljobs lease {lease:g} s + reaper", a2, ARTICLE["A2"]))
    progress(1.0)
    result.claim(
        f"no lease: {a1['stuck running']} jobs stuck in running after the cap, lost (article 4)",
        int(a1["stuck running"]) > 0 and int(a1["done"]) < jobs,
    )
    result.claim(
        f"lease + reaper: {a2['done']}/{jobs} done, {a2['stuck running']} stuck (article 40, 0)",
        a2["done"] == jobs and a2["stuck running"] == 0,
    )
    result.notes.append(
        "runs are completed runs; interrupted = runs cut short by the SIGKILL. A2 runs "
        "those jobs again once their lease expires. A run that finished in a worker killed "
        "before it recorded the completion runs again too (a duplicate): delivery is at "
        "least once, which is why effects must be idempotent (E4)"
    )
    if quick:
        result.notes.append(f"--quick: lease {lease:g} s instead of 3 s, cap {cap:g} s")
    return result
