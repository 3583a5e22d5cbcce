"""Hostile input at the enqueue side, stated as properties (hypothesis) on both backends.

Each property says: whatever a caller passes is either accepted and reads back exactly as
given, or refused with a :class:`sqljobs.ConfigurationError` or
:class:`sqljobs.PayloadError` that names it, before anything is stored. Never a driver's
error (sqlite3, psycopg), never an ``OverflowError`` or ``UnicodeEncodeError``, never a
:class:`sqljobs.BackendError` for something the caller could have been told about.
"""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any, cast

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sqljobs import (
    App,
    ConfigurationError,
    JobFilter,
    JobNotFound,
    PayloadError,
    PayloadTooLarge,
)
from sqljobs.testing import stepped_worker
from sqljobs.validate import NAME_LIMIT

from .conftest import db_execute

EXAMPLES = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

HOSTILE = [
    "'; DROP TABLE sqljobs_jobs; --",
    '" OR 1=1 --',
    "' || (SELECT version()) || '",
    "; SELECT pg_sleep(10); --",
    "a\x00b",
    "\x00",
    "%s",
    "%(key)s",
    "?",
    ":name",
    "$1",
    "{schema}",
    "{where}",
    "\\",
    "'",
    '"',
    "\n",
    " ",
    "\t\r\x0b\x1b[2J",
    "é🎉 名前",
    "\u202eevil",
    "x" * NAME_LIMIT,
    "x" * (NAME_LIMIT + 1),
    "é" * NAME_LIMIT,
    "🎉" * NAME_LIMIT,
    "\ud800",
    "a\udfffb",
    "/*",
    "--",
]
"""Strings a caller might pass by mistake or by malice: SQL, placeholders of every
paramstyle, the markers sqljobs fills into its own statements, control characters, NUL,
lone surrogates, and names at and just past the length limit."""

surrogates = st.text(st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF), min_size=1)
texts = st.one_of(
    st.sampled_from(HOSTILE),
    st.text(max_size=30),
    st.text(st.characters(max_codepoint=0x7F), max_size=30),  # ASCII, control characters too
    st.builds(lambda a, b, c: a + b + c, st.text(max_size=8), st.sampled_from(HOSTILE), surrogates),
    st.builds(lambda a, b: a + b, st.sampled_from(HOSTILE), st.text(max_size=8)),
)
"""Text as a caller may pass it anywhere a name or key is taken."""


def storable(text: str) -> bool:
    """Whether sqljobs should accept ``text`` as a name: what check_text promises."""
    if not text or len(text) > NAME_LIMIT or "\x00" in text:
        return False
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def count_jobs(app: App) -> int:
    assert app.backend is not None  # opened, so migrated: the table exists
    return int(db_execute(app, "SELECT count(*) FROM sqljobs_jobs")[0][0])


# -- arguments ----------------------------------------------------------------------------

json_text = st.text(st.characters(exclude_categories=["Cs"]), max_size=20)
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | json_text,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(json_text, inner, max_size=4),
    max_leaves=12,
)
"""Every JSON value (NUL included: JSON writes it as an escape)."""


# psycopg's pool threads (a connection opened as the worker gets busy takes a random
# expiry) may touch the random module while hypothesis draws an example, which it takes
# for a strategy using random (as in test_hostile_parsing.py)
@pytest.mark.filterwarnings("ignore::hypothesis.errors.HypothesisDeprecationWarning")
@pytest.mark.slow
def test_any_json_arguments_round_trip_exactly_through_a_worker(app: App) -> None:
    """enqueue -> payload -> worker -> handler -> result -> ``handle.result()``: the
    handler sees exactly the arguments given, and the caller gets exactly what it returned."""

    @app.task(name="echo")
    def echo(*args: Any, **kwargs: Any) -> Any:
        return [list(args), kwargs]

    with stepped_worker(app, concurrency=2) as worker:

        @given(
            args=st.lists(json_values, max_size=3),
            kwargs=st.dictionaries(json_text, json_values, max_size=3),
        )
        @EXAMPLES
        def round_trip(args: list[Any], kwargs: dict[str, Any]) -> None:
            handle = app.enqueue("echo", args=args, kwargs=kwargs)
            assert worker.result(handle) == [args, kwargs]
            stored = app.job(handle.id).refresh()
            assert stored.args == args and stored.kwargs == kwargs

        round_trip()


