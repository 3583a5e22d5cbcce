"""The chaos run's short version (``make chaos`` is the full one): workers SIGKILLed and
replaced while producers enqueue, on PostgreSQL the server restarted and every connection
cut, a schedule ticking throughout. Every acknowledged job must end done with its effect
exactly once and exactly one unguarded fenced row (its completing attempt's: no stale
commit), no tick lost or doubled, nothing left running (see chaos/run.py)."""

from __future__ import annotations

import dataclasses
import os

import pytest

from chaos.run import Plan, run, table
from tests import pg_cluster

SHORT = Plan(
    backend="sqlite",
    seconds=6,
    jobs=300,
    workers=3,
    restart_every=2.5,
    cut_every=2.0,
    freeze_every=1.0,
)


@pytest.mark.slow
@pytest.mark.processes
@pytest.mark.parametrize(
    "backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def test_every_acknowledged_job_takes_effect_once_under_kills_restarts_and_cuts(
    backend: str,
) -> None:
    if backend == "postgres" and (why_not := pg_cluster.available()) is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"the chaos run needs a PostgreSQL server of its own in CI: {why_not}")
        pytest.skip(why_not)
    report = run(dataclasses.replace(SHORT, backend=backend))
    print(table([report]))
    assert report.problems == [], f"kept in {report.scratch}"
    assert (report.stale_commits, report.missing_fenced) == (0, 0)
    assert report.acknowledged == SHORT.jobs and report.done + report.dead_by_crashes == SHORT.jobs
    assert report.kills >= 1, "no worker was killed: the run proved nothing"
    assert report.freezes >= 1, "no worker was frozen around a takeover: no stale attempt"
    if backend == "postgres":
        assert report.restarts >= 1 and report.connections_cut >= 1
