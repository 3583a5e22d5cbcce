"""``python -m chaos [--backend sqlite|postgres|both] [--seconds S] [--jobs N] [--quick]``:
run the chaos plan on each backend, print one table of figures, exit 1 on any problem."""

from __future__ import annotations

import argparse
import dataclasses
import sys

from chaos.run import Plan, run, table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m chaos", description=__doc__)
    parser.add_argument("--backend", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument("--seconds", type=float, help="how long the faults go on")
    parser.add_argument("--jobs", type=int, help="how many jobs the producers enqueue")
    parser.add_argument("--kill-every", type=float, help="mean seconds between SIGKILLs")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--quick", action="store_true", help="a 10-second run per backend")
    parser.add_argument("--keep", action="store_true", help="keep the scratch directories")
    args = parser.parse_args(argv)
    backends = ["sqlite", "postgres"] if args.backend == "both" else [args.backend]
    reports = []
    for backend in backends:
        plan = Plan(backend=backend, seed=args.seed)
        if args.quick:
            plan = dataclasses.replace(
                plan, seconds=10, jobs=500, workers=3, restart_every=4, cut_every=3
            )
        overrides = {"seconds": args.seconds, "jobs": args.jobs, "kill_every": args.kill_every}
        plan = dataclasses.replace(plan, **{k: v for k, v in overrides.items() if v is not None})
        print(f"chaos on {backend}: {plan}", file=sys.stderr, flush=True)
        reports.append(run(plan, keep=args.keep))
    print(table(reports))
    failed = False
    for report in reports:
        for problem in report.problems:
            failed = True
            print(f"PROBLEM ({report.plan.backend}): {problem}")
        if report.problems or args.keep:
            print(f"scratch ({report.plan.backend}): {report.scratch}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
