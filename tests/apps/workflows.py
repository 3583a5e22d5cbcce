"""A workflow whose worker is SIGKILLed during each of its steps, once each: every step's
effect is logged (``SQLJOBS_TEST_RUNS``) as ``<label>-<step> <pid> <start|end>``, and a
marker file per step says the kill already happened, so the next attempt lives."""

from __future__ import annotations

import os
import signal
import sqlite3
from pathlib import Path

import sqljobs

from .workload import LEASE, log_run

app = sqljobs.App(default_lease=LEASE)
STEPS = 6


def _kill_once(label: str) -> None:
    marker = Path(os.environ["SQLJOBS_TEST_RUNS"]).with_name(f"killed-{label}")
    if not marker.exists():
        marker.touch()
        os.kill(os.getpid(), signal.SIGKILL)


def effect(label: str) -> str:
    log_run(label, "start")
    _kill_once(label)
    log_run(label, "end")
    return label


def six_steps_body(wf: sqljobs.Workflow, name: str) -> list[str]:
    done = [wf.step(f"s{i}", effect, f"{name}-s{i}") for i in range(STEPS)]
    with wf.transaction("book") as tx:
        mark = "?" if isinstance(tx, sqlite3.Connection) else "%s"
        tx.execute("CREATE TABLE IF NOT EXISTS wf_booked (name TEXT)")
        tx.execute(f"INSERT INTO wf_booked VALUES ({mark})", (name,))
        _kill_once(f"{name}-book")  # inside the transaction: rolled back with the kill
    wf.sleep(0.2)
    _kill_once(f"{name}-after-sleep")  # a kill on the resume, before any new step
    return done


def register(on: sqljobs.App) -> sqljobs.Task[[str], list[str]]:
    """The workflow on ``on``: each crash is an attempt (so 20 of them), and checkpoints
    between the crashes keep it from being taken for a poison job."""
    retry = sqljobs.Retry(max_attempts=20, base=0.01)
    return on.workflow(name="six_steps", lease=LEASE, retry=retry)(six_steps_body)


six_steps = register(app)
