"""Control over work in flight from the command line: queues listed, paused and resumed;
a job's result and progress shown; one job or many cancelled, saying what becomes of a
running one. The CLI runs in-process (click's runner) beside a worker thread, on both
backends; test_cli.py runs it as a subprocess, as a user does."""

from __future__ import annotations

import json
import re
import threading
import time
import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from sqljobs import App, JobContext, JobState
from sqljobs.cli import Ctx, cli
from sqljobs.testing import stepped_worker

from .conftest import db_execute

RAW_TIME = re.compile(r"\b1\d{9}(\.\d+)?\b")  # a Unix timestamp, as a person should not see
RUNNING_CANCELLED = (
    "cancelled while running: its worker is told to stop within a heartbeat (the handler "
    "sees ctx.cancelled), and its outcome will be discarded"
)


def sqljobs(url: str, *args: str, answer: str | None = None, app: str | None = None) -> Result:
    """``sqljobs --url URL ARGS`` (or ``--app MODULE:ATTR``) at an 80-column terminal;
    ``answer`` is what the person types at a prompt."""
    where = ["--app", app] if app else ["--url", url]
    return CliRunner(env={"COLUMNS": "80"}).invoke(
        cli, [*where, *args], input=answer, obj=Ctx(), catch_exceptions=False
    )


def assert_fits(out: str, width: int = 80) -> None:
    long = [line for line in out.splitlines() if len(line) > width]
    assert not long, f"lines wider than {width}:\n" + "\n".join(long)


def _line(out: str, start: str) -> str:
    return next(line for line in out.splitlines() if line.startswith(start))


# -- queues ------------------------------------------------------------------------------


def test_queues_are_listed_paused_and_resumed(app: App) -> None:
    url = app.url
    mail_began = time.time()
    for _ in range(2):
        app.enqueue("send", queue="mail", known=False)
    mail_enqueued = time.time()
    app.enqueue("monthly", queue="reports", known=False)

    listed = sqljobs(url, "queues").stdout
    assert_fits(listed)
    assert re.search(r"^mail +no +2 +0 +0 +0 +0 +\S", listed, re.M), listed
    assert re.search(r"^reports +no +1 ", listed, re.M)
    same = sqljobs(url, "queues", "list").stdout  # the group alone lists too
    assert [line[:40] for line in same.splitlines()] == [line[:40] for line in listed.splitlines()]

    paused = sqljobs(url, "queues", "pause", "mail")
    assert paused.stdout == (
        "queue mail paused: workers take no new jobs from it; running jobs finish\n"
    )
    assert paused.stderr == "", "a queue with jobs is no typo"
    assert sqljobs(url, "queues", "pause", "mail").stdout == "queue mail was already paused\n"
    assert [q.name for q in app.queues() if q.paused] == ["mail"]

    listed = sqljobs(url, "queues").stdout
    assert_fits(listed)
    assert not RAW_TIME.search(listed), listed
    assert re.search(r"^mail +yes, \d+ ms +2 ", _line(listed, "mail ")), listed
    assert re.search(r"^reports +no ", _line(listed, "reports "))
    assert re.search(r"^mail paused since \d{4}-\d\d-\d\d \d\d:\d\d:\d\d \S+$", listed, re.M)
    assert "sqljobs queues resume NAME" in listed

    asked = time.time()
    raw = {q["name"]: q for q in json.loads(sqljobs(url, "queues", "list", "--json").stdout)}
    answered = time.time()
    assert raw["mail"]["paused"] is True and abs(raw["mail"]["paused_at"] - time.time()) < 60
    assert raw["mail"]["counts"]["pending"] == 2
    # the oldest mail job's wait so far (1 ms: PostgreSQL keeps microseconds)
    age = raw["mail"]["oldest_due_age"]
    assert asked - mail_enqueued - 0.001 <= age <= answered - mail_began + 0.001
    assert raw["reports"]["paused"] is False and raw["reports"]["paused_at"] is None
    bare = json.loads(sqljobs(url, "queues", "--json").stdout)
    assert [(q["name"], q["paused_at"]) for q in bare] == [
        ("mail", raw["mail"]["paused_at"]),
        ("reports", None),
    ]

    stats = sqljobs(url, "stats").stdout
    assert_fits(stats)
    assert "paused queues (no new jobs taken): mail" in stats
    assert re.search(r"^mail \(paused\) +2 ", stats, re.M), stats
    assert json.loads(sqljobs(url, "stats", "--json").stdout)["paused"] == ["mail"]

    resumed = sqljobs(url, "queues", "resume", "mail").stdout
    assert resumed == "queue mail resumed: workers take its jobs again\n"
    assert sqljobs(url, "queues", "resume", "mail").stdout == "queue mail was not paused\n"
    assert not any(q.paused for q in app.queues())
    stats = sqljobs(url, "stats").stdout
    assert "paused queues" not in stats and "(paused)" not in stats


