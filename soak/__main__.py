"""``python -m soak [--backend sqlite|postgres|both] [--minutes M] [--rate R] [--out DIR]``:
a steady run per backend, its figures sampled, judged flat or not, and plotted; exit 1
when a figure grew past its tolerance."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

from soak.run import Plan, run, table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m soak", description=__doc__)
    parser.add_argument("--backend", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument(
        "--rate", type=float, help="jobs per second (default: 70%% of the measured capacity)"
    )
    parser.add_argument("--retain", type=float, help="seconds done jobs are kept (default 60)")
    parser.add_argument("--out", type=Path, default=Path("soak-report"))
    args = parser.parse_args(argv)
    backends = ["sqlite", "postgres"] if args.backend == "both" else [args.backend]
    reports = []
    for backend in backends:
        plan = dataclasses.replace(Plan(backend=backend), seconds=args.minutes * 60)
        if args.rate is not None:
            plan = dataclasses.replace(plan, rate=args.rate)
        if args.retain is not None:
            plan = dataclasses.replace(plan, retain=args.retain)
        if plan.seconds < 30 * plan.sample_every:  # at least 30 samples in a short run
            plan = dataclasses.replace(plan, sample_every=max(1.0, plan.seconds / 30))
        print(f"soak on {backend}: {plan}", file=sys.stderr, flush=True)
        reports.append(run(plan, args.out, lambda m: print(m, file=sys.stderr, flush=True)))
    print(table(reports))
    for report in reports:
        measured = f"{report.capacity:,.0f} jobs/s" if report.capacity else "not measured"
        print(f"{report.plan.backend}: capacity {measured}, soaked at {report.rate:,.0f} jobs/s")
    failed = False
    for report in reports:
        for path in report.files:
            print(f"wrote {path}")
        for problem in report.problems:
            failed = True
            print(f"PROBLEM ({report.plan.backend}): {problem}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
