"""A job whose task no live worker runs stays pending and says so; retried jobs say so too."""

from __future__ import annotations

from sqljobs import App, JobState, Retry

from .conftest import wait_until, worker_thread


def test_a_job_no_live_worker_can_run_is_shown_as_waiting_for_one(app: App) -> None:
    @app.task
    def mine() -> None: ...

    orphan = app.enqueue("elsewhere", known=False).id
    job = app.get_job(orphan)
    assert job is not None
    assert "no live worker has registered task 'elsewhere'" in (app.waiting_reason(job) or "")
    assert app.stats().unserved == {"elsewhere": 1}
    with worker_thread(app):
        wait_until(lambda: app.stats().workers == 1)
        assert app.stats().unserved == {"elsewhere": 1}
        assert app.stats().to_dict()["unserved"] == {"elsewhere": 1}
        ours = mine.enqueue().id
        wait_until(lambda: (j := app.get_job(ours)) is not None and j.state is JobState.DONE)
        job = app.get_job(orphan)
        assert job is not None and job.state is JobState.PENDING and job.attempts == 0


def test_a_job_retried_by_hand_starts_afresh_and_its_history_says_so(app: App) -> None:
    @app.task(retry=Retry(max_attempts=1))
    def fails() -> None:
        raise RuntimeError("boom")

    job_id = fails.enqueue().id
    with worker_thread(app):
        wait_until(lambda: (j := app.get_job(job_id)) is not None and j.state is JobState.DEAD)
    assert app.retry_job(job_id)
    job = app.get_job(job_id)
    assert job is not None and job.state is JobState.PENDING and job.attempts == 0
    assert job.last_error is None  # the old "failed 1 of 1 attempts" no longer sits beside it
    assert [h["outcome"] for h in job.history] == ["failed", "retried"]
    assert job.history[-1]["from"] == "dead"
    assert "boom" in job.history[0]["error"]
    assert app.retry_dead() == 0
