"""Finding jobs by filter with keyset paging, capped counts, bulk actions by filter or
selection, deleting, live workers with what they run, and a job's children: the facade the
dashboard is built on, on both backends."""

from __future__ import annotations

import threading
from dataclasses import replace
from typing import Any

import pytest

from sqljobs import App, ConfigurationError, JobCount, JobFilter, JobState
from sqljobs.backends.ops import browsing
from sqljobs.testing import stepped_worker

from .conftest import db_execute


def _populate(app: App) -> dict[str, list[int]]:
    """Jobs of two tasks in two queues, with keys and searchable arguments."""

    @app.task(queue="mail")
    def send(to: str) -> None: ...

    @app.task(queue="bill")
    def charge(customer: str, cents: int) -> None: ...

    ids: dict[str, list[int]] = {"send": [], "charge": []}
    for i in range(7):
        ids["send"].append(send.with_options(key=f"send-{i}").enqueue(f"user{i}@Example.org").id)
        ids["charge"].append(charge.enqueue(f"acme-{i % 2}", 100 * i).id)
    return ids


def _ids(jobs: list[Any]) -> list[int]:
    return [j.id for j in jobs]


def test_filters_narrow_and_keyset_pages_cover_every_match_once(app: App) -> None:
    ids = _populate(app)
    every = sorted(ids["send"] + ids["charge"], reverse=True)

    assert _ids(app.find_jobs().jobs) == every  # newest first
    assert _ids(app.find_jobs(JobFilter(queue="mail")).jobs) == sorted(ids["send"], reverse=True)
    assert _ids(app.find_jobs(JobFilter(task="charge")).jobs) == sorted(ids["charge"], reverse=True)
    assert _ids(app.find_jobs(JobFilter(key="send-3")).jobs) == [ids["send"][3]]
    # argument text, case-insensitively: "EXAMPLE" finds "Example"; "acme-1" three charges
    assert len(app.find_jobs(JobFilter(text="EXAMPLE.org")).jobs) == 7
    assert _ids(app.find_jobs(JobFilter(text="acme-1")).jobs) == sorted(
        ids["charge"][1::2], reverse=True
    )
    assert app.find_jobs(JobFilter(state="dead")).jobs == []
    chosen = (ids["send"][0], ids["charge"][6])
    assert sorted(_ids(app.find_jobs(JobFilter(ids=chosen)).jobs)) == sorted(chosen)
    # fields combine: all must match
    assert _ids(app.find_jobs(JobFilter(queue="mail", text="user2")).jobs) == [ids["send"][2]]

    # pages of 4: every job once, in order, and the last page says there is no next
    seen: list[int] = []
    before = None
    while True:
        page = app.find_jobs(before=before, limit=4)
        seen += _ids(page.jobs)
        if page.next_before is None:
            break
        before = page.next_before
    assert seen == every

    # creation time: since included, until not
    created = {j.id: j.created_at for j in app.find_jobs(limit=100).jobs}
    middle = sorted(created.values())[7]
    newer = app.find_jobs(JobFilter(since=middle), limit=100).jobs
    older = app.find_jobs(JobFilter(until=middle), limit=100).jobs
    assert {j.id for j in newer} | {j.id for j in older} == set(every)
    assert not {j.id for j in newer} & {j.id for j in older}
    assert all(j.created_at >= middle for j in newer)


def test_a_text_search_reads_a_bounded_share_per_page_and_goes_on_below(
    app: App, monkeypatch: pytest.MonkeyPatch
) -> None:
    @app.task
    def note(text: str) -> None: ...

    needle = note.enqueue("needle").id
    for _ in range(9):
        note.enqueue("hay")
    monkeypatch.setattr(browsing, "TEXT_SCAN", 4)  # each page reads 4 ids at most
    found: list[int] = []
    pages = 0
    before = None
    while True:
        page = app.find_jobs(JobFilter(text="needle"), before=before)
        pages += 1
        found += _ids(page.jobs)
        if page.next_before is None:
            break
        assert page.next_before < (before or 10**9)  # always further down
        before = page.next_before
    assert found == [needle] and pages == 3  # ids 10..7, 6..3, 2..1


