"""Backlog health and retention."""

from __future__ import annotations

import time

import pytest

from sqljobs import App, JobState
from sqljobs.maintenance import Pruner

from .conftest import db_execute


def test_stats_count_by_queue_and_state_and_age_the_oldest_due_job(app: App) -> None:
    @app.task
    def t() -> None: ...

    now = time.time()
    t.with_options(run_at=now - 42).enqueue()  # due for 42 s
    t.with_options(run_at=now - 12, queue="mail").enqueue()
    t.with_options(delay=3600).enqueue()  # not due: does not age the backlog
    st = app.stats()
    assert st.counts["default"]["pending"] == 2 and st.counts["mail"]["pending"] == 1
    assert st.oldest_pending_age == pytest.approx(42, abs=2)
    assert st.oldest_pending_age_by_queue["mail"] == pytest.approx(12, abs=2)
    assert st.to_dict()["counts"]["mail"]["pending"] == 1
    assert App(app.url).stats().total(JobState.RUNNING) == 0


def test_empty_queue_has_no_oldest_age(app: App) -> None:
    assert app.stats().oldest_pending_age is None


def test_pruner_deletes_old_done_jobs_in_batches_and_keeps_dead_ones(url: str) -> None:
    now = [1_000_000.0]
    app = App(url, clock=lambda: now[0], retention=3600)
    ids = [app.enqueue("t", known=False).id for _ in range(25)]
    backend = app.backend
    for state, cmp in (("done", "<="), ("dead", ">")):
        db_execute(
            app,
            f"UPDATE sqljobs_jobs SET state = '{state}', finished_at = ? WHERE id {cmp} ?",
            f"UPDATE sqljobs_jobs SET state = '{state}', finished_at = to_timestamp(?) "
            f"WHERE id {cmp} ?",
            (now[0], ids[19]),
        )
    pruner = Pruner(backend, app.retention, batch=7)
    assert pruner.run_once() == 0
    now[0] += 3601
    assert pruner.run_once() == 20
    assert app.stats().total("dead") == 5 and app.stats().total("done") == 0
