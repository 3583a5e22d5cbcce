"""Workers as the database knows them: registration with their tasks and queues (the task
catalogue), liveness by heartbeat, and what each live worker runs."""

from __future__ import annotations

from sqljobs.backends import Backend, WorkerInfo
from sqljobs.jobs import TaskInfo
from sqljobs.stats import WorkerScope

from .conftest import claim, new_job

COVERS = {
    "register_worker",
    "unregister_worker",
    "live_workers",
    "task_names",
    "task_info",
    "served_tasks",
    "worker_scopes",
    "worker_statuses",
}


def test_a_registered_worker_is_live_and_catalogues_its_tasks(backend: Backend) -> None:
    assert backend.live_workers() == 0 and backend.task_names() == []
    mail = TaskInfo("mail", "outbox", 5, 60.0, 3, None)
    backend.register_worker(WorkerInfo("w1", "host", 1, ["outbox"], 4, 10.0, (mail,)))
    backend.register_worker(WorkerInfo("w2", "host", 2, None, 2, 10.0, ()))
    assert backend.live_workers() == 2
    assert backend.task_names() == ["mail"]
    info = backend.task_info("mail")
    assert info is not None and info.queue == "outbox" and info.priority == 5
    assert backend.task_info("missing") is None
    assert backend.served_tasks() == {"mail"}
    assert WorkerScope(frozenset({"mail"}), frozenset({"outbox"})) in backend.worker_scopes()
    backend.enqueue_jobs([new_job(backend, "mail", queue="outbox")])
    (running,) = claim(backend, "w1")
    statuses = {s.id: s for s in backend.worker_statuses()}
    assert statuses.keys() == {"w1", "w2"}
    assert statuses["w1"].tasks == ["mail"] and statuses["w1"].queues == ["outbox"]
    assert [j.id for j in statuses["w1"].running] == [running.id]
    backend.unregister_worker("w1")
    assert backend.live_workers() == 1
    assert backend.served_tasks() == set(), "no live worker runs mail"
    assert backend.task_names() == ["mail"], "the catalogue outlives its workers"
