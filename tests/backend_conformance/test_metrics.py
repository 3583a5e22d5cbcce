"""The metrics rollup: amounts added per minute and to the totals, read back by minute
and in total, the label sets, and the pruning of old minutes."""

from __future__ import annotations

from sqljobs.backends import Backend, WorkerInfo
from sqljobs.jobs import TaskInfo
from sqljobs.rollup import MetricAmount
from sqljobs.schedules import Schedule

COVERS = {
    "add_metric_amounts",
    "attempts_by_minute",
    "metric_totals",
    "metric_label_sets",
    "prune_metric_minutes",
}


def test_amounts_add_up_by_minute_and_in_total(backend: Backend) -> None:
    minute = int(backend.now()) // 60 * 60
    for amount in (2.0, 3.0):  # each adds to its minute and to the totals
        backend.add_metric_amounts(
            [MetricAmount("default", "t", "done", "attempts", 0.0, amount, minute)]
        )
    assert backend.attempts_by_minute(minute - 60) == [(minute, "done", 5.0)]
    assert backend.attempts_by_minute(minute - 60, queue="other") == []
    totals = backend.metric_totals()
    assert [(a.queue, a.task, a.outcome, a.series, a.amount) for a in totals] == [
        ("default", "t", "done", "attempts", 5.0)
    ]
    assert backend.prune_metric_minutes(minute + 60) == 1
    assert backend.attempts_by_minute(minute - 60) == []
    assert len(backend.metric_totals()) == 1, "totals are never pruned"


def test_label_sets_are_the_catalogues_tasks_and_the_schedules(backend: Backend) -> None:
    mail = TaskInfo("mail", "outbox", 0, 60.0, 3, None)
    backend.register_worker(WorkerInfo("w", "host", 1, None, 4, 10.0, (mail,)))
    backend.save_schedule(Schedule("nightly", "report", every=60.0, queue="batch"), backend.now())
    assert sorted(backend.metric_label_sets()) == [
        ("batch", "report", True),
        ("outbox", "mail", False),
    ]
