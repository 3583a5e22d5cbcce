"""Hostile input meets a real worker: a damaged row and a handler's odd outcome fail that
one job, with a reason, and never the worker (issue 16, "Hostile input").

Each test runs one worker thread on each backend while the damage is done; the worker must
survive it (it stops cleanly at the end, having raised nothing), end every damaged job
``dead`` with a reason a person can act on, and still run a good job enqueued after."""

from __future__ import annotations

import json
from typing import Any

from sqljobs import App, Discard, JobContext, JobState, Retry
from sqljobs.testing import stepped_worker

from .conftest import db_execute, is_pg

CORRUPT_PAYLOADS = {
    "not JSON": "not json {",
    "empty": "",
    "a JSON list": "[1, 2]",
    "a JSON string": '"args"',
    "args not a list": '{"args": 5, "kwargs": {}}',
    "kwargs not an object": '{"args": [], "kwargs": [1]}',
    "no kwargs": '{"args": []}',
    "truncated": '{"args": ["abc", {"k": ',
    "deeply nested": '{"args":' + "[" * 100_000 + "]" * 100_000 + ',"kwargs":{}}',
    "NaN literal": '{"args": [NaN], "kwargs": {}}',
    "SQL": "'; DROP TABLE sqljobs_jobs; --",
    "binary junk": "\x01\x7f\ufffd\u202e\x1b[31m",
}
"""Stored payloads sqljobs never writes, as a broken migration, a hand edit or another
writer might leave them; each must end its job dead, saying it cannot be decoded."""


def test_a_corrupt_payload_fails_its_job_and_not_the_worker(app: App) -> None:
    @app.task(name="echo")
    def echo(*args: Any, **kwargs: Any) -> Any:
        return [list(args), kwargs]

    damaged = {}
    for what, text in CORRUPT_PAYLOADS.items():
        handle = echo.enqueue("placeholder")
        db_execute(
            app, "UPDATE sqljobs_jobs SET payload = ? WHERE id = ?", params=(text, handle.id)
        )
        damaged[what] = handle.id
    with stepped_worker(app, concurrency=2) as worker:
        for job_id in damaged.values():
            worker.until_ended(job_id)
        good = echo.enqueue("still", here=True)
        assert worker.result(good) == [["still"], {"here": True}]
    for what, job_id in damaged.items():
        job = app.job(job_id).refresh()
        assert job.state is JobState.DEAD, what
        assert job.last_error is not None
        assert "stored payload" in job.last_error, (what, job.last_error)
        assert job.attempts <= 1, what  # refused on sight: never retried into a loop
        shown = app.get_job(job_id)  # what `jobs show` and the dashboard read back
        assert shown is not None and shown.history[-1]["outcome"] == "undecodable"


def test_a_damaged_history_result_or_progress_is_shown_not_raised(app: App) -> None:
    """``jobs show``, the dashboard and ``handle.refresh()`` read the whole row: a column
    that is not the JSON sqljobs wrote is shown as it is (one entry, the raw text)."""

    @app.task(name="echo")
    def echo(*args: Any) -> Any:
        return list(args)

    handle = echo.enqueue(1)
    deep = "[" * 100_000 + "]" * 100_000
    if is_pg(app):  # jsonb takes only JSON: damage the text columns, and nest history deep
        db_execute(
            app,
            "UPDATE sqljobs_jobs SET payload = %s, result = %s, progress = %s WHERE id = %s",
            params=(deep, "not json", "{", handle.id),
        )
    else:
        db_execute(
            app,
            "UPDATE sqljobs_jobs SET payload = ?, history = ?, result = ?, progress = ?, "
            "parents = ? WHERE id = ?",
            params=(deep, "not json [", "not json", "{", "7", handle.id),
        )
    job = app.job(handle.id).refresh()
    assert job.args == [deep] and job.kwargs == {}
    assert job.result == "not json" and job.progress is None
    if not is_pg(app):
        history: list[Any] = list(job.history)  # a damaged history is one raw entry
        assert history == ["not json ["] and job.parents == [7]


class Odd(Exception):
    """An exception whose message cannot be shown: str() itself fails."""

    def __str__(self) -> str:
        raise RuntimeError("no message for you")


