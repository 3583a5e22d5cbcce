"""Counters and histograms kept in the database (sqljobs.rollup): what workers tally
reaches the rollup tables, app.throughput() and the Prometheus scrape, on both backends."""

from __future__ import annotations

import pytest

import sqljobs
from sqljobs.rollup import INF, MetricAmount, Series


class Clock:
    """A wall clock the test moves."""

    def __init__(self, at: float) -> None:
        self.at = at

    def __call__(self) -> float:
        return self.at


def test_throughput_has_one_entry_per_minute_and_sorts_outcomes(url: str) -> None:
    clock = Clock(1_800_000_030.0)  # 30 s into a minute
    app = sqljobs.App(url, clock=clock)
    now_minute = 1_800_000_000
    amounts = [
        MetricAmount("default", "a", "done", Series.ATTEMPTS, INF, 3, now_minute),
        MetricAmount("default", "a", "retried", Series.ATTEMPTS, INF, 1, now_minute),
        MetricAmount("mail", "b", "lease_expired", Series.ATTEMPTS, INF, 2, now_minute - 120),
        MetricAmount("mail", "b", "cancelled", Series.ATTEMPTS, INF, 1, now_minute - 120),
        MetricAmount("mail", "b", "done", Series.DURATION, 0.01, 5, now_minute),  # not attempts
        MetricAmount("mail", "b", "done", Series.ATTEMPTS, INF, 9, now_minute - 3600),  # outside
    ]
    app.backend.add_metric_amounts(amounts)
    app.backend.add_metric_amounts(amounts[:1])  # adds up
    window = app.throughput(minutes=3)
    assert [m.minute for m in window] == [now_minute - 120, now_minute - 60, now_minute]
    assert [(m.done, m.failed, m.cancelled) for m in window] == [(0, 2, 1), (0, 0, 0), (6, 1, 0)]
    assert [(m.done, m.failed) for m in app.throughput(3, queue="mail")] == [(0, 2), (0, 0), (0, 0)]
    assert len(app.throughput()) == 60
    totals = {(a.task, a.outcome, a.series, a.le): a.amount for a in app.metric_totals()}
    assert totals[("a", "done", "attempts", INF)] == 6
    assert totals[("b", "done", "attempts", INF)] == 9  # totals are never by minute
    for bad in (0, 1441, 2.5, "60"):
        with pytest.raises(sqljobs.ConfigurationError, match="minutes must be"):
            app.throughput(bad)  # type: ignore[arg-type]
    with pytest.raises(sqljobs.ConfigurationError, match="queue name"):
        app.throughput(queue="no spaces")
