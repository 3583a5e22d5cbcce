"""Hostile input to what sqljobs parses: cron, intervals and time zones, database URLs,
the schema option, command-line arguments, and what it reads back from the database
(payloads, headers, whole rows). Properties (hypothesis): each either parses or raises a
clear sqljobs error; a decoder never raises anything but PayloadError, and a row reader
never raises at all (a damaged column is shown, not fatal)."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import sqljobs.cli
import sqljobs.cli.options
from sqljobs import App, ConfigurationError, PayloadError
from sqljobs.backends import rows
from sqljobs.humanize import redact_url
from sqljobs.limits import Rate
from sqljobs.payload import decode, encode, headers, with_headers
from sqljobs.schedules import check_timing, define_schedule
from sqljobs.url import parse_url

from .test_hostile_enqueue import HOSTILE, surrogates, texts

FAST = settings(max_examples=200, deadline=None)
DB = settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
NOW = 1_796_000_000.0

# -- cron, every, tz ----------------------------------------------------------------------

cron_parts = st.sampled_from(
    ["*", "*/0", "*/1", "*/61", "0", "59", "60", "-1", "1-5", "5-1", "1-100", "L", "W", "?",
     "#", "5#3", "MON", "jan", "1,2", ",", "0x1", "\uff11", "15W", "LW", "L-3", "*/", "/5", "7",
     "SUN-SAT", "1e3", "\x00", "\ud800", "@daily", "@reboot", "@every 5m"]
)  # fmt: skip
cron_like = st.one_of(
    st.text(max_size=30),
    st.lists(st.one_of(cron_parts, st.text(max_size=3)), min_size=1, max_size=7).map(" ".join),
    st.lists(cron_parts, min_size=5, max_size=5).map(" ".join),
)
zones = st.one_of(
    st.sampled_from(
        ["UTC", "utc", "Europe/Berlin", "America/New_York", "../../etc/passwd", "/etc/localtime",
         "", " UTC", "Etc/GMT+14", "posixrules", "\x00", "Europe/Berlin\x00", "\ud800",
         "America/New_York ", "Europe/../Europe/Berlin", "CON", "a" * 300]
    ),
    st.text(max_size=20),
)  # fmt: skip


@given(cron=cron_like, tz=zones)
@FAST
def test_a_cron_expression_and_zone_parse_or_are_refused_clearly(cron: str, tz: str) -> None:
    try:
        expression, interval = check_timing(cron, None, tz, where="test")
    except ConfigurationError:
        return
    assert interval is None and expression is not None
    schedule = define_schedule("s", task="t", cron=cron, tz=tz)
    tick = schedule.first_after(NOW)
    assert math.isfinite(tick) and tick > NOW


@given(every=st.one_of(st.floats(), st.integers(), st.timedeltas(), st.text(max_size=5), st.none()))
@FAST
def test_an_interval_parses_or_is_refused_clearly(every: Any) -> None:
    try:
        _, interval = check_timing(None, every, "UTC", where="test")
    except ConfigurationError:
        return
    assert interval is not None and interval > 0 and math.isfinite(interval)


def test_schedules_of_any_timing_are_stored_or_refused(app: App) -> None:
    """An interval too long for a timestamp, an expression that never fires: refused at
    ``app.schedule``, never a database error when its next run is stored."""

    @app.task(name="tick")
    def tick() -> None: ...

    @given(
        every=st.one_of(st.floats(min_value=1e-3), st.timedeltas(min_value=timedelta(0))),
        cron=st.one_of(st.none(), cron_like),
    )
    @DB
    def check(every: Any, cron: str | None) -> None:
        timing = {"cron": cron} if cron is not None else {"every": every}
        try:
            state = app.schedule("hostile", task="tick", **timing)
        except ConfigurationError:
            return
        assert state.schedule.name == "hostile"
        assert app.unschedule("hostile")

    check()


# -- URLs and the schema option ------------------------------------------------------------

schemes = st.sampled_from(
    ["sqlite", "SQLITE", "sqlite+pysqlite", "postgresql", "postgres", "postgresql+psycopg",
     "mysql", "", "file", "http"]
)  # fmt: skip
url_rest = st.one_of(
    st.text(max_size=40),
    st.sampled_from(
        ["/", "//", "///", "/:memory:", "user:pa@ss@host:99999/db", "[::1", "[::1]:5432/db",
         "host:port/db", "host:-1/db", "/db?sslmode=require", "@/db", "%zz", "\x00/db",
         "host/db'; DROP DATABASE x; --", "/\ud800.db", "?", "#"]
    ),
)  # fmt: skip


@given(url=st.one_of(st.text(max_size=40), st.builds("{}://{}".format, schemes, url_rest)))
@FAST
def test_a_database_url_parses_or_is_refused_clearly(url: str) -> None:
    """``parse_url`` and ``App(url)`` (which does not connect) accept or raise
    ConfigurationError; ``redact_url``, used in every repr and log line, never raises."""
    redact_url(url)
    try:
        parsed = parse_url(url)
    except ConfigurationError:
        if url:  # App("") means "SQLJOBS_URL, else sqlite:///sqljobs.db"
            with pytest.raises(ConfigurationError):
                App(url)
        return
    assert parsed.scheme in ("sqlite", "postgresql")
    app = App(url)
    assert repr(app)


@pytest.mark.parametrize(
    ("url", "typo", "known"),
    [
        ("sqlite:///jobs.db?lisen=false", "'lisen' (did you mean 'listen'?)", "takes only listen"),
        ("sqlite:///jobs.db?listen=false&timeout=5", "'timeout'", "takes only listen"),
        ("postgresql://u:hunter2@h/db?lisen=false", "'lisen' (did you mean 'listen'?)", "sslmode"),
        ("postgresql://u@h/db?sslmode=require&connect_timout=3", "'connect_timout'", "listen"),
    ],
)
def test_an_unknown_url_option_is_refused_naming_it_and_the_known_ones(
    url: str, typo: str, known: str
) -> None:
    """SQLite once ignored any option but listen, typos included; libpq refused an unknown
    one only at the first connection. Both are refused where the URL is given."""
    with pytest.raises(ConfigurationError, match="unknown option") as refused:
        App(url)
    assert typo in str(refused.value) and known in str(refused.value)
    assert "hunter2" not in str(refused.value)


@pytest.mark.parametrize(
    "url",
    [
        "sqlite:///jobs.db?listen=false",
        "sqlite:///jobs.db?",
        "postgresql://u@h/db?sslmode=require&listen=off&application_name=web&ssl=true",
    ],
)
def test_the_known_url_options_are_taken(url: str) -> None:
    assert App(url).url == url


schemas = st.one_of(
    st.sampled_from(
        ["public", "sqljobs", "_x", "a" * 63, "a" * 64, "public\n", "public; DROP TABLE x",
         'public"', '"public"', "public.sqljobs_jobs", "a-b", "1abc", "", " ", "ünï", "%s",
         "{schema}", "pg_catalog--", "public\x00"]
    ),
    texts,
)  # fmt: skip


@given(schema=schemas)
@FAST
def test_the_schema_option_is_a_plain_identifier_or_refused(schema: str) -> None:
    """The PostgreSQL schema is the one name sqljobs writes into SQL text (statements are
    prepared per schema): it must be a plain identifier, whole (a trailing newline once
    passed ``$``), or the backend refuses to be built. Nothing here connects."""
    pytest.importorskip("psycopg")
    from sqljobs.backends.postgres import PostgresBackend

    plain = (
        schema.isascii()
        and 1 <= len(schema) <= 63
        and (schema[0].isalpha() or schema[0] == "_")
        and all(c.isalnum() or c == "_" for c in schema)
    )
    try:
        backend = PostgresBackend("postgresql://nobody@127.0.0.1:1/none", schema=schema)
    except ConfigurationError:
        assert not plain
        return
    assert plain
    assert all(f"{schema}.sqljobs_" in sql for sql in backend.sql.values() if "sqljobs_" in sql)


@pytest.mark.parametrize("url", ["postgres"], indirect=True)
def test_a_hostile_schema_is_refused_before_any_statement(url: str) -> None:
    for schema in ("public; DROP TABLE sqljobs_jobs; --", "public\n", 'x" CASCADE; --'):
        app = App(url, backend_options={"schema": schema})
        with pytest.raises(ConfigurationError, match="not a plain SQL identifier"):
            app.stats()


# -- what sqljobs reads back ---------------------------------------------------------------

json_texts = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=6)),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
).map(lambda v: json.dumps(v, allow_nan=True))


@st.composite
def mutated(draw: st.DrawFn) -> str:
    """A payload sqljobs wrote, then cut, spliced or overwritten at random."""
    args = draw(st.lists(st.one_of(st.integers(), st.text(max_size=5)), max_size=3))
    text = encode("t", args, {"k": draw(st.text(max_size=5))})
    if draw(st.booleans()):
        text = with_headers(text, {"traceparent": draw(st.text(max_size=8))})
    at = draw(st.integers(0, len(text)))
    junk = draw(st.one_of(st.text(max_size=6), st.sampled_from(["[" * 5000, '"', "\\", "}"])))
    cut = draw(st.integers(0, 3))
    return text[:at] + junk + text[at + cut :]


stored_text = st.one_of(st.text(), json_texts, mutated(), surrogates, st.sampled_from(HOSTILE))


@given(text=stored_text)
@FAST
def test_the_payload_decoder_returns_arguments_or_raises_payload_error(text: str) -> None:
    try:
        args, kwargs = decode(text)
    except PayloadError as exc:
        assert "stored payload" in str(exc)
    else:
        assert isinstance(args, list) and isinstance(kwargs, dict)
    found = headers(text)  # headers never stop a job: anything odd is no headers
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in found.items())


def test_the_decoder_survives_nesting_past_the_recursion_limit() -> None:
    deep = '{"args":' + "[" * 100_000 + "]" * 100_000 + ',"kwargs":{}}'
    with pytest.raises(PayloadError, match="stored payload cannot be decoded"):
        decode(deep)
    assert headers(deep + ',"headers":' + "{" * 50_000) == {}
    with pytest.raises(PayloadError, match="NaN is not JSON"):
        decode('{"args":[NaN],"kwargs":{}}')


def _row(**columns: Any) -> tuple[rows.Names, tuple[Any, ...]]:
    """A whole job row by column name, as a statement returns it."""
    base: dict[str, Any] = dict.fromkeys(rows.JOB)
    base.update(id=1, queue="default", task="t", payload='{"args":[],"kwargs":{}}',
                state="pending", priority=0, run_at=NOW, created_at=NOW, attempts=0,
                max_attempts=5, token=0, lease=30.0, errors=0, lease_expiries=0, crashes=0,
                history="[]", after_policy="done")  # fmt: skip
    base.update(columns)
    return tuple(base), tuple(base.values())


@given(
    payload=stored_text,
    history=st.one_of(st.none(), stored_text),
    result=st.one_of(st.none(), stored_text),
    progress=st.one_of(st.none(), stored_text),
    parents=st.one_of(st.none(), stored_text),
)
@FAST
def test_a_row_with_any_stored_text_reads_as_a_job(
    payload: str, history: str | None, result: str | None, progress: str | None, parents: Any
) -> None:
    """``jobs show``, ``handle.refresh()`` and the dashboard read whole rows: whatever the
    JSON columns hold (SQLite keeps them as text), the row reads, damage shown as is."""
    names, row = _row(
        payload=payload, history=history, result=result, progress=progress, parents=parents
    )
    job = rows.job(names, row)
    assert isinstance(job.args, list) and isinstance(job.kwargs, dict)
    assert isinstance(job.history, list) and isinstance(job.parents, list)
    job.to_dict()


# -- the command line ------------------------------------------------------------------------


OPENED: list[App] = []


@pytest.fixture
def quiet_cli(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """``main()`` as the ``sqljobs`` script runs it, minus its logging setup (the handlers
    it installs would outlive each example's captured streams), and with the App it loads
    closed after each run (a process would exit: here its pool would stay open)."""
    monkeypatch.setattr(sqljobs.cli.options, "configure_logging", lambda *a, **k: None)
    load = sqljobs.cli.options.load_app

    def loaded(spec: str | None, url: str | None) -> App:
        OPENED.append(load(spec, url))
        return OPENED[-1]

    monkeypatch.setattr(sqljobs.cli.options, "load_app", loaded)
    yield


def run_main(args: list[str]) -> tuple[int, str]:
    """``sqljobs ARGS`` in this process: its exit code and everything it printed."""
    runner = CliRunner()
    with runner.isolation() as streams:
        try:
            sqljobs.cli.main(args, prog_name="sqljobs")
        except SystemExit as exit:
            code = exit.code if isinstance(exit.code, int) else 1
        else:
            code = 0
        finally:
            while OPENED:
                OPENED.pop().close()
        output = b"".join(s.getvalue() for s in streams if hasattr(s, "getvalue"))
    return code, output.decode(errors="replace")


cli_value = st.one_of(
    texts,
    st.sampled_from(
        [
            "-1",
            "1e400",
            "nan",
            "inf",
            "0",
            "9" * 30,
            "[" * 5000,
            "[1,",
            '{"a":',
            "[]",
            "{}",
            '["x"]',
            '{"k": NaN}',
            "1,x",
            "--help",
            "-",
            "--",
            "1,2,3",
        ]
    ),
).filter(lambda v: "\x00" not in v)  # an argv cannot hold NUL
commands = st.sampled_from(
    [
        ["enqueue", "{v}"],
        ["enqueue", "job", "--remote", "--args", "{v}"],
        ["enqueue", "job", "--remote", "--kwargs", "{v}"],
        ["enqueue", "job", "--remote", "--key", "{v}"],
        ["enqueue", "job", "--remote", "--queue", "{v}"],
        ["enqueue", "job", "--remote", "--delay", "{v}"],
        ["enqueue", "job", "--remote", "--priority", "{v}"],
        ["enqueue", "job", "--remote", "--after", "{v}"],
        ["jobs", "list", "--task", "{v}"],
        ["jobs", "list", "--key", "{v}"],
        ["jobs", "list", "--text", "{v}"],
        ["jobs", "list", "--queue", "{v}"],
        ["jobs", "list", "--state", "{v}"],
        ["jobs", "list", "--before", "{v}"],
        ["jobs", "show", "{v}"],
        ["jobs", "retry", "{v}"],
        ["jobs", "cancel", "--task", "{v}", "--yes"],
        ["jobs", "delete", "--task", "{v}", "--yes"],
        ["queues", "pause", "{v}"],
        ["schedules", "pause", "{v}"],
        ["schedules", "run-now", "{v}"],
    ]
)


# psycopg's pool threads of an earlier example may touch the random module while hypothesis
# draws the next one, which it takes for a strategy using random
@pytest.mark.filterwarnings("ignore::hypothesis.errors.HypothesisDeprecationWarning")
def test_any_command_line_argument_is_taken_or_refused_without_a_traceback(
    url: str, quiet_cli: None
) -> None:
    """Through ``main()``: exit 0, or exit 1 or 2 with a one-line message; never a
    traceback (an exception that is not a sqljobs error would escape as one)."""
    App(url).migrate()

    @given(command=commands, value=cli_value)
    @DB
    def check(command: list[str], value: str) -> None:
        try:
            value.encode()
        except UnicodeEncodeError:
            assume(False)  # argv comes from the OS as bytes: no lone surrogates
        args = ["--url", url, *(value if part == "{v}" else part for part in command)]
        code, output = run_main(args)
        assert "Traceback" not in output, output
        assert code in (0, 1, 2), (code, output)
        if code:
            assert output.strip(), "refused without saying why"

    check()


def test_deep_json_on_the_command_line_is_a_usage_error(url: str, quiet_cli: None) -> None:
    deep = "[" * 100_000 + "]" * 100_000
    code, output = run_main(["--url", url, "enqueue", "job", "--remote", "--args", deep])
    assert code == 2 and "--args" in output and "Traceback" not in output


def test_the_cli_enqueue_refuses_a_payload_over_the_limit(url: str, quiet_cli: None) -> None:
    """``sqljobs enqueue`` with ``--url`` has the default limit, 1 MiB of JSON: at the
    limit the job is stored, one byte over it is refused (exit 2) and nothing is stored."""
    limit = 1024 * 1024
    frame = len('{"args":[""],"kwargs":{}}')
    at = json.dumps(["x" * (limit - frame)])
    over = json.dumps(["x" * (limit - frame + 1)])
    code, output = run_main(["--url", url, "enqueue", "big", "--remote", "--args", at])
    assert code == 0, output
    code, output = run_main(["--url", url, "enqueue", "big", "--remote", "--args", over])
    assert code == 2 and "over the limit of 1,048,576 bytes" in output
    app = App(url)
    assert sum(n for counts in app.stats().counts.values() for n in counts.values()) == 1


@given(
    rate=st.one_of(
        st.text(max_size=12),
        st.builds("{}/{}".format, st.integers(-5, 10**12), st.sampled_from(["s", "m", "h", "x"])),
        st.sampled_from(["1" * 5000 + "/s", "\u0661\u0662/s", " 5 / Second ", "5/", "/s", "0/s"]),
    )
)
@FAST
def test_a_rate_parses_or_is_refused_clearly(rate: str) -> None:
    """``rate=`` of ``@app.task`` and ``app.limit_queue``: a 5,000-digit count was a bare
    ValueError from int() (Python refuses such long conversions)."""
    try:
        parsed = Rate.parse(rate, "t")
    except ConfigurationError:
        return
    assert 1 <= parsed.count <= 10_000 and parsed.window in (1.0, 60.0, 3600.0)
