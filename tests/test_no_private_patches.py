"""No test patches the inside of sqljobs: a test that sets a private attribute (a name
with a leading underscore) of a worker, a backend or a module pins how the code is built
instead of what it does, and breaks when the inside is rearranged. Tests drive workers
with ``run_once()`` (``sqljobs.testing.stepped_worker``) and public options instead.

What cannot be done otherwise is listed in ALLOWED, each with why; an entry that no
longer matches anything fails too, so the list only shrinks."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent

ALLOWED: dict[tuple[str, str], str] = {
    ("test_limits.py", "_scan_limited"): (
        "proves a finished job's slot is handed over inside the completion's statement: "
        "the full limited claim finds the same heirs, so nothing a backend returns tells "
        "the two apart, and the full claim is made to fail instead"
    ),
    ("test_postgres.py", "_RETRYABLE"): (
        "the backend retries a deadlock, which would hide the one the test provokes: "
        "there is no option to turn retries off, and none is wanted in production"
    ),
    ("test_workflows_locks.py", "_RETRYABLE"): (
        "as in test_postgres.py: a retried deadlock is a stall, not an error, and the test "
        "must see the deadlock it provokes"
    ),
    ("conftest.py", "_open_backend"): (
        "the suite closes every backend a test opens, so no connection outlives its test: "
        "the App opens them through this one method, which is not public"
    ),
    ("test_shutdown.py", "_open_backend"): (
        "a backend that blocks or fails on cue, to stop a worker in the middle of a pass"
    ),
}
"""(file, attribute) -> why the test must set it."""

SETTERS = {"setattr", "delattr", "object"}  # monkeypatch.setattr, setattr, patch.object


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _through_private(node: ast.expr) -> str | None:
    """The first private attribute named in ``node`` (``worker._producer.x``), if any."""
    for sub in ast.walk(node):
        if isinstance(sub, ast.Attribute) and _private(sub.attr):
            return sub.attr
    return None


def _patches(tree: ast.AST) -> list[tuple[int, str, str]]:
    """(line, private attribute, source) for each private attribute a test sets."""
    found: list[tuple[int, str, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name not in SETTERS or not node.args:
                continue
            target, attr = node.args[0], node.args[1] if len(node.args) > 1 else None
            named: str | None = None
            if isinstance(attr, ast.Constant) and isinstance(attr.value, str):
                named = attr.value if _private(attr.value) else None
            if isinstance(target, ast.Constant) and isinstance(target.value, str):
                # monkeypatch.setattr("package.module._name", value)
                named = next((p for p in target.value.split(".") if _private(p)), named)
            elif not (isinstance(target, ast.Name) and target.id in ("self", "cls")):
                named = named or _through_private(target)
            if named:
                found.append((node.lineno, named, ast.unparse(node)))
            continue
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign | ast.Delete):
            targets = list(node.targets)
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        for target in targets:
            for sub in ast.walk(target):
                if not isinstance(sub, ast.Attribute):
                    continue
                owner = sub.value
                if isinstance(owner, ast.Name) and owner.id in ("self", "cls"):
                    continue
                named = sub.attr if _private(sub.attr) else _through_private(owner)
                if named:
                    found.append((target.lineno, named, ast.unparse(node)))
                    break
    return found


def test_no_test_sets_a_private_attribute_of_sqljobs() -> None:
    used: set[tuple[str, str]] = set()
    offences = []
    for path in sorted(TESTS.rglob("*.py")):
        for line, attr, source in _patches(ast.parse(path.read_text(), str(path))):
            key = (path.name, attr)
            if key in ALLOWED:
                used.add(key)
            else:
                offences.append(f"{path.relative_to(TESTS)}:{line}: {source}")
    assert not offences, (
        "tests set private attributes (drive the worker with run_once() or "
        "sqljobs.testing.stepped_worker, or add a public option; else list it in "
        "ALLOWED with why):\n" + "\n".join(offences)
    )
    stale = sorted(set(ALLOWED) - used)
    assert not stale, f"ALLOWED names patches no test makes any more: remove {stale}"


def test_the_check_finds_each_way_of_setting_one() -> None:
    source = """
monkeypatch.setattr(worker, "_wake", None)
monkeypatch.setattr("sqljobs.context._WARNED", set())
monkeypatch.setattr(worker._producer, "lanes", 1)
worker._backend = None
worker._upkeep.scheduler = None
app.backend._pool += 1
setattr(backend, "_x", 1)
self._mine = 1
monkeypatch.setattr(backend, "change_marker", lambda: 0)
"""
    found = [attr for _, attr, _ in sorted(_patches(ast.parse(source)))]
    assert found == ["_wake", "_WARNED", "_producer", "_backend", "_upkeep", "_pool", "_x"]
