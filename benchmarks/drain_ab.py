"""The drain of this checkout beside an earlier revision's, measured in alternating rounds.

    python benchmarks/drain_ab.py --base 9272213 [--backend postgres|sqlite] [--rounds 7]
                                  [--jobs 10000] [--prefetch N] [--task noop|anoop]

Each revision runs the same case (``sqljobs_cases.drain``: from worker start until N
pre-enqueued no-op jobs have their outcomes committed, concurrency 8; ``--task anoop``:
the ``async def`` twin) from its own
sources and its own benchmark code (``git archive`` of ``--base`` into a temporary
folder), each run in a fresh process and a fresh database, the two revisions taking
turns round by round so the machine's noise falls on both alike. It prints every
round's jobs/s and the ratio of the medians (this checkout over the base): a figure
measured here, on this machine, in one run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

RUN = """
import json, sys
sys.path[:0] = [{src!r}, {bench!r}]
import sqljobs_cases as sq
backend, jobs, prefetch, task = {backend!r}, {jobs}, {prefetch}, {task!r}
options = {{}} if prefetch is None else {{"prefetch": prefetch}}
if task != "noop":  # (revisions before d388b07 know no `task`: the no-op drain asks none)
    options["task"] = task
if backend == "postgres":
    import pg_server
    with pg_server.scratch_db("ab") as url:
        sample = sq.drain(url, jobs, **options)
else:
    import tempfile
    with tempfile.TemporaryDirectory() as folder:
        sample = sq.drain(f"sqlite:///{{folder}}/jobs.db", jobs, **options)
print(json.dumps(sample))
"""


def one_run(root: Path, backend: str, jobs: int, prefetch: int | None, task: str) -> float:
    code = RUN.format(
        src=str(root / "src"), bench=str(root / "benchmarks"),
        backend=backend, jobs=jobs, prefetch=prefetch, task=task,
    )  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, cwd=root
    )
    if done.returncode != 0:
        raise RuntimeError(f"{root}: {done.stderr[-2000:]}")
    return float(json.loads(done.stdout.strip().splitlines()[-1])["jobs_per_s"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", required=True, help="a git revision to compare with")
    parser.add_argument("--backend", choices=["postgres", "sqlite"], default="postgres")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--prefetch", type=int, default=None)
    parser.add_argument("--task", choices=["noop", "anoop"], default="noop")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        base = Path(folder)
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", args.base, "src", "benchmarks"],
            capture_output=True, check=True,
        )  # fmt: skip
        subprocess.run(["tar", "-x", "-C", str(base)], input=archive.stdout, check=True)
        here: list[float] = []
        then: list[float] = []
        for n in range(args.rounds):
            order = [(here, ROOT), (then, base)] if n % 2 == 0 else [(then, base), (here, ROOT)]
            for figures, root in order:
                figures.append(one_run(root, args.backend, args.jobs, args.prefetch, args.task))
            print(f"round {n + 1}: this {here[-1]:,.0f} jobs/s, {args.base} {then[-1]:,.0f} jobs/s")
    ratio = statistics.median(here) / statistics.median(then)
    print(
        f"{args.backend} drain of {args.jobs:,} {'async def ' if args.task == 'anoop' else ''}"
        "no-op jobs, concurrency 8"
        f"{'' if args.prefetch is None else f', prefetch {args.prefetch}'}: median "
        f"{statistics.median(here):,.0f} jobs/s here, {statistics.median(then):,.0f} at "
        f"{args.base}; ratio {ratio:.2f} over {args.rounds} alternating rounds"
    )


if __name__ == "__main__":
    main()