def test_a_queue_name_is_checked_and_a_likely_typo_is_pointed_out(app: App) -> None:
    app.enqueue("send", queue="mail", known=False)
    for command in ("pause", "resume"):
        bad = sqljobs(app.url, "queues", command, "bad name")
        assert bad.exit_code == 2, bad.output
        assert "queue name 'bad name'" in bad.stderr and "use 1-64 letters" in bad.stderr
    assert app.queues()[0].name == "mail" and len(app.queues()) == 1, "nothing stored"

    typo = sqljobs(app.url, "queues", "pause", "mial")
    assert typo.exit_code == 0 and typo.stdout.startswith("queue mial paused")
    assert "no job or task of this app uses queue 'mial' yet (a typo?)" in typo.stderr
    assert [q.name for q in app.queues() if q.paused] == ["mial"], "paused all the same"


def test_a_paused_queue_shown_by_the_cli_is_one_workers_leave_alone(app: App) -> None:
    @app.task(queue="mail")
    def send(n: int) -> int:
        return n

    assert sqljobs(app.url, "queues", "pause", "mail").exit_code == 0
    held = send.enqueue(1)
    with stepped_worker(app) as worker:
        elsewhere = app.enqueue("send", [1], queue="other")
        assert worker.result(elsewhere) == 1, "the worker works"
        assert held.refresh().state is JobState.PENDING
        assert sqljobs(app.url, "queues", "resume", "mail").exit_code == 0
        assert worker.result(held) == 1
        worker.until_event("finished", job_id=held.id)


# -- results and progress ----------------------------------------------------------------


def test_jobs_show_and_list_give_progress_while_it_runs_and_the_result_after(app: App) -> None:
    go_on = threading.Event()

    @app.task
    def export(ctx: JobContext, pages: int) -> dict[str, object]:
        ctx.progress(1, total=pages, note="page 1")
        go_on.wait(20)
        ctx.progress(pages, total=pages, note="all pages")
        return {"pages": pages, "files": [f"part-{i}.pdf" for i in range(pages)]}

    handle = export.enqueue(10)
    with stepped_worker(app) as worker:
        worker.until(lambda: app.job(handle.id).refresh().progress, what="the progress report")
        shown = sqljobs(app.url, "jobs", "show", str(handle.id)).stdout
        assert_fits(shown)
        assert not RAW_TIME.search(shown), shown
        progress = _line(shown, "progress")
        assert re.fullmatch(
            r"progress +1/10 \(10%\) page 1; reported \d{4}-\d\d-\d\d \d\d:\d\d:\d\d \S+ "
            r"\(\d.* ago\)",
            progress,
        ), progress
        assert re.fullmatch(r"result +-", _line(shown, "result")), "not done yet"
        raw = json.loads(sqljobs(app.url, "jobs", "show", str(handle.id), "--json").stdout)
        assert raw["state"] == "running" and raw["result"] is None
        assert raw["progress"]["done"] == 1 and raw["progress"]["total"] == 10
        assert raw["progress"]["note"] == "page 1" and raw["progress"]["updated_at"] > 0

        listed = sqljobs(app.url, "jobs", "list").stdout
        assert_fits(listed)
        assert "progress" in listed.splitlines()[0] and "1/10 (10%) page 1" in listed
        wide = CliRunner(env={"COLUMNS": "200"}).invoke(
            cli, ["--url", app.url, "jobs", "list"], obj=Ctx()
        )
        assert "1/10 (10%) page 1" in wide.stdout

        go_on.set()
        assert worker.result(handle)["pages"] == 10

    shown = sqljobs(app.url, "jobs", "show", str(handle.id)).stdout
    assert_fits(shown)
    result = shown.split("result", 1)[1].split("last error")[0]
    assert json.loads(result) == {"pages": 10, "files": [f"part-{i}.pdf" for i in range(10)]}
    assert "\n" in result.strip(), "a long result is indented, one item a line"
    assert "10/10 (100%) all pages" in _line(shown, "progress"), "the last report is kept"
    raw = json.loads(sqljobs(app.url, "jobs", "show", str(handle.id), "--json").stdout)
    assert raw["result"]["pages"] == 10 and raw["progress"]["note"] == "all pages"
    listed = sqljobs(app.url, "jobs", "list").stdout
    assert "progress" not in listed.splitlines()[0], "no column when nothing running reports"