class Opaque:
    """Not JSON, and says so only when asked."""


not_json = st.one_of(
    st.just(float("nan")),
    st.just(float("inf")),
    st.just(-math.inf),
    st.builds(Opaque),
    st.binary(max_size=4),
    st.sets(st.integers(), max_size=2),
    st.complex_numbers(allow_nan=False, allow_infinity=False),
    st.just(Decimal("1.5")),
    st.just(datetime(2026, 12, 3, tzinfo=UTC)),
    surrogates,
    st.just({(1, 2): "tuple key"}),
)
"""Values that cannot be stored as JSON text."""


def buried(value: Any) -> st.SearchStrategy[Any]:
    """``value`` as it is, or deep inside lists and dicts of JSON."""
    return st.recursive(
        st.just(value),
        lambda inner: (
            st.lists(inner, min_size=1, max_size=2).map(lambda xs: [1, *xs])
            | st.builds(lambda k, v: {k: v, "ok": 1}, json_text, inner)
        ),
        max_leaves=4,
    )


def test_anything_not_json_is_refused_naming_the_argument_and_storing_nothing(
    app: App,
) -> None:
    @app.task(name="take")
    def take(first: Any = None, second: Any = None) -> None: ...

    @given(
        bad=not_json.flatmap(buried),
        good=json_values,
        where=st.sampled_from(["first", "second", "by name"]),
    )
    @EXAMPLES
    def refused(bad: Any, good: Any, where: str) -> None:
        before = count_jobs(app)
        with pytest.raises(PayloadError) as error:
            if where == "first":
                take.enqueue(bad, good)
            elif where == "second":
                take.enqueue(good, bad)
            else:
                app.enqueue("take", kwargs={"second": bad})
        named = "'first'" if where == "first" else "'second'"
        assert f"argument {named} of task 'take'" in str(error.value)
        assert count_jobs(app) == before

    refused()


def test_a_kwargs_name_that_is_not_a_string_is_refused(app: App) -> None:
    @app.task(name="take")
    def take(**kwargs: Any) -> None: ...

    names: list[Any] = [1, None, 2.5, (1, 2), b"x"]
    for name in names:
        with pytest.raises(PayloadError, match="keywords must be strings"):
            app.enqueue("take", kwargs={name: 1})  # a task here: its signature says so
        with pytest.raises(PayloadError, match="keyword argument name"):
            app.enqueue("elsewhere", kwargs={name: 1}, known=False)  # JSON would rename 1
    assert count_jobs(app) == 0


# -- names, keys and filters --------------------------------------------------------------


def test_any_text_as_key_task_or_schedule_name_round_trips_or_is_refused(app: App) -> None:
    """A key, a task name (by name, known=False) and a schedule name: stored and read back
    exactly, or ConfigurationError; what is accepted is what check_text promises."""
    app.task(name="echo")(lambda *a, **k: None)

    @given(text=texts)
    @EXAMPLES
    def check(text: str) -> None:
        names_round_trip(app, text)

    check()


def names_round_trip(app: App, text: str) -> None:
    before = count_jobs(app)
    accepted = storable(text)
    try:
        keyed = app.enqueue("echo", key=text)
    except ConfigurationError:
        assert not accepted
        assert count_jobs(app) == before
    else:
        assert accepted and app.job(keyed.id).refresh().key == text
        assert [j.id for j in app.find_jobs(JobFilter(key=text)).jobs] == [keyed.id]
    try:
        named = app.enqueue(text, known=False)
    except ConfigurationError:
        assert not accepted
    else:
        assert accepted and app.job(named.id).refresh().task == text
        assert named.id in [j.id for j in app.find_jobs(JobFilter(task=text)).jobs]
    try:
        app.schedule(text, every=60, task="echo")
    except ConfigurationError:
        assert not accepted
        with pytest.raises(ConfigurationError):
            app.get_schedule(text)
    else:
        assert accepted
        state = app.get_schedule(text)
        assert state is not None and state.schedule.name == text
        assert app.pause_schedule(text) and app.unschedule(text)


