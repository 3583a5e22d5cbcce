"""E10: workflows under SIGKILL. A workflow of six effect steps and one ``wf.transaction()``
step, run by real worker processes that the lab SIGKILLs at every step: once mid-effect,
once between the effect and its checkpoint, and once inside the transaction before its
commit. Beside it, a plain task doing the same work from the top on every retry, killed
at the same places.

Each process logs its effects as it runs them and waits at each kill point for the lab's
SIGKILL (see :mod:`sqljobs.lab.workflow_load`); what ran is counted from that log, what
committed from the database. Nothing here is computed from the kill schedule.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..app import App
from ..jobs import ENDED
from .db import Db
from .procs import Fleet, fleet
from .results import Progress, Result, Row, fmt, no_progress
from .workflow_load import LEASE, PLAIN, STEPS, TABLE, WORKFLOW, register

CAP = 120.0  # seconds a variant may take before it counts as stuck
DEFAULT_POLL = 5.0  # the worker's default fallback poll
HIGH_CRASHES = 20
STEP_NAMES = [f"s{i}" for i in range(STEPS)]
COLUMNS = ["kills", "effects per step", "repeated", "checkpointed", "killed before ckpt",
           "after ckpt", "cut mid-way", "tx rows", "state", "time s"]  # fmt: skip


@dataclass(frozen=True)
class Variant:
    key: str
    label: str
    task: str
    max_crashes: int | None  # None: a real ``sqljobs worker`` (its limit, 3)
    broken: bool


VARIANTS = [
    Variant("W", "W sqljobs workflow", WORKFLOW, None, False),
    Variant("N1", "N1 plain task", PLAIN, None, True),
    Variant("N2", f"N2 plain task, max_crashes={HIGH_CRASHES}", PLAIN, HIGH_CRASHES, True),
]


@dataclass(frozen=True)
class Mark:
    """One line of the run log: ``what`` (a step, ``book``, or a kill point), the event
    (``start``, ``end``, ``run``, ``kill``), the attempt, the process."""

    what: str
    event: str
    attempt: int
    pid: int


def _marks(f: Fleet, job: int) -> list[Mark]:
    out = []
    for entry_job, pid, phase, _ in f.runs.entries():
        if entry_job != job:
            continue
        head, what, attempt = phase.split(".")
        event = "kill" if head == "kill" else what
        out.append(Mark(what if head == "kill" else head, event, int(attempt), pid))
    return out


def _drive(f: Fleet, app: App, job: int, cap: float, told: Callable[[int], None]) -> list[Mark]:
    """SIGKILL each process that reached a kill point, until the job ends; the kills sent."""
    sent: list[Mark] = []
    seen: set[str] = set()
    deadline = time.monotonic() + cap
    while True:
        for mark in _marks(f, job):
            if mark.event == "kill" and mark.what not in seen:
                seen.add(mark.what)
                with contextlib.suppress(ProcessLookupError):
                    os.kill(mark.pid, signal.SIGKILL)
                    sent.append(mark)
                    told(len(sent))
        found = app.get_job(job)
        if (found is not None and found.state in ENDED) or time.monotonic() > deadline:
            return sent
        time.sleep(0.01)


def run_variant(url: str, v: Variant, poll: float, told: Callable[[int], None]) -> dict[str, Any]:
    app = App(url)
    queue = f"lab-e10-{v.key.lower()}"
    try:
        tasks = {t.name: t for t in register(app)}
        handle = tasks[v.task].with_options(queue=queue).enqueue()
        with fleet(url, LEASE) as f:
            began = time.monotonic()
            if v.max_crashes is None:
                app_path = "sqljobs.lab.workflow_load:app"
                f.sqljobs_worker(queue, 1, "--processes", "2", "--poll-interval", str(poll),
                                 app=app_path)  # fmt: skip
            else:
                f.module("sqljobs.lab.workflow_load", queue, str(v.max_crashes), str(poll))
            kills = _drive(f, app, handle.id, CAP, told)
            elapsed = time.monotonic() - began
            marks = _marks(f, handle.id)
        job = app.get_job(handle.id)
        assert job is not None
        history = app.workflow_history(handle.id) if v.task == WORKFLOW else []
        with Db(url) as db:
            rows = db.value(f"SELECT count(*) FROM {TABLE} WHERE job = ?", (handle.id,))
        figures = _figures(marks, kills, {s.name: s.attempt for s in history if s.state == "done"})
        figures.update({"tx rows": int(rows), "state": str(job.state), "time s": round(elapsed, 2)})
        figures["result ok"] = job.state == "done" and job.result == STEP_NAMES
        figures["crashes"] = job.crashes
        figures["last error"] = job.last_error
        return figures
    finally:
        app.close()


def _figures(marks: list[Mark], kills: list[Mark], checkpoints: dict[str, int]) -> dict[str, Any]:
    """One variant's counts, from its run log and (a workflow) its checkpoints' attempts."""
    started = [m for m in marks if m.event == "start"]
    ended = [m for m in marks if m.event == "end"]
    per_step = Counter(m.what for m in ended)
    cut = sorted((k.what.removesuffix("-checkpoint"), k.attempt) for k in kills
                 if k.what.endswith("-checkpoint"))  # fmt: skip
    figures: dict[str, Any] = {
        "kills": len(kills),
        "effects": len(ended),
        "effects per step": [per_step[s] for s in STEP_NAMES],
        "repeated": len(ended) - len(per_step),
        "checkpointed": None,
        "killed before ckpt": None,
        "after ckpt": None,
        "cut mid-way": len(started) - len(ended),
        "tx block runs": sum(1 for m in marks if m.event == "run"),
        "kills before ckpt": len(cut),
    }
    if checkpoints:  # which attempt wrote each step's checkpoint tells its runs apart
        at = {s: checkpoints.get(s, 0) for s in STEP_NAMES}
        once = [m for m in ended if m.attempt == at[m.what]]
        again = sorted((m.what, m.attempt) for m in ended if m.attempt != at[m.what])
        figures["checkpointed"] = len(once)
        figures["checkpointed per step"] = [sum(1 for m in once if m.what == s) for s in at]
        figures["killed before ckpt"] = len(again)
        figures["repeats are the kills before ckpt"] = again == cut
        figures["after ckpt"] = sum(1 for m in started if m.attempt > at[m.what])
    return figures


def run(url: str, quick: bool = False, progress: Progress = no_progress) -> Result:
    poll = 0.5 if quick else DEFAULT_POLL
    result = Result(
        "E10",
        "workflows under SIGKILL",
        f"one job per variant, run by a worker of 2 supervised processes (poll interval "
        f"{poll:g} s); the lab SIGKILLs "
        f"the process at {2 * STEPS + 1} points, once each: mid-effect and between effect "
        f"and checkpoint in each of {STEPS} steps, and inside the wf.transaction step before "
        "its commit (the plain task is killed at the same places); effects counted from the "
        "processes' run log, rows and checkpoints from the database",
        COLUMNS,
        chart="repeated",
    )
    with Db(url) as db:
        db.execute(f"CREATE TABLE IF NOT EXISTS {TABLE} (job BIGINT NOT NULL, attempt INTEGER)")
    points = 2 * STEPS + 1
    for n, v in enumerate(VARIANTS):

        def told(kills: int, n: int = n) -> None:
            progress((n + min(kills, points) / points) / len(VARIANTS))

        figures = run_variant(url, v, poll, told)
        result.rows.append(Row(v.label, figures, broken=v.broken))
        progress((n + 1) / len(VARIANTS))
    _claims(result)
    result.notes.append(
        "W and N1 run under `sqljobs worker --processes 2`; N2 under app.run_worker("
        f"processes=2, max_crashes={HIGH_CRASHES}), the same supervisor with a higher "
        "poison-job limit, so that the plain task can be killed at every point too"
    )
    result.notes.append(
        "checkpointed: effect runs whose checkpoint committed; killed before ckpt: runs that "
        "ended but were killed before their checkpoint, so ran again (at least once); after "
        "ckpt: runs started after their step's checkpoint committed; cut mid-way: runs killed "
        "before their effect ended; tx rows: rows the transaction step committed"
    )
    result.notes.append(
        "time s is mostly waiting: a job handed back from a killed process is run alone, "
        "and a worker process started after the hand-back first looks for such jobs at its "
        "fallback poll, so a kill that leaves only such processes costs up to a poll interval"
    )
    if quick:
        result.notes.append(f"--quick: poll interval {poll:g} s instead of {DEFAULT_POLL:g} s")
    return result


def _claims(result: Result) -> None:
    w, n1, n2 = (r.ours for r in result.rows)
    points = 2 * STEPS + 1
    result.claim(
        f"W: each step's effect ran to its end once where its checkpoint committed "
        f"({fmt(w.get('checkpointed per step'))}) and again only where the kill fell between "
        f"effect and checkpoint ({w['kills before ckpt']} such kills, {w['killed before ckpt']} "
        f"extra runs, in the same attempts); {w['after ckpt']} ran after their checkpoint",
        w.get("checkpointed per step") == [1] * STEPS
        and bool(w.get("repeats are the kills before ckpt"))
        and w["killed before ckpt"] == w["kills before ckpt"] == w["repeated"] == STEPS
        and w["after ckpt"] == 0,
    )
    result.claim(
        f"W: the wf.transaction step committed exactly once: {w['tx rows']} row, though its "
        f"block ran {w['tx block runs']} times (killed before its commit, committed, then "
        "replayed after each later kill and rolled back)",
        w["tx rows"] == 1 and int(w["tx block runs"]) > 2,
    )
    result.claim(
        f"W: the workflow finished ({w['state']}, with its {STEPS} steps' results) after "
        f"{w['kills']} SIGKILLs, under the worker's default max_crashes=3: each checkpoint "
        f"clears the count (crashes at the end: {w['crashes']})",
        bool(w["result ok"]) and w["kills"] == points,
    )
    result.claim(
        f"N1: under the same worker the plain task never finishes: {n1['state']} after "
        f'{n1["kills"]} kills, a poison job ("crashed its worker 3 times")',
        n1["state"] == "dead" and "crashed its worker 3 times" in str(n1["last error"]),
    )
    result.claim(
        f"N2: with max_crashes={HIGH_CRASHES} it finishes ({n2['state']}) after {n2['kills']} "
        f"kills, re-running every earlier effect on each retry: {n2['repeated']} repeated "
        f"effects {fmt(n2['effects per step'])}; its write committed {n2['tx rows']} times",
        bool(n2["result ok"]) and n2["kills"] == points and int(n2["tx rows"]) > 1,
    )
    result.claim(
        f"verdict: killed at the same {points} points, the workflow repeated {w['repeated']} "
        f"effects (those a kill caught between effect and checkpoint) and wrote its row once; "
        f"the plain task repeated {n2['repeated']} and wrote {n2['tx rows']} rows",
        w["repeated"] == w["kills before ckpt"]
        and int(n2["repeated"]) > int(w["repeated"])
        and w["tx rows"] == 1 < int(n2["tx rows"]),
    )