def test_odd_outcomes_of_a_handler_are_recorded_not_fatal(app: App) -> None:
    """Error messages, discard reasons and progress notes with NUL (PostgreSQL's text
    refuses it) or lone surrogates (no UTF-8 form), an exception whose ``str()`` raises,
    and results the database cannot keep: each is the attempt's own outcome, stored with
    the odd characters escaped, and the worker goes on."""
    once = Retry(max_attempts=1)

    @app.task(name="raise_nul", retry=once)
    def raise_nul() -> None:
        raise RuntimeError("bad \x00 byte")

    @app.task(name="raise_surrogate", retry=once)
    def raise_surrogate() -> None:
        raise RuntimeError("bad \ud800 half")

    @app.task(name="raise_odd", retry=once)
    def raise_odd() -> None:
        raise Odd()

    @app.task(name="discard_nul", retry=once)
    def discard_nul() -> None:
        raise Discard("why \x00 not")

    @app.task(name="return_surrogate", retry=once)
    def return_surrogate() -> str:
        return "x\udfff"

    @app.task(name="return_nul", retry=once)
    def return_nul() -> dict[str, str]:
        return {"k": "a\x00b"}

    @app.task(name="note")
    def note(ctx: JobContext) -> str:
        ctx.progress(1, total=2, note="half \x00 \ud800 way")
        return "noted"

    @app.task(name="echo")
    def echo(value: Any) -> Any:
        return value

    handles = {name: app.enqueue(name) for name in list(app.tasks) if name != "echo"}
    with stepped_worker(app, concurrency=3) as worker:
        for handle in handles.values():
            worker.until_ended(handle.id)
        assert worker.result(echo.enqueue("after")) == "after"
    errors = {name: app.job(h.id).refresh().last_error for name, h in handles.items()}
    assert errors["raise_nul"] is not None and "bad \\x00 byte" in errors["raise_nul"]
    assert errors["raise_surrogate"] is not None and "bad \\ud800 half" in errors["raise_surrogate"]
    assert (
        errors["raise_odd"] is not None
        and "Odd: <str() of the exception failed>" in errors["raise_odd"]
    )
    assert errors["discard_nul"] == "discarded: why \\x00 not"
    assert (
        errors["return_surrogate"] is not None
        and "not JSON-serialisable" in errors["return_surrogate"]
    )
    assert errors["return_nul"] is None  # JSON writes NUL as \u0000: any column holds that
    assert handles["return_nul"].result(timeout=1) == {"k": "a\x00b"}
    noted = app.job(handles["note"].id).refresh()
    assert noted.result == "noted" and noted.progress is not None
    assert noted.progress.note == "half \\x00 \\ud800 way"
    history = app.job(handles["raise_nul"].id).refresh().history
    assert "\\x00" in json.dumps(history)  # the attempt's entry was written too


def test_a_group_member_returning_nul_reaches_the_callback(app: App) -> None:
    """PostgreSQL collected a group's results as parsed jsonb, which refuses ``\\u0000``:
    such a result wedged the worker's every later write. Kept as text, it arrives."""

    @app.task(name="member", retry=Retry(max_attempts=1))
    def member(value: str) -> str:
        return value

    @app.task(name="merge")
    def merge(results: list[Any]) -> list[Any]:
        return results

    group = app.group([member.s("a\x00b"), member.s("fine")], then=merge.s(), after_policy="always")
    with stepped_worker(app, concurrency=2) as worker:
        assert group.then is not None
        assert worker.result(group.then) == ["a\x00b", "fine"]


def test_a_group_callback_gets_its_members_results_exactly(app: App) -> None:
    """PostgreSQL kept the collected results as parsed jsonb, which rewrote them: 1.5e300
    reached the callback as an int, -0.0 as 0, an object with its keys sorted."""

    @app.task(name="member")
    def member(value: Any) -> Any:
        return value

    @app.task(name="merge")
    def merge(results: list[Any]) -> list[str]:
        return [json.dumps(r) for r in results]  # as text: the types and order show

    values: list[Any] = [1.5e300, 1e16, -0.0, 0.1, {"b": 1, "a": [None, 2.0]}, None, "x"]
    group = app.group([member.s(v) for v in values], then=merge.s())
    with stepped_worker(app, concurrency=2) as worker:
        assert group.then is not None
        assert worker.result(group.then) == [json.dumps(v) for v in values]
