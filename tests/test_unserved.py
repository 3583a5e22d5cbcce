"""A job whose task no live worker runs stays pending and says so; retried jobs say so too."""

from __future__ import annotations

from sqljobs import App, JobState, Retry
from sqljobs.testing import stepped_worker


def test_a_job_no_live_worker_can_run_is_shown_as_waiting_for_one(app: App) -> None:
    @app.task
    def mine() -> None: ...

    orphan = app.enqueue("elsewhere", known=False).id
    job = app.get_job(orphan)
    assert job is not None
    assert "no live worker has registered task 'elsewhere'" in (app.waiting_reason(job) or "")
    assert app.stats().unserved == {"elsewhere": 1}
    with stepped_worker(app) as worker:
        worker.until(lambda: app.stats().workers == 1)
        assert app.stats().unserved == {"elsewhere": 1}
        assert app.stats().to_dict()["unserved"] == {"elsewhere": 1}
        ours = mine.enqueue().id
        assert worker.until_ended(ours).state is JobState.DONE
        job = app.get_job(orphan)
        assert job is not None and job.state is JobState.PENDING and job.attempts == 0


def test_a_job_retried_by_hand_starts_afresh_and_its_history_says_so(app: App) -> None:
    @app.task(retry=Retry(max_attempts=1))
    def fails() -> None:
        raise RuntimeError("boom")

    job_id = fails.enqueue().id
    with stepped_worker(app) as worker:
        worker.until(lambda: (j := app.get_job(job_id)) is not None and j.state is JobState.DEAD)
    assert app.retry_job(job_id)
    job = app.get_job(job_id)
    assert job is not None and job.state is JobState.PENDING and job.attempts == 0
    assert job.last_error is None  # the old "failed 1 of 1 attempts" no longer sits beside it
    assert [h["outcome"] for h in job.history] == ["failed", "retried"]
    assert job.history[-1]["from"] == "dead"
    assert "boom" in job.history[0]["error"]
    assert app.retry_dead() == 0


def test_a_job_in_a_queue_no_worker_with_its_task_serves_is_shown_as_unserved(app: App) -> None:
    @app.task(queue="mail")
    def send() -> None: ...

    @app.task(queue="other")
    def other() -> None: ...

    stranded = send.enqueue().id
    elsewhere = send.with_options(queue="other").enqueue().id
    with stepped_worker(app, queues=["other"]) as worker:
        assert worker.until_ended(elsewhere).state is JobState.DONE
        st = app.stats()
        assert st.workers == 1 and st.unserved == {"send": 1}
        assert st.to_dict()["unserved"] == {"send": 1}
        job = app.get_job(stranded)
        assert job is not None and job.state is JobState.PENDING
        reason = app.waiting_reason(job) or ""
        assert "no live worker that runs task 'send' serves its queue 'mail'" in reason
        assert "(they serve other)" in reason and "--queues mail" in reason
        other.enqueue()  # a task that is served where it waits is not named
        assert app.stats().unserved.keys() == {"send"}
    with stepped_worker(app) as worker:  # every queue
        assert worker.until_ended(stranded).state is JobState.DONE
        assert app.stats().unserved == {}


def test_unserved_counts_each_job_by_whether_a_worker_serves_its_task_and_queue() -> None:
    """One worker runs a on queue x, another b on every queue: a's jobs in y are unserved,
    b's anywhere are not; c runs nowhere. Only queue y (where a has no worker) is asked."""
    from sqljobs.stats import WorkerScope, unserved_tasks

    scopes = [
        WorkerScope(frozenset({"a"}), frozenset({"x"})),
        WorkerScope(frozenset({"b"}), None),
    ]
    rows = {"x": [("a", 2), ("b", 1)], "y": [("a", 3), ("b", 4), ("c", 1)]}
    asked: list[str] = []

    def in_queue(queue: str) -> list[tuple[str, int]]:
        asked.append(queue)
        return rows[queue]

    by_task = [("a", 5), ("b", 5), ("c", 1)]
    assert unserved_tasks(by_task, scopes, ["x", "y", "y"], in_queue) == {"a": 3, "c": 1}
    assert asked == ["y"]
    everywhere = [WorkerScope(frozenset({"a", "b"}), None)]
    assert unserved_tasks(by_task, everywhere, ["x", "y"], in_queue) == {"c": 1}
    assert asked == ["y"]  # every worker serves every queue: no queue is asked
