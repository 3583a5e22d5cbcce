"""What a type checker says of typed tasks: mypy, run once on a sample with deliberate
mistakes, reports exactly the lines marked ``# E:`` (with that text) and a note for each
``# N:`` (``reveal_type``), and nothing on the calls that are right."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "tests" / "typing_samples" / "typed_tasks.py"
MARK = re.compile(r"  # ([EN]): (.+)$")
REPORTED = re.compile(r"^(?P<path>[^:]+):(?P<line>\d+): (?P<kind>error|note): (?P<text>.*)$")


def expected_marks() -> dict[int, tuple[str, str]]:
    """Line number -> ("error" or "note", the text the message must contain)."""
    marks: dict[int, tuple[str, str]] = {}
    for number, line in enumerate(SAMPLE.read_text().splitlines(), start=1):
        found = MARK.search(line)
        if found:
            kind = "error" if found[1] == "E" else "note"
            marks[number] = kind, found[2].strip()
    return marks


def test_mypy_flags_exactly_the_marked_mistakes_and_reveals_result_types(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    api = pytest.importorskip("mypy.api")
    pytest.importorskip("pydantic")
    # this checkout's sqljobs, not an installed one; a cache kept between runs (~1 s warm)
    monkeypatch.setenv("MYPYPATH", str(ROOT / "src"))
    cache = request.config.cache.mkdir("mypy-typing") if request.config.cache else None
    options = ["--config-file", str(ROOT / "pyproject.toml"), "--no-error-summary"]
    if cache is not None:
        options += ["--cache-dir", str(cache)]
    monkeypatch.chdir(ROOT)
    stdout, stderr, status = api.run([*options, str(SAMPLE.relative_to(ROOT))])
    assert stderr == "", stderr
    reported: dict[int, list[tuple[str, str]]] = {}
    for line in stdout.splitlines():
        found = REPORTED.match(line)
        assert found, f"unexpected mypy output: {line}"
        assert Path(found["path"]).name == SAMPLE.name, line
        reported.setdefault(int(found["line"]), []).append((found["kind"], found["text"]))

    marks = expected_marks()
    assert sum(kind == "error" for kind, _ in marks.values()) >= 9, "the sample lost its mistakes"
    for number, (kind, text) in marks.items():
        messages = [m for k, m in reported.get(number, []) if k == kind]
        wanted = f"line {number}: expected {kind} {text!r}, got {messages}"
        assert any(text in m for m in messages), wanted
    unmarked = {
        n: msgs
        for n, msgs in reported.items()
        if any(k == "error" for k, _ in msgs) and marks.get(n, ("",))[0] != "error"
    }
    assert unmarked == {}, "errors on lines that should type-check"
    assert status == 1  # mypy's "found errors", not a crash (2)