def test_a_done_job_without_a_result_says_whether_it_was_stored(
    app: App, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = f"quiet_app_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{module}.py").write_text(
        "import sqljobs\n"
        f"app = sqljobs.App({app.url!r})\n"
        "@app.task(store_result=False)\n"
        "def quiet() -> dict:\n"
        "    return {'big': 'data'}\n"
        "@app.task\n"
        "def silent() -> None: ...\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    app.task(name="quiet", store_result=False)(lambda: {"big": "data"})
    app.task(name="silent")(lambda: None)
    quiet, silent = app.enqueue("quiet"), app.enqueue("silent")
    with stepped_worker(app) as worker:
        assert worker.result(quiet) is None and worker.result(silent) is None

    def result_line(job_id: int, via_app: bool) -> str:
        spec = f"{module}:app" if via_app else None
        return _line(sqljobs(app.url, "jobs", "show", str(job_id), app=spec).stdout, "result")

    not_stored = "(not stored: the task has store_result=False)"
    assert result_line(quiet.id, via_app=True).endswith(not_stored)
    assert result_line(quiet.id, via_app=False).endswith("(none)"), "no app: not known"
    assert result_line(silent.id, via_app=True).endswith("(none)")


# -- cancelling ----------------------------------------------------------------------------


def test_cancelling_a_running_job_says_what_its_worker_does(app: App) -> None:
    started = threading.Event()
    seen: list[str] = []

    @app.task(lease=0.9)  # on SQLite the worker learns at its heartbeat, every 0.3 s
    def crawl(ctx: JobContext) -> str:
        started.set()
        while not ctx.cancelled:
            time.sleep(0.01)
        seen.append("cancelled")
        return "finished anyway"

    handle = crawl.enqueue()
    with stepped_worker(app) as worker:
        worker.until(started.is_set, what="the handler to start")
        out = sqljobs(app.url, "jobs", "cancel", str(handle.id))
        assert out.stdout == f"job {handle.id} {RUNNING_CANCELLED}\n"
        worker.until_event("cancelled", job_id=handle.id)
        worker.until_event("discarded", job_id=handle.id)
    assert seen == ["cancelled"]
    job = handle.refresh()
    assert job.state is JobState.CANCELLED and job.result is None
    again = sqljobs(app.url, "jobs", "cancel", str(handle.id))
    assert again.exit_code == 0 and again.stdout == f"job {handle.id} was already cancelled\n"
    missing = sqljobs(app.url, "jobs", "cancel", "999999")
    assert missing.exit_code == 1 and "no job with id 999999" in missing.stderr


def test_cancelling_many_asks_first_with_the_count(app: App) -> None:
    url = app.url
    send = [app.enqueue("send", queue="mail", known=False).id for _ in range(3)]
    other = [app.enqueue("other", queue="mail", known=False).id for _ in range(2)]
    elsewhere = app.enqueue("send", queue="reports", known=False).id

    no = sqljobs(url, "jobs", "cancel", "--queue", "mail", "--task", "send", answer="n\n")
    assert no.exit_code == 1 and "Aborted" in no.stderr
    assert (
        "cancel 3 pending, waiting or running jobs of task 'send' in queue 'mail'? [y/N]"
        in no.stderr
    )
    assert all(app.job(i).refresh().state is JobState.PENDING for i in send), "nothing changed"

    yes = sqljobs(url, "jobs", "cancel", "--queue", "mail", "--task", "send", answer="y\n")
    assert yes.exit_code == 0
    assert yes.stdout.startswith("3 job(s) cancelled; the workers of those that were running")
    assert all(app.job(i).refresh().state is JobState.CANCELLED for i in send)

    pending = sqljobs(url, "jobs", "cancel", "--queue", "mail", "--state", "pending", "--yes")
    assert pending.stdout == "2 job(s) cancelled\n" and pending.stderr == "", "no question"
    assert all(app.job(i).refresh().state is JobState.CANCELLED for i in other)
    assert app.job(elsewhere).refresh().state is JobState.PENDING

    none = sqljobs(url, "jobs", "cancel", "--task", "nothing", "--state", "running")
    assert none.stdout == "no running jobs of task 'nothing': nothing to cancel\n"


def test_a_bulk_count_by_task_past_what_is_read_is_an_upper_bound(app: App) -> None:
    app.task(name="send")(lambda: None)
    app.task(name="other")(lambda: None)
    app.tasks["send"].enqueue_many([() for _ in range(1000)])
    app.tasks["other"].enqueue_many([() for _ in range(2)])
    asked = sqljobs(app.url, "jobs", "cancel", "--task", "send", answer="n\n").stderr
    assert "cancel up to 1002 pending, waiting or running jobs of task 'send'?" in asked
    told = sqljobs(app.url, "jobs", "cancel", "--task", "other", "--yes").stdout
    assert told.startswith("2 job(s) cancelled")
    assert app.stats().total("pending") == 1000


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["jobs", "cancel"], "give a job id, or --queue, --task or --state for many"),
        (["jobs", "cancel", "1", "--queue", "mail"], "give a job id, or --queue/--task/--state"),
        (["jobs", "cancel", "--queue", "bad name"], "queue name 'bad name'"),
        (["jobs", "cancel", "--state", "done"], "'done' is not one of 'pending', 'waiting'"),
        (["worker", "--cancel-grace", "0"], "--cancel-grace"),
    ],
)
def test_a_bad_cancel_is_refused_before_anything_changes(
    app: App, args: list[str], says: str
) -> None:
    job = app.enqueue("send", queue="mail", known=False)
    out = sqljobs(app.url, *args)
    assert out.exit_code == 2 and says in " ".join(out.stderr.split()), out.stderr
    assert job.refresh().state is JobState.PENDING


