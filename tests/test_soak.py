"""The soak's smoke run (``make soak`` is the 30-minute one): a short steady load with the
pruner on, sampled every second. Too short to judge trends on a shared machine, it checks
that the run works end to end and that the pruner keeps the jobs table bounded."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from soak.run import Plan, run
from tests import pg_cluster

RATE, RETAIN, PRUNE = 40.0, 2.0, 1.0


@pytest.mark.slow
@pytest.mark.processes
@pytest.mark.parametrize(
    "backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def test_a_steady_load_with_the_pruner_on_keeps_the_jobs_table_bounded(
    backend: str, tmp_path: Path
) -> None:
    if backend == "postgres" and (why_not := pg_cluster.available()) is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"the soak needs a PostgreSQL server of its own in CI: {why_not}")
        pytest.skip(why_not)
    plan = Plan(
        backend=backend,
        seconds=12,
        rate=RATE,
        workers=1,
        concurrency=2,
        retain=RETAIN,
        prune_every=PRUNE,
        sample_every=1.0,
    )
    report = run(plan, tmp_path)
    failures = [p for p in report.problems if " grew: " not in p]  # trends: make soak's job
    assert failures == []
    assert report.done >= report.enqueued * 0.9 and report.enqueued >= RATE * 10
    # kept: at most what arrives while a done job waits out its retention and the next
    # prune, with a second's slack for the sampling and the drain
    bound = RATE * (RETAIN + PRUNE + 2)
    late = report.samples[len(report.samples) // 2 :]
    assert max(s["job rows"] for s in late) <= bound, [s["job rows"] for s in report.samples]
    assert {p.suffix for p in report.files} == {".csv", ".png"}
    assert all(p.stat().st_size > 0 for p in report.files)
