"""Mistakes are refused where they are made, with an error that names what was wrong, and
nothing is stored: unknown task names, bad queue names, oversized payloads, impossible
times and durations, a SQLite path into a directory that does not exist."""

from __future__ import annotations

import datetime as dt
import math
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import sqljobs
import sqljobs.enqueue
import sqljobs.worker
import sqljobs.worker.run
from sqljobs import App, ConfigurationError, PayloadError, Retry
from sqljobs.errors import PayloadTooLarge, UnknownTask
from sqljobs.handles import JobHandle
from sqljobs.jobs import TaskInfo
from sqljobs.validate import check_queues

AT = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)


@pytest.fixture
def offline(tmp_path: Path) -> App:
    """An app whose database is never opened: for mistakes refused at definition time."""
    return App(f"sqlite:///{tmp_path / 'never-opened.db'}")


def nothing_stored(app: App) -> bool:
    return app.list_jobs() == []


# -- unknown task names ----------------------------------------------------------------


def test_enqueue_by_an_unknown_name_is_refused_with_close_matches(app: App) -> None:
    @app.task
    def greet(name: str) -> None: ...

    with pytest.raises(UnknownTask, match=r"unknown task 'gret' \(did you mean 'greet'\?\)") as e:
        app.enqueue("gret", args=["ada"])
    assert "known=False" in str(e.value) and "--remote" in str(e.value)
    assert (e.value.task, e.value.suggestions) == ("gret", ("greet",))
    assert isinstance(e.value, ConfigurationError)
    assert nothing_stored(app)


def test_known_false_enqueues_a_task_only_another_service_registers(app: App) -> None:
    handle = app.enqueue("elsewhere", args=[1], known=False)
    job = handle.job()
    assert job is not None
    assert (job.task, job.queue, job.lease) == ("elsewhere", "default", app.default_lease)


def test_a_task_a_worker_registered_lends_its_defaults(
    app: App, monkeypatch: pytest.MonkeyPatch
) -> None:
    remote = TaskInfo("mailer", "mail", 3, 12.0, 7, 600.0)
    monkeypatch.setattr(
        sqljobs.enqueue, "catalogued_task", lambda app, name: remote if name == "mailer" else None
    )
    before = app.clock()
    job = app.enqueue("mailer", args=["hi"]).job()
    assert job is not None
    assert (job.queue, job.priority, job.lease, job.max_attempts) == ("mail", 3, 12.0, 7)
    assert job.deadline_at is not None and job.deadline_at >= before + 600
    with pytest.raises(UnknownTask, match="'mailr'"):
        app.enqueue("mailr")


def test_a_schedule_of_an_unknown_task_is_refused(app: App) -> None:
    @app.task
    def send_report(tenant: str) -> None: ...

    with pytest.raises(UnknownTask, match=r"'send_reprot' \(did you mean 'send_report'\?\)"):
        app.schedule("r:acme", every=60, task="send_reprot", kwargs={"tenant": "acme"})
    assert app.list_schedules() == []
    app.schedule("r:acme", every=60, task="send_reprot", kwargs={"tenant": "acme"}, known=False)
    assert [s.schedule.task for s in app.list_schedules()] == ["send_reprot"]


# -- queue names -----------------------------------------------------------------------

BAD_QUEUES = ["a,b", "mail\n", "", "q" * 65, "two words", 5]


@pytest.mark.parametrize("bad", BAD_QUEUES)
def test_bad_queue_names_are_refused_where_they_are_given(offline: App, bad: Any) -> None:
    def where(text: str) -> str:
        return rf"queue name {re.escape(repr(bad))} \(in {re.escape(text)}\) is not valid: use 1-64"

    with pytest.raises(ConfigurationError, match=where("@app.task(queue=...)")):
        offline.task(queue=bad)(lambda: None)
    with pytest.raises(ConfigurationError, match=where("@app.periodic(queue=...)")):
        offline.periodic(every=60, queue=bad)(lambda: None)
    with pytest.raises(ConfigurationError, match=where("App(default_queue=...)")):
        App(offline.url, default_queue=bad)
    with pytest.raises(ConfigurationError, match=where("run_worker(queues=...)")):
        offline.run_worker(queues=[bad])

    @offline.task
    def t() -> None: ...

    with pytest.raises(ConfigurationError, match=where("with_options(queue=...)")):
        t.with_options(queue=bad)
    with pytest.raises(ConfigurationError, match=where("app.enqueue(queue=...)")):
        offline.enqueue("t", queue=bad)
    with pytest.raises(ConfigurationError, match=where("app.schedule(queue=...)")):
        offline.schedule("s", every=60, task="t", queue=bad)
    assert offline._backend is None, "a refusal opened the database"


