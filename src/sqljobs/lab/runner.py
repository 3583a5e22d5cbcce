"""Runs the chosen experiments, each on a fresh scratch database, with a progress bar."""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from ..errors import ConfigurationError
from .db import scratch_database
from .results import Result, print_result, write_chart

Experiment = Callable[..., Result]
MODULES = (
    ("E1", "e1_claim", "claim"),
    ("E2", "e2_crash", "crash recovery"),
    ("E3", "e3_lease", "lease shorter than the job"),
    ("E4", "e4_idempotency", "idempotency"),
    ("E5", "e5_periodic", "periodic jobs on 3 replicas"),
    ("E6", "e6_retry", "retry storms"),
    ("E7", "e7_shutdown", "graceful shutdown"),
    ("E8", "e8_latency", "polling vs change signals"),
    ("E9", "e9_claim_cost", "claim cost and batching"),
    ("E10", "e10_workflows", "workflows under SIGKILL"),
)
NAMES = tuple(name for name, _, _ in MODULES)


def experiment(name: str) -> Experiment:
    """The ``run(url, quick, progress)`` function of experiment ``name`` (E1..E10)."""
    for key, module, _ in MODULES:
        if key == name.upper():
            run: Experiment = importlib.import_module(f"{__package__}.{module}").run
            return run
    raise ConfigurationError(f"unknown experiment {name!r}; choose from {', '.join(NAMES)} or all")


def select(names: Sequence[str]) -> list[str]:
    """Expand ``all`` and check the names; keep the given order."""
    if not names or any(n.lower() == "all" for n in names):
        return list(NAMES)
    chosen = [n.upper() for n in names]
    for n in chosen:
        experiment(n)
    return chosen


def run_all(
    names: Sequence[str],
    backend: str,
    url: str | None,
    quick: bool,
    console: Console,
    charts: Path | None = None,
    show_tables: bool = True,
) -> list[Result]:
    """Run each experiment on its own scratch database; print its table as it finishes."""
    results = []
    titles = {key: title for key, _, title in MODULES}
    for name in names:
        run = experiment(name)
        with (
            Progress(
                TextColumn(f"{name} {titles[name]:<28}"),
                BarColumn(),
                TimeElapsedColumn(),
                console=console,
                transient=True,
            ) as bar,
            scratch_database(backend, url) as db_url,
        ):
            task = bar.add_task(name, total=1.0)

            def progress(fraction: float, task_id: TaskID = task) -> None:
                bar.update(task_id, completed=min(1.0, max(0.0, fraction)))

            began = time.perf_counter()
            result = run(db_url, quick=quick, progress=progress)
            result.seconds = time.perf_counter() - began
        results.append(result)
        if show_tables:
            print_result(console, result)
        if charts is not None:
            write_chart(result, charts)
    return results
