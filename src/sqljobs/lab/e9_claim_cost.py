"""E9: what one claim costs, and what batching saves. Our figures are the library's
``Backend.claim_jobs`` as a worker calls it (SQLite with the worker's synchronous=NORMAL).
"""

from __future__ import annotations

import time
from typing import Any

from ..app import App
from ..backends.base import Backend, Claim
from .common import enqueue
from .db import is_postgres
from .e1_claim import library_claim
from .results import Progress, Result, Row, no_progress


def claim_cost(app: App, backend: Backend, queue: str, jobs: int, per_claim: int) -> float:
    """Microseconds per job to claim ``jobs`` jobs ``per_claim`` at a time."""
    enqueue(app, "lab_e9", queue, [[] for _ in range(jobs)])
    taken = 0
    began = time.perf_counter()
    while taken < jobs:
        got = backend.claim_jobs(Claim("lab-e9", [queue], per_claim))
        if not got:
            break
        taken += len(got)
    return (time.perf_counter() - began) / max(taken, 1) * 1e6


def run(url: str, quick: bool = False, progress: Progress = no_progress) -> Result:
    jobs = 2000 if quick else 10000
    result = Result(
        "E9",
        "claim cost and batching",
        f"claim cost: {jobs} pending jobs claimed one by one, then 20 at a time; batching: "
        "200 jobs of 2 ms, 8 worker threads",
        ["us per job", "statements", "time ms"],
        chart="us per job",
    )
    app = App(url)
    options: dict[str, Any] = {} if is_postgres(url) else {"synchronous": "NORMAL"}
    backend = app._open_backend(**options)
    try:
        single = claim_cost(app, backend, "lab-e9-single", jobs, 1)
        progress(0.3)
        batched = claim_cost(app, backend, "lab-e9-batched", jobs, 20)
        progress(0.6)
        result.rows.append(
            Row("one atomic claim, 1 job", {"us per job": round(single, 1)}, {"us per job": 29.2})
        )
        result.rows.append(Row("batched claim, 20 jobs", {"us per job": round(batched, 1)}))
        for n, per_claim in enumerate((1, 20)):
            queue = f"lab-e9-batch-{per_claim}"
            enqueue(app, "lab_e9", queue, [[] for _ in range(200)])
            tally = library_claim(app, queue, 8, 0.002, per_claim)
            article = {"statements": 408, "time ms": "157-233"} if per_claim == 1 else {
                "statements": 218, "time ms": "142-206"}  # fmt: skip
            result.rows.append(
                Row(
                    f"200 jobs of 2 ms, {per_claim} per claim",
                    {"statements": tally.statements, "time ms": round(tally.seconds * 1000)},
                    article,
                )
            )
            progress(0.6 + 0.2 * (n + 1))
    finally:
        backend.close()
        app.close()
    one, twenty = result.rows[2].ours, result.rows[3].ours
    result.claim(
        f"a batched claim costs less per job: {batched:.1f} us vs {single:.1f} us",
        batched < single,
    )
    result.claim(
        f"batching cuts statements: {twenty['statements']} vs {one['statements']} "
        "(article 218 vs 408)",
        int(twenty["statements"]) < int(one["statements"]),
    )
    engine = "PostgreSQL round trip over TCP" if is_postgres(url) else "SQLite WAL commit"
    result.notes.append(
        f"one claim is a {engine} plus Python (sqlite3/psycopg) overhead; the article's "
        "29.2 us is Go on an Apple M4; the article's in-memory channel receive (2.7 ns) has "
        "no counterpart here"
    )
    return result
