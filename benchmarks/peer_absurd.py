"""Absurd (absurd-sdk, with absurdctl for its schema), driven only through its public API
and its command line, as a PostgreSQL peer of sqljobs' workflows:

    python peer_absurd.py setup URL WORKFLOWS STEPS
    python peer_absurd.py worker URL FOLDER

``setup`` applies Absurd's schema to URL (``absurdctl init``), creates the queue
``wfbench`` (``absurdctl create-queue``) and spawns WORKFLOWS tasks of STEPS no-op steps.
``worker`` writes ``ready`` (the ``time.time()`` just before ``start_worker``) to FOLDER
and runs ``start_worker(concurrency=8)``, its defaults otherwise (a claim of up to 8, a
0.25 s poll when idle), until SIGTERM; each task writes a line of ``steps.txt``, the
seconds each ``ctx.step`` call took.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from itertools import pairwise
from pathlib import Path
from typing import Any

from absurd_sdk import Absurd

QUEUE = "wfbench"
_lock = threading.Lock()


def _noop() -> None:
    return None


def register(app: Absurd) -> None:
    @app.register_task(name="steps")
    def steps(params: Any, ctx: Any) -> None:
        marks = [time.perf_counter()]
        for i in range(int(params["n"])):
            ctx.step(f"s{i}", _noop)
            marks.append(time.perf_counter())
        line = " ".join(f"{b - a:.7f}" for a, b in pairwise(marks))
        with _lock, open(Path(os.environ["BENCH_FOLDER"]) / "steps.txt", "a") as out:
            out.write(line + "\n")


def absurdctl() -> str:
    """The ``absurdctl`` beside this interpreter (its package installs it there)."""
    beside = Path(sys.executable).parent / "absurdctl"
    found = str(beside) if beside.exists() else shutil.which("absurdctl")
    if found is None:
        raise RuntimeError("absurdctl is not installed (pip install absurdctl)")
    return found


def setup(url: str, workflows: int, n: int) -> None:
    for command in (["init", "-d", url], ["create-queue", "-d", url, QUEUE]):
        subprocess.run([absurdctl(), *command], check=True, capture_output=True)
    app = Absurd(url, queue_name=QUEUE)
    register(app)
    for _ in range(workflows):
        app.spawn("steps", {"n": n})
    app.close()


def worker(url: str, folder: Path) -> None:
    os.environ["BENCH_FOLDER"] = str(folder)
    app = Absurd(url, queue_name=QUEUE)
    register(app)
    signal.signal(signal.SIGTERM, lambda *_: app.stop_worker())
    (folder / "ready").write_text(f"{time.time():.6f}\n")
    app.start_worker(concurrency=8)
    app.close()


def main(argv: list[str]) -> None:
    if argv[0] == "setup":
        setup(argv[1], int(argv[2]), int(argv[3]))
    elif argv[0] == "worker":
        worker(argv[1], Path(argv[2]))
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
