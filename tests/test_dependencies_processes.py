"""Dependencies across worker processes, on both backends: a diamond runs in order, a dead
parent cancels its child, and a group's callback gets every result exactly once when its
members end at the same instant on two workers."""

from __future__ import annotations

import time

import pytest

from sqljobs import App, JobCancelled, JobState

from .conftest import Runs, Spawn, wait_until


def _spans(runs: Runs) -> dict[str, list[float]]:
    """Each label's run-log line numbers, start and end: the log is appended in order."""
    spans: dict[str, list[float]] = {}
    for n, (label, _, phase) in enumerate(runs.lines()):
        spans.setdefault(label, [0.0, 0.0])[0 if phase == "start" else 1] = n
    return spans


def test_a_diamond_and_a_dead_parent_across_processes(app: App, spawn: Spawn, runs: Runs) -> None:
    for _ in range(2):
        spawn("--concurrency", "2", lease=5.0)
    wait_until(lambda: app.backend.task_info("record"), timeout=20, what="registration")
    a = app.enqueue("record", ["a", 0.05])
    b = app.enqueue("record", ["b", 0.05], after=[a])
    c = app.enqueue("record", ["c", 0.05], after=[a])
    d = app.enqueue("record", ["d", 0.0], after=[b, c])
    doomed = app.enqueue("fail", ["x"])
    orphan = app.enqueue("record", ["never"], after=[doomed])
    d.result(timeout=30)
    with pytest.raises(JobCancelled):
        orphan.result(timeout=30)
    spans = _spans(runs)
    assert spans["a"][1] < spans["b"][0] and spans["a"][1] < spans["c"][0]
    assert max(spans["b"][1], spans["c"][1]) < spans["d"][0]
    assert "never" not in spans and orphan.refresh().state is JobState.CANCELLED
    assert max(runs.count("end").values()) == 1


def test_a_group_callback_gets_every_result_once_when_members_end_together(
    app: App, spawn: Spawn, runs: Runs
) -> None:
    """Two members end at the same instant on two worker processes: both settle the
    callback at once, and exactly one of them releases it, with both results."""
    for _ in range(2):
        spawn("--concurrency", "1", lease=5.0)
    wait_until(lambda: app.backend.task_info("gather"), timeout=20, what="registration")
    finish_at, gather = app.task(name="finish_at")(_stub), app.task(name="gather")(_stub)
    groups = []
    for i in range(10):
        at = time.time() + 0.3 + 0.2 * i
        members = [finish_at.s(at, 10 * i + 1), finish_at.s(at, 10 * i + 2)]
        groups.append(app.group(members, then=gather.s(f"g{i}")))
    for i, group in enumerate(groups):
        assert group.result(timeout=30) == [10 * i + 1, 10 * i + 2]
    assert runs.count("end") == {f"g{i}": 1 for i in range(10)}
    split = [g for g in groups if len({m.refresh().worker for m in g.members}) == 2]
    ends = [[m.refresh().finished_at or 0.0 for m in g.members] for g in split]
    print(f"{len(split)} of 10 groups ran on both workers; their members' end gaps (ms):",
          [round(1000 * (max(e) - min(e)), 1) for e in ends])  # fmt: skip
    assert split, "some group had one member on each worker"


def _stub(*args: object) -> None:
    """This process only enqueues: the workers have the real tasks."""