def test_a_queue_name_of_the_documented_characters_is_accepted(app: App) -> None:
    @app.task(queue="mail.high:eu-1_b")
    def t() -> None: ...

    job = t.enqueue().job()
    assert job is not None and job.queue == "mail.high:eu-1_b"


# -- run_worker arguments --------------------------------------------------------------


class _Stopped(Exception):
    pass


def test_run_worker_takes_a_string_as_one_queue(
    offline: App, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[sqljobs.WorkerConfig] = []

    class FakeWorker:
        def __init__(self, app: App, config: sqljobs.WorkerConfig) -> None:
            seen.append(config)

        def run(self) -> None:
            raise _Stopped

    monkeypatch.setattr(sqljobs.worker.run, "Worker", FakeWorker)
    with pytest.raises(_Stopped):
        offline.run_worker(queues="default")
    assert seen[0].queues == ("default",)
    assert check_queues(("a", "b"), "here") == ("a", "b")
    assert check_queues(None, "here") is None


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"queues": 5}, r"run_worker\(queues=...\) must be a queue name or a list"),
        ({"queues": {"a"}}, r"must be a queue name or a list of queue names, got set"),
        ({"queues": b"default"}, "got bytes"),
        ({"processes": 0}, "processes must be an int >= 1, got 0"),
        ({"processes": "2"}, "processes must be an int >= 1, got '2'"),
    ],
)
def test_run_worker_refuses_bad_arguments(
    offline: App, options: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigurationError, match=message):
        offline.run_worker(**options)


# -- payload size ----------------------------------------------------------------------


def test_a_payload_over_the_limit_is_refused_naming_task_size_and_limit(url: str) -> None:
    app = App(url, max_payload=1000)

    @app.task
    def big(blob: str) -> None: ...

    def too_big(prefix: str = "", task: str = "big") -> Any:
        return pytest.raises(
            PayloadTooLarge,
            match=rf"{prefix}payload of task '{task}' is 1,\d{{3}} bytes of JSON, over the "
            r"limit of 1,000 bytes: pass a reference .* App\(max_payload=\.\.\.\)",
        )

    blob = "x" * 1000
    with too_big():
        big.enqueue(blob)
    with too_big():
        big.with_options(priority=1).enqueue(blob)
    with too_big(r"enqueue_many call 1: "):
        big.enqueue_many([("small",), (blob,)])
    with too_big():
        app.enqueue("big", args=[blob])
    with too_big():
        app.schedule("s", every=60, task="big", kwargs={"blob": blob})
    assert nothing_stored(app) and app.list_schedules() == []
    with too_big(task="p"):
        app.periodic(every=60, name="p", kwargs={"blob": blob})(lambda blob: None)
    assert "p" not in app.tasks


def test_the_limit_counts_utf8_bytes_of_the_json(url: str) -> None:
    app = App(url, max_payload=100)

    @app.task
    def t(text: str) -> None: ...

    frame = len('{"args":[""],"kwargs":{}}')
    t.enqueue("x" * (100 - frame))  # exactly at the limit
    with pytest.raises(PayloadError, match="101 bytes"):
        t.enqueue("x" * (101 - frame))
    with pytest.raises(PayloadError, match="over the limit"):
        t.enqueue("é" * (100 - frame))  # two bytes each
    assert len(app.list_jobs()) == 1


def test_the_default_limit_is_one_mebibyte(app: App) -> None:
    @app.task
    def t(blob: str) -> None: ...

    with pytest.raises(PayloadTooLarge, match="over the limit of 1,048,576 bytes"):
        t.enqueue("x" * (1024 * 1024))
    assert nothing_stored(app)


@pytest.mark.parametrize("bad", [0, -1, None, True, 1.5])
def test_max_payload_must_be_a_positive_int(tmp_path: Path, bad: Any) -> None:
    with pytest.raises(ConfigurationError, match=rf"max_payload must be a positive .* {bad!r}"):
        App(f"sqlite:///{tmp_path / 'x.db'}", max_payload=bad)


