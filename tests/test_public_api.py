"""The public names: ``__all__`` is sorted, complete and resolvable, every name SPEC.md's
public API uses exists with the parameters it shows, and every exception a user can meet
is a class of ``sqljobs.errors``, in the tree its docstring draws."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
import time
import types
from pathlib import Path

import pytest

import sqljobs
import sqljobs.effects
import sqljobs.errors
import sqljobs.schedules


def test_all_is_sorted_without_duplicates() -> None:
    assert list(sqljobs.__all__) == sorted(set(sqljobs.__all__))


def test_all_names_exactly_the_public_objects_and_star_import_gives_them() -> None:
    public = {
        name
        for name, value in vars(sqljobs).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    }
    assert set(sqljobs.__all__) == public
    namespace: dict[str, object] = {}
    exec("from sqljobs import *", namespace)
    assert set(namespace) - {"__builtins__"} == set(sqljobs.__all__)
    for name in sqljobs.__all__:  # defined in sqljobs, not some other library's object
        assert getattr(sqljobs, name).__module__.startswith("sqljobs."), name


# SPEC.md, "Public API": each name, and the parameters its example passes.
SPEC_CALLABLES: dict[str, tuple[str, ...]] = {
    "App": ("url",),
    "App.task": ("queue", "lease", "retry"),
    "App.periodic": ("tz", "overlap", "every"),
    "App.enqueue": ("task", "args"),
    "App.schedule": ("name", "cron", "task", "kwargs"),
    "App.stats": (),
    "App.run_worker": ("concurrency", "queues", "processes", "drain_timeout"),
    "Retry": ("max_attempts", "base", "cap", "deadline"),
    "Task.enqueue": (),
    "Task.enqueue_many": ("calls",),
    "Task.with_options": ("key", "delay", "priority"),
    "JobContext.transaction": (),
    "idempotent": (),
    "perform_once": ("key", "call", "reconcile"),
}
SPEC_CLASSES = ("JobContext", "JobHandle", "Stats", "ScheduleNotFound", "EffectUncertain")


def _resolve(dotted: str) -> object:
    value: object = sqljobs
    for part in dotted.split("."):
        value = getattr(value, part)
    return value


@pytest.mark.parametrize("dotted", sorted(SPEC_CALLABLES))
def test_every_spec_callable_exists_with_its_parameters(dotted: str) -> None:
    assert dotted.split(".")[0] in sqljobs.__all__
    target = _resolve(dotted)
    assert callable(target), dotted
    params = inspect.signature(target).parameters
    missing = [p for p in SPEC_CALLABLES[dotted] if p not in params]
    assert not missing, f"{dotted} lacks {missing}"


def test_the_spec_example_works_as_written(tmp_path: Path) -> None:
    assert all(name in sqljobs.__all__ for name in SPEC_CLASSES)
    app = sqljobs.App(f"sqlite:///{tmp_path / 'jobs.db'}")
    retry = sqljobs.Retry(max_attempts=5, base=1, cap=300, deadline=3600)

    @app.task(queue="default", lease=30, retry=retry)
    def send_report(tenant: str, day: str) -> None: ...

    began = time.time()
    handle = send_report.enqueue("acme", "2026-12-01")
    first_enqueued = time.time()
    again = send_report.with_options(key="report:acme", delay=60, priority=5).enqueue("a", "b")
    same = send_report.with_options(key="report:acme").enqueue("a", "b")
    many = send_report.enqueue_many([("acme", "x"), {"tenant": "globex", "day": "y"}])
    by_name = app.enqueue("send_report", args=["acme", "2026-12-01"])
    assert isinstance(handle, sqljobs.JobHandle) and handle.created
    assert isinstance(handle.id, int) and (again.id, again.created) == (same.id, not same.created)
    assert len({handle.id, again.id, *(h.id for h in many), by_name.id}) == 5
    asked = time.time()
    st = app.stats()
    answered = time.time()
    assert isinstance(st, sqljobs.Stats)
    assert st.counts["default"]["pending"] == 5  # the delayed one is pending too
    # the first job's wait, not a later one's (nor the delayed one's, which is not due)
    assert st.oldest_pending_age is not None
    assert asked - first_enqueued <= st.oldest_pending_age <= answered - began
    assert st.to_dict()["counts"] == st.counts
    state = app.schedule("daily-report:acme", cron="0 3 * * *", task="send_report",
                         kwargs={"tenant": "acme", "day": "today"})  # fmt: skip
    assert isinstance(state, sqljobs.ScheduleState) and state.name == "daily-report:acme"
    with pytest.raises(sqljobs.ScheduleNotFound):
        app.run_schedule_now("nothing-of-that-name")


def test_errors_moved_to_errors_py_stay_importable_from_their_old_homes() -> None:
    assert sqljobs.ScheduleNotFound is sqljobs.errors.ScheduleNotFound
    assert sqljobs.schedules.ScheduleNotFound is sqljobs.errors.ScheduleNotFound
    assert sqljobs.EffectUncertain is sqljobs.errors.EffectUncertain
    assert sqljobs.effects.EffectUncertain is sqljobs.errors.EffectUncertain
    assert issubclass(sqljobs.ScheduleNotFound, LookupError)
    assert issubclass(sqljobs.EffectUncertain, sqljobs.Discard)


def _drawn_tree() -> dict[str, str | None]:
    """Each class in errors.py's docstring tree, mapped to the class drawn above it."""
    doc = sqljobs.errors.__doc__ or ""
    parents: dict[str, str | None] = {}
    stack: list[tuple[int, str]] = []  # (column of the name, name) from the root down
    for line in doc.splitlines():
        found = re.match(r"^([ │├└─]*)([A-Z][A-Za-z]+)(?:\s{2,}|$)", line)
        if found is None:
            continue
        column, name = len(found.group(1)), found.group(2)
        while stack and stack[-1][0] >= column:
            stack.pop()
        parents[name] = stack[-1][1] if stack else None
        stack.append((column, name))
    return parents


