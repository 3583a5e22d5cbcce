"""Flow control: jobs under concurrency and rate limits, a limit key's usage, the limits
workers record for their queues, and pausing a queue."""

from __future__ import annotations

from sqljobs.backends import Backend, WorkerInfo
from sqljobs.limits import QueueLimit

from .conftest import claim, new_job

COVERS = {
    "limited_pending",
    "limit_usage",
    "queue_limit",
    "pause_queue",
    "resume_queue",
    "queue_states",
}


def test_a_limit_keys_jobs_wait_for_its_slots(backend: Backend) -> None:
    limited = [new_job(backend, "t", i, limit_key="k", limit_max=1) for i in range(2)]
    backend.enqueue_jobs(limited)
    assert backend.limited_pending(None)
    assert backend.limited_pending(["default"], ["t"])
    assert not backend.limited_pending(["other"])
    assert claim(backend) == [], "an unlimited claim leaves limited jobs alone"
    assert len(claim(backend, limited=True)) == 1
    assert backend.limit_usage("k", 60.0)[0] == 1
    assert claim(backend, limited=True) == [], "its one slot is taken"


def test_a_rate_counts_starts_within_its_window(backend: Backend) -> None:
    rated = [
        new_job(backend, "t", i, limit_key="r", rate_max=1, rate_window=60.0) for i in range(2)
    ]
    backend.enqueue_jobs(rated)
    assert len(claim(backend, limited=True)) == 1
    assert backend.limit_usage("r", 60.0) == (1, 1)
    assert claim(backend, limited=True) == []


def test_queue_limits_are_what_workers_recorded(backend: Backend) -> None:
    assert backend.queue_limit("mail") is None
    limits = (QueueLimit("mail", 2, 10, 1.0),)
    backend.register_worker(WorkerInfo("w", "host", 1, ["mail"], 4, 10.0, queue_limits=limits))
    assert backend.queue_limit("mail") == QueueLimit("mail", 2, 10, 1.0)
    cleared = (QueueLimit("mail"),)
    backend.register_worker(WorkerInfo("w", "host", 1, ["mail"], 4, 10.0, queue_limits=cleared))
    assert backend.queue_limit("mail") is None


def test_a_paused_queue_is_not_claimed_from(backend: Backend) -> None:
    backend.enqueue_jobs([new_job(backend, "t", 1, queue="mail")])
    assert backend.queue_states() == {}
    assert backend.pause_queue("mail")
    assert not backend.pause_queue("mail"), "paused already"
    paused, since = backend.queue_states()["mail"]
    assert paused and since is not None
    assert claim(backend) == []
    assert backend.resume_queue("mail")
    assert not backend.resume_queue("mail")
    assert backend.queue_states()["mail"][0] is False
    assert len(claim(backend)) == 1