def test_any_text_as_queue_name_or_filter_is_taken_or_refused(app: App) -> None:
    """Queue names are a small alphabet (check_queue_name); filters take any text that is
    not NUL; neither ever reaches the database as anything but a parameter."""
    app.task(name="echo")(lambda *a, **k: None)

    @given(text=texts)
    @EXAMPLES
    def check(text: str) -> None:
        queues_and_filters(app, text)

    check()


def queues_and_filters(app: App, text: str) -> None:
    try:
        handle = app.enqueue("echo", queue=text)
    except ConfigurationError:
        pass
    else:
        assert app.job(handle.id).refresh().queue == text
        assert app.pause_queue(text) and app.resume_queue(text)
    # a job each filter must find, where the text can be stored so: the page is not empty
    planted: dict[str, int] = {}
    with contextlib.suppress(ConfigurationError):
        planted["task"] = app.enqueue(text, known=False).id
    with contextlib.suppress(ConfigurationError):
        planted["key"] = app.enqueue("echo", key=text).id
    if json.dumps(text, ensure_ascii=False)[1:-1] == text:  # the payload holds it verbatim
        with contextlib.suppress(ConfigurationError, PayloadError):
            planted["text"] = app.enqueue("echo", args=[text]).id
    for field in ("task", "key", "text"):
        try:
            wanted = JobFilter(**{field: cast(Any, text)})
        except ConfigurationError:
            continue
        try:
            page = app.find_jobs(wanted, limit=5)
        except ConfigurationError:  # e.g. a lone surrogate: no database could compare it
            continue
        if field in planted:
            assert page.jobs, f"JobFilter({field}={text!r}) found not even the job planted"
        if field != "text":
            assert all(getattr(job, field) == text for job in page.jobs)
        if field == "key" and field in planted:
            assert [job.id for job in page.jobs] == [planted["key"]]  # a key is unique


def test_a_concurrency_key_is_stored_or_refused(app: App) -> None:
    @app.task(name="limited", concurrency=2, concurrency_key=lambda k: k)
    def limited(k: Any) -> None: ...

    @given(key=st.one_of(st.sampled_from(HOSTILE), st.text(max_size=300), st.integers(), st.none()))
    @EXAMPLES
    def check(key: Any) -> None:
        try:
            handle = limited.enqueue(key)
        except (ConfigurationError, PayloadError):
            return
        assert app.job(handle.id).refresh().limit_key == f"limited:{key}"

    check()


# -- options --------------------------------------------------------------------------------

numbers = st.one_of(
    st.none(),
    st.integers(),
    st.integers(min_value=-(10**400), max_value=10**400),
    st.floats(),
    st.booleans(),
    st.text(max_size=6),
    st.timedeltas(),
)


def test_any_delay_run_at_or_priority_is_stored_or_refused(app: App) -> None:
    """Huge, negative, NaN, infinite, boolean, text, timedelta: accepted (and stored as
    asked) or ConfigurationError; a priority is a 32-bit int and a due time within the
    years 1 to 9999 on both backends."""
    task = app.task(name="echo")(lambda *a, **k: None)

    @given(delay=numbers, run_at=numbers, priority=numbers)
    @EXAMPLES
    def check(delay: Any, run_at: Any, priority: Any) -> None:
        options_stored_or_refused(app, task, delay, run_at, priority)

    check()


def options_stored_or_refused(app: App, task: Any, delay: Any, run_at: Any, priority: Any) -> None:
    before = count_jobs(app)
    try:
        handle = task.with_options(delay=delay, run_at=run_at, priority=priority).enqueue()
    except ConfigurationError:
        assert count_jobs(app) == before
        return
    job = app.job(handle.id).refresh()
    if isinstance(priority, int) and not isinstance(priority, bool):
        assert job.priority == priority
    if isinstance(run_at, int | float) and not isinstance(run_at, bool) and delay is None:
        assert job.run_at == pytest.approx(float(run_at), rel=1e-9, abs=1e-3)


