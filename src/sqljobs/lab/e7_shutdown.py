"""E7: graceful shutdown. A real SIGTERM to a real worker process, 150 ms into the run.

V1 is the lab's naive worker, which exits at once; V2 and V3 are ``sqljobs worker``
processes: stop claiming, hand back unstarted jobs, wait for running ones up to
``--drain-timeout``, then release the rest to ``pending`` for another worker.
"""

from __future__ import annotations

import signal
import time

from ..app import App
from .common import enqueue
from .db import Db
from .procs import Proc, fleet, wait_for
from .results import Progress, Result, Row, no_progress

ARTICLE = {
    "V1": {"completed": 16, "interrupted": 8, "to re-run": 8, "exit ms": 0},
    "V2": {"completed": 24, "interrupted": 0, "to re-run": 0, "exit ms": 45},
    "V3": {"completed": 23, "interrupted": 0, "to re-run": 1, "exit ms": 42},
}
JOBS, WORKERS, WORK, TERM_AT, LEASE = 200, 8, 0.05, 0.15, 3.0


def run_variant(url: str, key: str, drain: float | None) -> dict[str, float | int]:
    app = App(url)
    queue = f"lab-e7-{key.lower()}"
    try:
        enqueue(app, "lab_work", queue, [[WORK] for _ in range(JOBS)])
        with fleet(url, LEASE) as f:
            proc: Proc
            if drain is None:
                proc = f.naive_worker(queue, WORKERS, WORK)
            else:
                proc = f.sqljobs_worker(queue, WORKERS, "--drain-timeout", str(drain))
            first = wait_for(f.runs.first_start, 30)
            time.sleep(max(0.0, first + TERM_AT - time.time()))  # the article's 150 ms
            sent = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)
            exit_ms = (time.monotonic() - sent) * 1000
            starts, ends = set(f.runs.jobs("start")), f.runs.jobs("end")
    finally:
        app.close()
    with Db(url) as db:
        rows = db.rows("SELECT id, state FROM sqljobs_jobs WHERE queue = ?", (queue,))
    unfinished = {job for job, state in rows if state in ("pending", "running")}
    return {
        "completed": len(ends),
        "interrupted": len(starts) - len(set(ends)),
        "to re-run": len(starts & unfinished),
        "exit ms": round(exit_ms),
        "left running": sum(1 for _, s in rows if s == "running"),
    }


def run(url: str, quick: bool = False, progress: Progress = no_progress) -> Result:
    result = Result(
        "E7",
        "graceful shutdown",
        f"{JOBS} jobs of {WORK * 1000:g} ms, one worker process with {WORKERS} threads, "
        f"SIGTERM {TERM_AT * 1000:g} ms after its first job started; lease {LEASE:g} s",
        ["completed", "interrupted", "to re-run", "left running", "exit ms"],
        chart="interrupted",
    )
    variants = [
        ("V1", "V1 cancel everything at once", None, True),
        ("V2", "V2 sqljobs: stop claiming, drain (--drain-timeout 1)", 1.0, False),
        ("V3", "V3 sqljobs: drain at most 40 ms, then release", 0.04, False),
    ]
    for n, (key, label, drain, broken) in enumerate(variants):
        figures = run_variant(url, key, drain)
        result.rows.append(Row(label, figures, ARTICLE[key], broken))
        progress((n + 1) / len(variants))
    v1, v2, v3 = (r.ours for r in result.rows)
    result.claim(
        f"cancel at once: {v1['interrupted']} jobs interrupted mid-run, {v1['left running']} "
        "left running for lease recovery (article 8, 8)",
        int(v1["interrupted"]) > 0 and int(v1["left running"]) > 0,
    )
    result.claim(
        f"drain: {v2['interrupted']} interrupted, {v2['to re-run']} to re-run, "
        f"{v2['left running']} left running (article 0, 0)",
        v2["interrupted"] == 0 and v2["to re-run"] == 0 and v2["left running"] == 0,
    )
    result.claim(
        f"bounded drain: exit in {v3['exit ms']} ms, {v3['left running']} left running; what "
        f"the bound cut ({v3['to re-run']}) is back in pending at once, not after its lease",
        v3["left running"] == 0 and int(v3["exit ms"]) < 1000 * LEASE,
    )
    result.notes.append(
        "exit ms is from SIGTERM to the process's exit, Python interpreter teardown "
        "included; the article timed its drain function alone"
    )
    return result