def test_jobs_enqueued_after_others_show_what_they_wait_for(app: App) -> None:
    app.task(name="step")(lambda name: name)
    parent = app.enqueue("step", ["p"])
    made = sqljobs(
        app.url, "enqueue", "step", "--remote", "--args", '["c"]', "--after", str(parent.id)
    )
    child = json.loads(made.stdout)["id"]
    shown = sqljobs(app.url, "jobs", "show", str(child)).stdout
    assert_fits(shown)
    assert f"waiting for 1 parent to end (jobs {parent.id})" in _line(shown, "state")
    assert _line(shown, "after").split() == ["after", str(parent.id), "(policy", "done)"]
    assert _line(sqljobs(app.url, "jobs", "show", str(parent.id)).stdout, "then").split() == [
        "then",
        str(child),
    ]
    listed = sqljobs(app.url, "jobs", "list", "--state", "waiting", "--json").stdout
    assert [j["id"] for j in json.loads(listed)] == [child]
    enqueue = ["--url", app.url, "enqueue", "step", "--remote", "--after"]
    bad = CliRunner().invoke(cli, [*enqueue, "1,x"], obj=Ctx())
    assert bad.exit_code == 2 and "must be job ids separated by commas" in bad.output
    gone = CliRunner().invoke(cli, [*enqueue, "99999"], obj=Ctx())  # main() prints it
    assert gone.exit_code != 0 and "after= names no job 99999" in str(gone.exception)
    assert sqljobs(app.url, "jobs", "cancel", "--state", "waiting", answer="y\n").exit_code == 0
    assert app.job(child).refresh().state is JobState.CANCELLED