def test_any_job_id_is_found_or_not(app: App) -> None:
    @given(job_id=st.one_of(st.integers(), st.integers(min_value=2**63, max_value=2**80)))
    @EXAMPLES
    def check(job_id: int) -> None:
        absent(app, job_id)

    check()


def absent(app: App, job_id: int) -> None:
    assert app.get_job(job_id) is None
    try:
        handle = app.job(job_id)
    except ConfigurationError:
        assert abs(job_id) >= 2**63
        return
    with pytest.raises(JobNotFound):
        handle.refresh()
    with pytest.raises(JobNotFound):
        app.cancel(job_id)


# -- oversized payloads ---------------------------------------------------------------------

LIMIT = 1000


def sized(limit_bytes: int, char: str = "x") -> str:
    """A string argument making the payload ``{"args":["..."],"kwargs":{}}`` exactly
    ``limit_bytes`` bytes of UTF-8 (``char`` may be multi-byte; the limit is in bytes)."""
    frame = len('{"args":[""],"kwargs":{}}')
    room = limit_bytes - frame
    width = len(char.encode())
    text = char * (room // width) + "x" * (room % width)
    assert len(f'{{"args":["{text}"],"kwargs":{{}}}}'.encode()) == limit_bytes
    return text


@pytest.mark.parametrize("char", ["x", "é", "🎉"])
def test_payloads_are_refused_at_one_byte_over_the_limit(
    url: str, char: str, tmp_path: Any
) -> None:
    """``App(max_payload=N)``: a payload of N bytes of JSON is stored, N + 1 refused with
    PayloadTooLarge and nothing stored, on enqueue, enqueue_many, with_options, by name
    and in a group (member or callback)."""
    app = App(url, max_payload=LIMIT)

    @app.task(name="big")
    def big(text: str) -> None: ...

    @app.task(name="merge")
    def merge(results: list[Any], text: str) -> None: ...

    at, over = sized(LIMIT, char), sized(LIMIT + 1, char)
    handles = [
        big.enqueue(at),
        big.with_options(key="k").enqueue(at),
        app.enqueue("big", args=[at]),
        *big.enqueue_many([(at,), (at,)]),
    ]
    group = app.group([big.s(at)], then=None)
    assert len(handles) + len(group.members) == count_jobs(app) == 6
    refusals: list[Callable[[], object]] = [
        lambda: big.enqueue(over),
        lambda: big.with_options(key="k2").enqueue(over),
        lambda: app.enqueue("big", args=[over]),
        lambda: big.enqueue_many([(at,), (over,)]),
        lambda: app.group([big.s(at), big.s(over)]),
        lambda: app.group([big.s(at)], then=merge.s(over)),
    ]
    for refuse in refusals:
        with pytest.raises(PayloadTooLarge, match=f"over the limit of {LIMIT:,} bytes"):
            refuse()
    assert count_jobs(app) == 6  # a batch with one payload too big stores none of it


def test_schedule_kwargs_over_the_limit_are_refused(app: App) -> None:
    small = App(app.url, max_payload=LIMIT)

    @small.task(name="big")
    def big(text: str) -> None: ...

    over = "x" * LIMIT
    with pytest.raises(PayloadTooLarge):
        small.schedule("too-big", every=60, task="big", kwargs={"text": over})
    assert small.get_schedule("too-big") is None


def test_the_default_limit_is_one_mebibyte(app: App) -> None:
    assert app.max_payload == 1024 * 1024
    bads: list[Any] = [0, -1, True, 1.5, "1000", None]
    for bad in bads:
        with pytest.raises(ConfigurationError, match="max_payload"):
            App(app.url, max_payload=bad)


def test_a_year_10000_due_time_is_refused_clearly(app: App) -> None:
    @app.task(name="later")
    def later() -> None: ...

    with pytest.raises(ConfigurationError, match="years 1 to 9999"):
        later.with_options(delay=timedelta(days=3_000_000)).enqueue()
    with pytest.raises(ConfigurationError, match="years 1 to 9999"):
        later.with_options(run_at=1e20).enqueue()
    with pytest.raises(ConfigurationError, match="priority"):
        later.with_options(priority=2**31).enqueue()
    assert count_jobs(app) == 0