def test_counts_stop_at_their_cap_and_say_when_they_read_only_the_newest(
    app: App, monkeypatch: pytest.MonkeyPatch
) -> None:
    _populate(app)
    # by state and queue: the stats' counts
    assert (app.count_jobs().n, app.count_jobs().capped) == (14, False)
    capped = app.count_jobs(cap=5)
    assert (capped.n, capped.capped, str(capped)) == (5, True, "5+")
    assert app.count_jobs(JobFilter(queue="bill"), cap=7) == JobCount(7, False)
    assert app.count_jobs(JobFilter(state="pending", queue="mail")) == JobCount(7, False)
    # by task: counted in the table, up to the cap
    assert app.count_jobs(JobFilter(task="charge")) == JobCount(7, False)
    assert app.count_jobs(JobFilter(task="charge"), cap=3) == JobCount(3, True)
    # reading only the newest 4 jobs, a count that did not reach the oldest is "at least"
    monkeypatch.setattr(browsing, "COUNT_SCAN", 4)
    assert app.count_jobs(JobFilter(task="charge")) == JobCount(2, True)
    assert app.count_jobs(JobFilter(key="send-0")) == JobCount(1, False)  # by index


def test_bulk_actions_change_exactly_the_matches_in_batches(
    app: App, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(browsing, "BATCH", 3)  # several batches for a few jobs
    ids = _populate(app)
    # cancel the charges of acme-0 only (4 of 7), by filter
    assert app.cancel_jobs(JobFilter(task="charge", text="acme-0")) == 4
    states = {j.id: j.state for j in app.find_jobs(limit=100).jobs}
    cancelled = {i for i, s in states.items() if s is JobState.CANCELLED}
    assert cancelled == set(ids["charge"][0::2])
    # a bulk action only ever touches the states it may change
    assert app.cancel_jobs(JobFilter(task="charge", text="acme-0")) == 0
    assert app.delete_jobs(JobFilter(queue="mail")) == 0  # pending: not deleted
    # retry two of them by selection; the rest stay cancelled
    chosen = tuple(sorted(cancelled)[:2])
    assert app.retry_jobs(JobFilter(ids=chosen)) == 2
    after = {j.id: j.state for j in app.find_jobs(JobFilter(ids=tuple(cancelled))).jobs}
    assert {i for i, s in after.items() if s is JobState.PENDING} == set(chosen)
    retried = app.get_job(chosen[0])
    assert retried is not None and retried.history[-1]["outcome"] == "retried"
    # delete what stayed cancelled
    assert app.delete_jobs(JobFilter(state="cancelled")) == 2
    assert app.count_jobs().n == 12
    assert app.find_jobs(JobFilter(state="cancelled")).jobs == []
    # a state filter the action cannot act on matches nothing
    assert app.retry_jobs(JobFilter(state="pending")) == 0
    with pytest.raises(ConfigurationError, match="only a done, dead or cancelled job"):
        app.delete_job(ids["send"][0])
    assert app.delete_job(10**9) is False


def test_a_cancelled_child_is_not_retried_in_bulk_before_its_parents(app: App) -> None:
    @app.task
    def step(n: int) -> None: ...

    parent = step.enqueue(1)
    child = step.with_options(after=[parent]).enqueue(2)
    assert app.cancel_jobs(JobFilter(ids=(parent.id, child.id))) == 2
    assert app.retry_jobs(JobFilter(ids=(child.id,))) == 0  # its parent is not done
    assert app.retry_jobs(JobFilter(ids=(parent.id,))) == 1
    assert app.job_children(parent.id) == [child.id]
    assert app.job_children(child.id) == []


def test_workers_list_what_each_is_running(app: App) -> None:
    release = threading.Event()

    @app.task(queue="slow")
    def hold(n: int) -> None:
        release.wait(10)

    handles = [hold.enqueue(n) for n in range(2)]
    with stepped_worker(app, concurrency=2, queues=["slow"]) as worker:
        try:
            statuses = worker.until(
                lambda: [w for w in app.workers() if len(w.running) == 2], what="2 running"
            )
            (status,) = statuses
            assert status.id == worker.id and status.queues == ["slow"]
            assert status.concurrency == 2 and "hold" in status.tasks
            assert sorted(j.id for j in status.running) == sorted(h.id for h in handles)
            assert status.last_seen >= status.started_at
        finally:
            release.set()
    assert app.workers() == []  # unregistered when it stops


def test_a_running_job_cannot_be_deleted_and_cancel_reaches_it(app: App) -> None:
    release = threading.Event()

    @app.task
    def long() -> None:
        release.wait(10)

    handle = long.enqueue()
    with stepped_worker(app) as worker:
        try:
            worker.until(lambda: app.workers() and app.workers()[0].running, what="running")
            with pytest.raises(ConfigurationError, match="is running"):
                app.delete_job(handle.id)
            assert app.cancel_jobs(JobFilter(state="running")) == 1
        finally:
            release.set()
    assert handle.refresh().state is JobState.CANCELLED
    assert app.delete_job(handle.id) is True
    assert app.get_job(handle.id) is None


@pytest.mark.parametrize(
    ("fields", "complaint"),
    [
        ({"state": "finished"}, "a state is one of"),
        ({"queue": ""}, "queue"),
        ({"task": ""}, "non-empty string"),
        ({"text": "x" * 201}, "at most 200"),
        ({"since": "yesterday"}, "Unix seconds"),
        ({"since": 10.0, "until": 5.0}, "since must come before until"),
        ({"ids": (1, "2")}, "is not a job id"),
        ({"ids": tuple(range(1, 10_002))}, "at most 10000"),
    ],
)
def test_a_bad_filter_is_refused_by_name(fields: dict[str, Any], complaint: str) -> None:
    with pytest.raises(ConfigurationError, match=complaint):
        JobFilter(**fields)


def test_bad_paging_is_refused(app: App) -> None:
    for bad in ({"limit": 0}, {"limit": 1001}, {"before": "9"}):
        with pytest.raises(ConfigurationError):
            app.find_jobs(**bad)
    with pytest.raises(ConfigurationError, match="cap"):
        app.count_jobs(cap=0)


def test_the_children_index_exists(app: App) -> None:
    """A job's children are found through the partial index on jobs that have parents."""
    app.migrate()
    rows = db_execute(
        app,
        "SELECT name FROM sqlite_master WHERE name = 'sqljobs_jobs_dependent'",
        "SELECT indexname FROM pg_indexes WHERE indexname = 'sqljobs_jobs_dependent'",
    )
    assert rows


def test_time_bounds_find_exactly_the_jobs_created_between_them(app: App) -> None:
    @app.task
    def tick(n: int) -> None: ...

    ids = [tick.enqueue(n).id for n in range(30)]
    base = 1_800_000_000.0  # each job created 10 s after the one before it
    db_execute(
        app,
        "UPDATE sqljobs_jobs SET created_at = ? + 10 * id",
        "UPDATE sqljobs_jobs SET created_at = to_timestamp(%s + 10 * id)",
        (base,),
    )
    gone = ids[10:13]  # gaps in the ids: the search steps over them
    assert app.cancel_jobs(JobFilter(ids=tuple(gone))) == 3
    assert app.delete_jobs(JobFilter(ids=tuple(gone))) == 3

    def created(first: int, last: int) -> set[int]:
        return {i for i in ids if first <= i <= last and i not in gone}

    since, until = base + 10 * ids[5] + 5, base + 10 * ids[20]  # between jobs; on one
    window = JobFilter(since=since, until=until)
    assert {j.id for j in app.find_jobs(window, limit=100).jobs} == created(ids[6], ids[19])
    assert app.count_jobs(window).n == len(created(ids[6], ids[19]))
    assert {j.id for j in app.find_jobs(JobFilter(since=base + 10 * ids[11])).jobs} == (
        created(ids[13], ids[-1])  # a bound in a gap starts at the next job
    )
    assert app.find_jobs(JobFilter(since=base + 10**6)).jobs == []  # after every job
    assert app.find_jobs(JobFilter(until=base)).jobs == []  # before every job
    assert app.cancel_jobs(JobFilter(until=base + 10 * ids[3])) == 3  # jobs 1..3


def test_bounded_scans_start_where_the_time_bounds_do(
    app: App, monkeypatch: pytest.MonkeyPatch
) -> None:
    @app.task
    def work(item: str) -> None: ...

    @app.task
    def old(item: str) -> None: ...

    olds = [old.enqueue(f"item {i}").id for i in range(5)]
    for i in range(40):
        work.enqueue(f"item {i}")
    base = 1_800_000_000.0
    db_execute(
        app,
        "UPDATE sqljobs_jobs SET created_at = ? + id",
        "UPDATE sqljobs_jobs SET created_at = to_timestamp(%s + id)",
        (base,),
    )
    monkeypatch.setattr(browsing, "COUNT_SCAN", 10)
    monkeypatch.setattr(browsing, "TEXT_SCAN", 10)
    # the old jobs lie beyond the newest 10: a count says "at least", never "none"
    assert app.count_jobs(JobFilter(task="old")) == JobCount(0, True)
    # within time bounds the share is read from the bound down, and is exact when whole
    early = JobFilter(until=base + olds[-1] + 1)
    assert app.count_jobs(replace(early, task="old")) == JobCount(5, False)
    page = app.find_jobs(replace(early, text="item"))
    assert [j.id for j in page.jobs] == olds[::-1] and page.next_before is None
    late = JobFilter(since=base + 40, text="item")  # ids 40..45: one share, exact
    assert app.count_jobs(late) == JobCount(6, False)
    # a bulk action reaches every match, however far down
    assert app.cancel_jobs(JobFilter(task="old")) == 5


def test_a_filter_up_to_an_id_leaves_newer_jobs_alone(app: App) -> None:
    @app.task
    def work(n: int) -> None: ...

    first = [work.enqueue(n).id for n in range(3)]
    later = work.enqueue(99).id  # enqueued after a confirmation counted three
    assert app.count_jobs(JobFilter(task="work", up_to=first[-1])) == JobCount(3, False)
    assert app.cancel_jobs(JobFilter(task="work", up_to=first[-1])) == 3
    assert app.get_job(later).state is JobState.PENDING  # type: ignore[union-attr]


def test_text_search_folds_case_and_leaves_out_what_tasks_redact(app: App) -> None:
    @app.task
    def greet(name: str) -> None: ...

    @app.task(redact=["card"])
    def charge(customer: str, card: str) -> None: ...

    emile = greet.enqueue("Émile Zola").id
    charge.enqueue("Émile Zola", "4111-1111")
    assert [j.id for j in app.find_jobs(JobFilter(text="Émile")).jobs] == [emile]
    assert [j.id for j in app.find_jobs(JobFilter(text="ZOLA")).jobs] == [emile]
    # the charge matches neither its customer nor its hidden card: a search that found it
    # by "4111" would tell what its page hides
    assert app.find_jobs(JobFilter(text="4111")).jobs == []
    assert app.count_jobs(JobFilter(text="4111")).n == 0
    assert app.cancel_jobs(JobFilter(text="Zola")) == 1  # the greeting only


@pytest.mark.parametrize(
    "call",
    [
        lambda app: JobFilter(since=float("nan")),
        lambda app: JobFilter(until=float("inf")),
        lambda app: JobFilter(ids=5),  # type: ignore[arg-type]
        lambda app: JobFilter(up_to=0),
        lambda app: app.find_jobs(before=2**70),
        lambda app: app.job_children(1, limit=-1),
    ],
)
def test_more_bad_input_is_refused_by_name(app: App, call: Any) -> None:
    with pytest.raises(ConfigurationError):
        call(app)