def test_the_drawn_tree_is_the_class_tree() -> None:
    drawn = _drawn_tree()
    defined = {
        name: cls
        for name, cls in vars(sqljobs.errors).items()
        if isinstance(cls, type) and issubclass(cls, BaseException)
        and cls.__module__ == "sqljobs.errors"
    }  # fmt: skip
    assert set(drawn) == set(defined), "every class drawn, and only those"
    for name, parent in drawn.items():
        ours = [b.__name__ for b in defined[name].__bases__ if b.__module__ == "sqljobs.errors"]
        assert ours == ([parent] if parent else []), f"{name} is drawn under {parent}"
    assert all(name in sqljobs.__all__ for name in defined), "and all are public"


# Exception classes defined outside errors.py, and why each never reaches a user's code.
NEEDS_ITS_FRAMEWORK = {"django"}
"""Integrations that import their framework, which not every environment has (Django 6
needs Python 3.12: tests/test_django.py runs it there)."""
INTERNAL_ERRORS = {
    "sqljobs.dashboard.api.BadParameter": "answered inside the dashboard as a 400 with its text",
    "sqljobs.backends.postgres.pool.EndedWhileIdle": "a psycopg error the backend raises and "
    "replays itself (at most a BackendError's cause, like any psycopg error)",
    "sqljobs.backends.ops.workflows._Stale": "rolls a park back inside the backend, which "
    "answers None",
    "sqljobs.workflows.Suspended": "unwinds a workflow's function when it parks; the worker "
    "takes it as the attempt's end (a BaseException, past a user's except Exception)",
    "sqljobs.workflows._Replayed": "rolls a replayed wf.transaction() block back inside it",
}


def test_no_module_defines_an_exception_a_user_could_catch_outside_errors_py() -> None:
    pytest.importorskip("starlette")
    elsewhere = []
    for info in pkgutil.walk_packages(sqljobs.__path__, "sqljobs."):
        if info.name.startswith(("sqljobs.lab", "sqljobs.__main__")):
            continue  # the lab is the article's experiments, run from its own command
        try:
            module = importlib.import_module(info.name)
        except ModuleNotFoundError as exc:
            if exc.name in NEEDS_ITS_FRAMEWORK:
                continue  # an integration whose framework this environment lacks
            raise
        for value in vars(module).values():
            if (
                isinstance(value, type)
                and issubclass(value, BaseException)
                and value.__module__ == info.name
                and value.__module__ != "sqljobs.errors"
            ):
                elsewhere.append(f"{info.name}.{value.__name__}")
    assert sorted(elsewhere) == sorted(INTERNAL_ERRORS)
