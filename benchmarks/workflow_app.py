"""The sqljobs side of ``workflows.py``: its workflows, and the worker process that runs them.

    python workflow_app.py URL FOLDER [--count]

runs ``app.run_worker(concurrency=8)`` on URL until SIGTERM, after writing ``ready`` (the
``time.time()`` just before that call) to FOLDER. The workflows write what they measure
there too: ``steps.txt`` (a line per workflow: the seconds each ``wf.step`` call took, a
no-op function and its checkpoint) and ``resumed.txt`` (``N time`` when the step after
``wf.wait_for("e:N")`` starts). With ``--count`` every statement this process sends is
counted (a trace callback on each SQLite connection; ``Cursor.execute`` on PostgreSQL) and
``statements.json`` holds the time and the count of each statement (by its first 60
characters), rewritten every 0.1 s: the bench reads it, with no query of its own.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from itertools import pairwise
from pathlib import Path
from typing import Any, TextIO

import sqljobs

_lock = threading.Lock()
_files: dict[str, TextIO] = {}


def _append(name: str, line: str) -> None:
    with _lock:
        out = _files.get(name)
        if out is None:
            out = _files[name] = open(Path(os.environ["BENCH_FOLDER"]) / name, "a", buffering=1)  # noqa: SIM115
        out.write(line + "\n")


def _noop(i: int) -> None:
    return None


def _stamp() -> float:
    return time.time()


def register(app: sqljobs.App) -> dict[str, Any]:
    """The benchmark's workflows on ``app``: ``steps(n)``, ``resume(n)`` and ``parked(n)``."""

    @app.workflow(name="steps")
    def steps(wf: sqljobs.Workflow, n: int) -> None:
        marks = [time.perf_counter()]
        for i in range(n):
            wf.step(f"s{i}", _noop, i)
            marks.append(time.perf_counter())
        _append("steps.txt", " ".join(f"{b - a:.7f}" for a, b in pairwise(marks)))

    @app.workflow(name="resume")
    def resume(wf: sqljobs.Workflow, n: int) -> None:
        wf.wait_for(f"e:{n}")
        started = wf.step("after", _stamp)
        _append("resumed.txt", f"{n} {started:.6f}")

    @app.workflow(name="parked")
    def parked(wf: sqljobs.Workflow, n: int) -> None:
        wf.wait_for(f"never:{n}")

    return {"steps": steps, "resume": resume, "parked": parked}


def _count_statements(url: str, folder: Path) -> None:
    """Count every statement this process sends from now on; see the module's docstring."""
    counted: dict[str, int] = {}
    lock = threading.Lock()

    def bump(sql: Any) -> None:
        text = sql if isinstance(sql, str) else getattr(sql, "as_string", lambda _: "?")(None)
        key = " ".join(text.split())[:60]
        with lock:
            counted[key] = counted.get(key, 0) + 1

    if url.startswith("sqlite"):
        import sqlite3

        connect = sqlite3.connect

        def traced(*args: Any, **kwargs: Any) -> sqlite3.Connection:
            conn = connect(*args, **kwargs)
            conn.set_trace_callback(bump)
            return conn

        sqlite3.connect = traced  # type: ignore[assignment]
    else:
        import psycopg

        execute, executemany = psycopg.Cursor.execute, psycopg.Cursor.executemany

        def counted_execute(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
            bump(query)
            return execute(self, query, *args, **kwargs)

        def counted_executemany(self: Any, query: Any, params_seq: Any, **kwargs: Any) -> Any:
            params_seq = list(params_seq)
            for _ in params_seq:
                bump(query)
            return executemany(self, query, params_seq, **kwargs)

        psycopg.Cursor.execute = counted_execute  # type: ignore[method-assign]
        psycopg.Cursor.executemany = counted_executemany  # type: ignore[method-assign]

    def report() -> None:
        path, scratch = folder / "statements.json", folder / "statements.tmp"
        while True:
            with lock:
                snapshot = dict(counted)
            scratch.write_text(json.dumps({"time": time.time(), "counts": snapshot}))
            os.replace(scratch, path)
            time.sleep(0.1)

    threading.Thread(target=report, name="statement-count", daemon=True).start()


def main(argv: list[str]) -> None:
    url, folder = argv[0], Path(argv[1])
    os.environ["BENCH_FOLDER"] = str(folder)
    if "--count" in argv:
        _count_statements(url, folder)
    app = sqljobs.App(url)
    register(app)
    (folder / "ready").write_text(f"{time.time():.6f}\n")
    app.run_worker(concurrency=8)


if __name__ == "__main__":
    main(sys.argv[1:])