# -- times and durations ---------------------------------------------------------------


def test_delay_and_run_at_together_are_refused(app: App) -> None:
    @app.task
    def t() -> None: ...

    with pytest.raises(ConfigurationError, match="delay or run_at, not both"):
        app.enqueue("t", delay=5, run_at=AT)
    with pytest.raises(ConfigurationError, match="delay or run_at, not both"):
        t.with_options(delay=5, run_at=AT)
    assert nothing_stored(app)


def test_enqueue_by_name_converts_a_run_at_datetime(app: App) -> None:
    @app.task
    def t() -> None: ...

    job = app.enqueue("t", run_at=AT).job()
    assert job is not None and job.run_at == AT.timestamp()
    with pytest.raises(ConfigurationError, match="run_at must be a timezone-aware datetime"):
        app.enqueue("t", run_at=dt.datetime(2030, 1, 1))
    assert len(app.list_jobs()) == 1


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_times_are_refused_naming_the_parameter(app: App, bad: float) -> None:
    @app.task
    def t() -> None: ...

    for name in ("delay", "run_at"):
        option: dict[str, Any] = {name: bad}
        with pytest.raises(ConfigurationError, match=rf"{name} must be .*finite"):
            app.enqueue("t", **option)
        with pytest.raises(ConfigurationError, match=rf"{name} must be .*finite"):
            t.with_options(**option)
    with pytest.raises(ConfigurationError, match="key_scope must be a finite"):
        t.with_options(key="k", key_scope=bad)
    assert nothing_stored(app)


@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_non_finite_durations_are_refused_at_definition(offline: App, bad: float) -> None:
    url = offline.url
    cases: list[tuple[str, Any]] = [
        ("lease", lambda: offline.task(lease=bad)(lambda: None)),
        ("timeout", lambda: offline.task(timeout=bad)(lambda: None)),
        ("retention", lambda: App(url, retention=bad)),
        ("default_lease", lambda: App(url, default_lease=bad)),
        ("Retry base", lambda: Retry(base=bad)),
        ("Retry cap", lambda: Retry(cap=bad)),
        ("Retry deadline", lambda: Retry(deadline=bad)),
        ("Retry max_attempts", lambda: Retry(max_attempts=bad)),  # type: ignore[arg-type]
        ("every", lambda: offline.periodic(every=bad)(lambda: None)),
    ]
    for name, define in cases:
        with pytest.raises(ConfigurationError, match=name):
            define()
    assert offline.tasks == {}


def test_zero_or_negative_leases_and_timeouts_are_refused(offline: App) -> None:
    with pytest.raises(ConfigurationError, match="lease must be > 0 seconds, got 0"):
        offline.task(lease=0)(lambda: None)
    with pytest.raises(ConfigurationError, match="lease must be >= 0 seconds, got -1"):
        offline.task(lease=-1)(lambda: None)
    with pytest.raises(ConfigurationError, match="timeout must be > 0 seconds, got 0"):
        offline.task(timeout=dt.timedelta(0))(lambda: None)
    with pytest.raises(ConfigurationError, match="default_lease must be > 0 seconds, got 0"):
        App(offline.url, default_lease=0)
    with pytest.raises(ConfigurationError, match="Retry max_attempts must be an int"):
        Retry(max_attempts=2.5)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="delay must be seconds"):
        offline.enqueue("t", delay="soon", known=False)  # type: ignore[arg-type]
    assert offline.tasks == {}


# -- SQLite URLs -----------------------------------------------------------------------


def test_a_sqlite_file_in_a_missing_directory_is_refused(tmp_path: Path) -> None:
    missing = tmp_path / "no" / "such"
    app = App(f"sqlite:///{missing / 'jobs.db'}")
    with pytest.raises(ConfigurationError, match=f"directory {missing} does not exist"):
        app.enqueue("t", known=False)
    assert not (tmp_path / "no").exists()


def test_a_relative_sqlite_path_is_resolved_and_shown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    app = App("sqlite:///jobs.db")
    assert f"(file {tmp_path / 'jobs.db'})" in repr(app)
    typo = App("sqlite:///data/jobs.db")
    with pytest.raises(ConfigurationError, match=f"directory {tmp_path / 'data'} does not"):
        typo.migrate()
    assert os.listdir(tmp_path) == []


