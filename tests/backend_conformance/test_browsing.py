"""Reading jobs: one by id, a listing, pages and counts of a filter, a job's children,
and the queue's statistics."""

from __future__ import annotations

from sqljobs import JobState
from sqljobs.backends import Backend
from sqljobs.backends.base import JobListing, JobSearch
from sqljobs.jobs import JobFilter

from .conftest import claim, new_job

COVERS = {"get_job", "list_jobs", "find_jobs", "count_jobs", "job_children", "stats"}


def test_jobs_are_read_by_id_and_listed_newest_first(backend: Backend) -> None:
    made = backend.enqueue_jobs(
        [new_job(backend, "t", 1), new_job(backend, "t", 2, queue="mail"), new_job(backend, "u")]
    )
    ids = [r.id for r in made]
    assert backend.get_job(ids[0]) is not None and backend.get_job(10**9) is None
    assert [j.id for j in backend.list_jobs(JobListing())] == ids[::-1]
    assert [j.id for j in backend.list_jobs(JobListing(queue="mail"))] == [ids[1]]
    assert [j.id for j in backend.list_jobs(JobListing(limit=1))] == [ids[2]]
    claim(backend, limit=1)
    assert [j.id for j in backend.list_jobs(JobListing(state="running"))] == [ids[0]]


def test_a_filter_pages_newest_first_and_counts_up_to_a_cap(backend: Backend) -> None:
    made = backend.enqueue_jobs([new_job(backend, "t", i) for i in range(5)])
    backend.enqueue_jobs([new_job(backend, "u")])
    ids = [r.id for r in made]
    page = backend.find_jobs(JobSearch(JobFilter(task="t"), None, 3))
    assert [j.id for j in page.jobs] == ids[::-1][:3]
    assert page.next_before is not None
    rest = backend.find_jobs(JobSearch(JobFilter(task="t"), page.next_before, 3))
    assert [j.id for j in rest.jobs] == ids[::-1][3:]
    count = backend.count_jobs(JobFilter(task="t"), 100)
    assert (count.n, count.capped) == (5, False)
    capped = backend.count_jobs(JobFilter(), 3)
    assert capped.capped and capped.n >= 3


def test_a_jobs_children_are_the_jobs_that_wait_for_it(backend: Backend) -> None:
    (parent, other) = backend.enqueue_jobs([new_job(backend, "t", 1), new_job(backend, "t", 2)])
    children = backend.enqueue_jobs(
        [new_job(backend, "t", 3 + i, after=(parent.id,)) for i in range(3)]
        + [new_job(backend, "t", 9, after=(other.id,))]
    )
    assert backend.job_children(parent.id, 2) == [c.id for c in children[:2]]
    assert backend.job_children(children[0].id, 5) == []


def test_stats_count_each_queue_by_state(backend: Backend) -> None:
    backend.enqueue_jobs([new_job(backend, "t", i) for i in range(3)])
    claim(backend, limit=1)
    counts = backend.stats().counts["default"]
    assert counts[JobState.PENDING.value] == 2 and counts[JobState.RUNNING.value] == 1
