"""Enqueueing: batches in one transaction, keys that answer with the job they name, the
caller's transaction, and the async connection an engine declares it can use."""

from __future__ import annotations

import asyncio

import pytest

from sqljobs import ConfigurationError, JobState
from sqljobs.backends import Backend

from ..conftest import is_pg
from .conftest import claim, new_job, pending

COVERS = {"enqueue_jobs", "enqueue_jobs_async"}


def test_a_batch_is_stored_in_order_and_a_key_answers_with_its_job(backend: Backend) -> None:
    made = backend.enqueue_jobs(
        [new_job(backend, "t", 1), new_job(backend, "t", 2, key="k"), new_job(backend, "t", 3)]
    )
    assert [r.created for r in made] == [True, True, True]
    assert [r.id for r in made] == sorted(r.id for r in made)
    (again,) = backend.enqueue_jobs([new_job(backend, "t", 4, key="k")])
    assert again.id == made[1].id and not again.created
    job = backend.get_job(made[1].id)
    assert job is not None and job.args == [2] and job.key == "k"
    assert job.state is JobState.PENDING


def test_a_batch_may_be_a_generator_and_its_failure_stores_nothing(backend: Backend) -> None:
    def jobs() -> object:
        yield new_job(backend, "t", 1)
        raise RuntimeError("building the second job failed")

    with pytest.raises(RuntimeError):
        backend.enqueue_jobs(jobs())  # type: ignore[arg-type]
    assert pending(backend) == 0


def test_an_enqueue_in_the_callers_transaction_commits_with_it(backend: Backend) -> None:
    with pytest.raises(RuntimeError), backend.job_transaction() as conn:
        backend.enqueue_jobs([new_job(backend, "t", 1)], conn)
        raise RuntimeError("rolled back")
    with backend.job_transaction() as conn:
        (made,) = backend.enqueue_jobs([new_job(backend, "t", 2)], conn)
    job = backend.get_job(made.id)
    assert job is not None and job.args == [2]
    assert pending(backend) == 1


def test_an_async_enqueue_works_exactly_where_the_engine_says_it_does(
    backend: Backend, url: str
) -> None:
    job = new_job(backend, "t", 1)
    if not backend.async_connections:
        with pytest.raises(ConfigurationError, match="async connection"):
            asyncio.run(backend.enqueue_jobs_async([job], object()))
        return
    assert is_pg(url)
    import psycopg

    async def enqueue() -> int:
        async with await psycopg.AsyncConnection.connect(url) as conn:
            (made,) = await backend.enqueue_jobs_async([job], conn)
            return made.id

    job_id = asyncio.run(enqueue())
    stored = backend.get_job(job_id)
    assert stored is not None and stored.args == [1]


def test_a_debounced_job_moves_while_pending_and_a_claimed_one_gives_up_its_key(
    backend: Backend,
) -> None:
    start = backend.now() + 30
    (first,) = backend.enqueue_jobs([new_job(backend, "t", 1, key="d", debounce=30.0,
                                             run_at=start)])  # fmt: skip
    (moved,) = backend.enqueue_jobs([new_job(backend, "t", 2, key="d", debounce=30.0,
                                             run_at=start + 10)])  # fmt: skip
    assert first.created and (moved.id, moved.created) == (first.id, False)
    job = backend.get_job(first.id)
    assert job is not None and job.args == [2] and job.debounced == 1
    assert job.run_at == pytest.approx(start + 10)

    (plain,) = backend.enqueue_jobs([new_job(backend, "t", 3, key="d")])  # not debounced
    assert (plain.id, plain.created) == (first.id, False)
    assert backend.get_job(first.id).args == [2]  # type: ignore[union-attr]

    due = [new_job(backend, "t", 4, key="now", debounce=0.0)]
    (claimed_id,) = [r.id for r in backend.enqueue_jobs(due)]
    assert [j.id for j in claim(backend)] == [claimed_id]
    (fresh,) = backend.enqueue_jobs([new_job(backend, "t", 5, key="now", debounce=0.0)])
    assert fresh.created and fresh.id != claimed_id
    running = backend.get_job(claimed_id)
    assert running is not None and running.state is JobState.RUNNING
    assert (running.key, running.released_key, running.args) == (None, "now", [4])