def test_a_handle_without_an_app_says_so() -> None:
    with pytest.raises(ConfigurationError, match="handle 7 is not bound to an app"):
        JobHandle(7, True).job()


def test_an_enqueue_by_name_elsewhere_takes_the_catalogue_defaults_and_its_names(
    url: str,
) -> None:
    """A worker records its tasks; a process that lacks them (another service, the CLI)
    enqueues with their queue, lease and retry policy, and a typo gets a close match."""
    from sqljobs import Retry, UnknownTask
    from sqljobs.backends import WorkerInfo

    service = App(url)
    greet = service.task(
        name="greet", queue="mail", lease=7, retry=Retry(max_attempts=9, deadline=600)
    )(lambda who: None)
    service.backend.register_worker(WorkerInfo("w1", "host", 1, None, 1, 1.0, (greet.info,)))
    elsewhere = App(url)
    job = elsewhere.enqueue("greet", args=["ada"]).job()
    assert job is not None
    assert (job.queue, job.lease, job.max_attempts) == ("mail", 7.0, 9)
    assert job.deadline_at is not None
    assert job.deadline_at - job.created_at == pytest.approx(600, abs=1)
    with pytest.raises(UnknownTask, match="did you mean 'greet'"):
        elsewhere.enqueue("gret", args=["ada"])
    with pytest.raises(UnknownTask, match=r"\(did you mean 'greet'\?\)"):  # named once
        service.enqueue("gret", args=["ada"])  # greet: registered here and catalogued


def test_an_apps_repr_never_shows_a_password() -> None:
    app = App("postgresql://alice:s3cret@db.example/jobs")
    assert "s3cret" not in repr(app) and "alice:***@db.example" in repr(app)


def test_a_postgres_url_without_psycopg_names_the_extra_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Only a missing psycopg earns the install hint; an import error inside sqljobs itself
    surfaces as it is (the hint would send the user the wrong way)."""
    import sys

    from sqljobs.backends import open_backend

    def forget_the_postgres_engine() -> None:
        for name in [m for m in sys.modules if m.startswith("sqljobs.backends.postgres")]:
            monkeypatch.delitem(sys.modules, name)

    forget_the_postgres_engine()
    monkeypatch.setitem(sys.modules, "psycopg", None)  # as if not installed
    with pytest.raises(ConfigurationError, match=r"pip install 'sqljobs\[postgres\]'"):
        open_backend("postgresql://user:secret@127.0.0.1/db")
    monkeypatch.undo()
    forget_the_postgres_engine()
    monkeypatch.setitem(sys.modules, "sqljobs.humanize", None)  # a broken install
    with pytest.raises(ImportError) as raised:
        open_backend("postgresql://user@127.0.0.1/db")
    assert not isinstance(raised.value, ConfigurationError)


# -- job ids and states that cannot be -------------------------------------------------


def test_list_jobs_refuses_a_state_or_queue_that_cannot_be(app: App) -> None:
    """A typo once listed nothing, quietly, as if there were no such jobs."""
    app.enqueue("t", known=False)
    with pytest.raises(ConfigurationError, match=r"state='bogus'.*one of pending, waiting"):
        app.list_jobs(state="bogus")
    with pytest.raises(ConfigurationError, match="queue"):
        app.list_jobs(queue="")
    assert [j.state.value for j in app.list_jobs(state="pending")] == ["pending"]


@pytest.mark.parametrize("job_id", [2**63, 2**70, -(2**70)])
def test_every_id_taking_call_refuses_an_id_out_of_64_bits_naming_it(app: App, job_id: int) -> None:
    """retry_job() once raised the driver's OverflowError; each says what it was given."""
    calls: dict[str, Callable[[], object]] = {
        "job": lambda: app.job(job_id),
        "cancel": lambda: app.cancel(job_id),
        "cancel_job": lambda: app.cancel_job(job_id),
        "retry_job": lambda: app.retry_job(job_id),
        "delete_job": lambda: app.delete_job(job_id),
        "job_children": lambda: app.job_children(job_id),
    }
    for name, call in calls.items():
        with pytest.raises(ConfigurationError, match=f"job id .*{job_id}") as refused:
            call()
        assert refused.value.__cause__ is None, name
    assert app.get_job(job_id) is None  # a lookup: no job has it