def test_jobs_show_and_list_hide_what_a_task_redacts(
    app: App, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The app given with --app knows which arguments its task redacts."""
    module = f"charge_app_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{module}.py").write_text(
        "import sqljobs\n"
        f"app = sqljobs.App({app.url!r})\n"
        "@app.task(redact=['card'])\n"
        "def charge(card: str, amount: int) -> None: ...\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    spec = f"{module}:app"
    job = app.enqueue("charge", ["4111-1111-1111-1111"], {"amount": 12}, known=False)
    shown = sqljobs(app.url, "jobs", "show", str(job.id), app=spec).stdout
    assert "4111" not in shown and "***" in _line(shown, "args")
    raw = json.loads(sqljobs(app.url, "jobs", "show", str(job.id), "--json", app=spec).stdout)
    assert raw["args"] == ["***"] and raw["kwargs"] == {"amount": 12}
    listed = json.loads(sqljobs(app.url, "jobs", "list", "--json", app=spec).stdout)
    assert listed[0]["args"] == ["***"]
    assert "4111" not in sqljobs(app.url, "jobs", "list", app=spec).stdout
    unknown = sqljobs(app.url, "jobs", "show", str(job.id)).stdout  # no app: not known
    assert "4111" in unknown


def test_jobs_list_filters_and_pages_and_delete_takes_only_ended_jobs(app: App) -> None:
    app.task(name="mail", queue="mail")(lambda to: to)
    app.task(name="bill", queue="bill")(lambda who: who)
    ids = [app.enqueue("mail", [f"user{i}@example.org"]).id for i in range(3)]
    ids += [app.enqueue("bill", ["acme"]).id for _ in range(2)]

    def listed(*args: str) -> list[int]:
        out = sqljobs(app.url, "jobs", "list", *args, "--json").stdout
        return [j["id"] for j in json.loads(out)]

    assert listed("--task", "mail") == ids[2::-1]
    assert listed("--text", "USER1") == [ids[1]]
    assert listed("--queue", "bill", "--before", str(ids[4])) == [ids[3]]
    first = sqljobs(app.url, "jobs", "list", "--limit", "2").stdout
    assert f"more: sqljobs jobs list --before {ids[3]}" in first
    bad = CliRunner().invoke(
        cli, ["--url", app.url, "jobs", "list", "--text", "x" * 201], obj=Ctx()
    )
    assert bad.exit_code == 2 and "at most 200" in bad.output

    refused = CliRunner().invoke(cli, ["--url", app.url, "jobs", "delete", str(ids[0])], obj=Ctx())
    assert refused.exit_code == 1 and "is pending: only a done, dead or cancelled" in refused.output
    assert sqljobs(app.url, "jobs", "cancel", "--queue", "mail", "--yes").exit_code == 0
    nothing = sqljobs(app.url, "jobs", "delete", "--queue", "bill", "--yes").stdout
    assert "nothing to delete" in nothing
    asked = sqljobs(app.url, "jobs", "delete", "--state", "cancelled", answer="n\n")
    assert "delete 3 ended jobs (state=cancelled)?" in asked.output and asked.exit_code == 1
    assert app.count_jobs().n == 5
    assert sqljobs(app.url, "jobs", "delete", str(ids[0])).stdout.strip() == (
        f"job {ids[0]} deleted"
    )
    done = sqljobs(app.url, "jobs", "delete", "--state", "cancelled", "--yes").stdout
    assert done.strip() == "2 job(s) deleted" and listed() == ids[:2:-1]


def test_workers_shows_each_live_worker_and_what_it_runs(app: App) -> None:
    release = threading.Event()

    @app.task(queue="slow")
    def hold() -> None:
        release.wait(10)

    handle = hold.enqueue()
    assert sqljobs(app.url, "workers").stdout.strip() == "no live workers"
    with stepped_worker(app, concurrency=3, queues=["slow"]) as stepper:
        worker = stepper.worker
        try:
            stepper.until(lambda: app.workers() and app.workers()[0].running, what="running")
            shown = sqljobs(app.url, "workers").stdout
            assert_fits(shown)
            row = _line(shown, worker.id[:10])
            assert "slow" in row and "1/3" in row and f"{handle.id} hold" in row
            (data,) = json.loads(sqljobs(app.url, "workers", "--json").stdout)
            assert data["id"] == worker.id and [j["id"] for j in data["running"]] == [handle.id]
        finally:
            release.set()


def test_the_dashboards_alert_age_must_be_a_positive_number(app: App) -> None:
    for bad in ("0", "-5", "soon"):
        result = CliRunner().invoke(
            cli, ["--url", app.url, "dashboard", "--alert-age", bad], obj=Ctx()
        )
        assert result.exit_code == 2 and "--alert-age" in result.output


def test_a_job_id_out_of_64_bits_is_a_usage_error_naming_it(app: App) -> None:
    """``jobs retry`` once died of the driver's OverflowError; every command that takes a
    job id says what it was given and what an id is."""
    app.migrate()
    huge = str(2**70)
    for command in (["jobs", "show"], ["jobs", "retry"], ["jobs", "cancel"], ["jobs", "delete"]):
        got = sqljobs(app.url, *command, huge)
        assert got.exit_code == 2, (command, got.output)
        assert huge in got.output and f"1<=x<={2**63 - 1}" in got.output, got.output


def test_cancelling_an_ended_job_names_every_state_that_can_be_cancelled(app: App) -> None:
    """Waiting jobs (for parents) can be cancelled too, and the refusal once left them out."""
    parent = app.enqueue("t", known=False)
    waiting = app.enqueue("t", known=False, after=[parent.id]).id
    assert app.job(waiting).refresh().state is JobState.WAITING
    assert sqljobs(app.url, "jobs", "cancel", str(waiting)).output == f"job {waiting} cancelled\n"
    db_execute(app, "UPDATE sqljobs_jobs SET state = 'done' WHERE id = ?", params=(parent.id,))
    done = sqljobs(app.url, "jobs", "cancel", str(parent.id))
    assert done.exit_code == 1
    assert f"job {parent.id} is done; only pending, waiting or running jobs" in done.output
