"""E5: a periodic job on 3 replicas. A ticker per replica runs every tick 3 times; sqljobs
claims each tick in storage with one conditional update and only enqueues a job keyed by
the tick, which the worker pool runs, so 3 replicas give one run per tick.

Replicas are real processes: three ``sqljobs worker`` processes, each running the
scheduler; the broken variant is three lab ticker processes.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from datetime import datetime
from pathlib import Path

from ..app import App
from .procs import fleet, wait_for
from .results import Progress, Result, Row, no_progress

INTERVAL, REPLICAS = 0.2, 3
WARM_UP = 1.2  # workers notice a schedule added at run time within schedule_interval (1 s)
ARTICLE: dict[str, dict[str, object]] = {
    "D1": {"runs": 75, "per replica": [25, 25, 25], "overlapping": 0},
    "D2": {"runs": 26, "per replica": [5, 8, 13], "overlapping": 0, "lag at end ms": 0},
    "D3": {"runs": 26, "per replica": [11, 7, 8], "overlapping": 25, "lag at end ms": 106},
    "D4": {"runs": 24, "per replica": [8, 6, 10], "overlapping": 23, "lag at end ms": 102},
    "D5": {"runs": 14, "per replica": [2, 4, 8], "overlapping": 0, "lag at end ms": 2203},
}
VARIANTS = (
    ("D2", "D2 sqljobs periodic(every=0.2), job takes 0 ms", 0.0, "allow"),
    ("D3", "D3 sqljobs periodic, job takes 300 ms, overlap='allow'", 0.3, "allow"),
    ("D5", "D5 sqljobs periodic, job takes 300 ms, overlap='skip'", 0.3, "skip"),
)
Run = tuple[str, int, float, float]  # key, pid, start, end


def read_runs(path: Path) -> list[Run]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        key, pid, start, end = line.split()
        out.append((key, int(pid), float(start), float(end)))
    return out


def tick_time(key: str) -> float:
    """The tick a job key names (``schedule:<name>:<ISO time>``)."""
    match = re.search(r"\d{4}-\d{2}-\d{2}T\S+$", key)
    return datetime.fromisoformat(match.group(0)).timestamp() if match else 0.0


def figures(runs: list[Run], ticked: bool) -> dict[str, object]:
    """Runs, runs per replica, runs that started while another was running, final lag."""
    runs = sorted(runs, key=lambda r: r[2])
    busy_until, overlapping = 0.0, 0
    for _, _, start, end in runs:
        if start < busy_until:
            overlapping += 1
        busy_until = max(busy_until, end)
    out: dict[str, object] = {
        "runs": len(runs),
        "per replica": sorted(Counter(pid for _, pid, _, _ in runs).values()),
        "overlapping": overlapping,
    }
    if ticked and runs:
        key, _, start, _ = runs[-1]
        out["lag at end ms"] = round(max(0.0, start - tick_time(key)) * 1000)
    return out


def run(url: str, quick: bool = False, progress: Progress = no_progress) -> Result:
    window = 3.0 if quick else 5.0
    expected = round(window / INTERVAL)
    result = Result(
        "E5",
        "periodic jobs on 3 replicas",
        f"{REPLICAS} replica processes share one schedule, every {INTERVAL * 1000:g} ms, "
        f"runs counted over {window:g} s ({expected} ticks); the sqljobs variants run side "
        "by side on one fleet of 3 worker processes",
        ["runs", "per replica", "overlapping", "lag at end ms"],
        chart="runs",
    )
    tmp = tempfile.TemporaryDirectory(prefix="sqljobs-lab-e5-")
    ticks_path = Path(tmp.name) / "ticks.log"
    app = App(url)
    try:
        d1 = _tickers(ticks_path.with_suffix(".d1"), window)
        progress(0.1)
        d4 = _claim_tickers(url, ticks_path.with_suffix(".d4"), window)
        progress(0.2)
        env = {"SQLJOBS_LAB_TICKS": str(ticks_path)}
        with fleet(url, 3.0, env) as f:
            queues = ",".join(f"lab-e5-{key.lower()}" for key, _, _, _ in VARIANTS)
            for _ in range(REPLICAS):
                f.sqljobs_worker(queues, 4)
            wait_for(lambda: app.stats().workers >= REPLICAS, 30, 0.05)
            began = time.time()
            for key, _, seconds, overlap in VARIANTS:
                app.schedule(f"lab-e5-{key.lower()}", every=INTERVAL, task="lab_tick",
                             kwargs={"seconds": seconds}, overlap=overlap,
                             queue=f"lab-e5-{key.lower()}", known=False)  # fmt: skip
            end = began + WARM_UP + window
            while time.time() < end + 0.8:  # the last ticks' runs finish
                progress(0.2 + 0.8 * min(1.0, (time.time() - began) / (window + WARM_UP + 0.8)))
                time.sleep(0.05)
            for key, _, _, _ in VARIANTS:
                app.pause_schedule(f"lab-e5-{key.lower()}")
        all_runs = read_runs(ticks_path)
    finally:
        app.close()
        tmp.cleanup()
    result.rows.append(Row("D1 each replica has its own ticker", figures(d1, False),
                           ARTICLE["D1"], broken=True))  # fmt: skip
    for key, label, _, _ in VARIANTS:
        name = f"schedule:lab-e5-{key.lower()}:"
        mine = [r for r in all_runs if r[0].startswith(name)]
        t0 = min((tick_time(r[0]) for r in mine), default=0.0) + WARM_UP
        in_window = [r for r in mine if t0 - 1e-6 <= tick_time(r[0]) < t0 + window - 1e-6]
        result.rows.append(Row(label, figures(in_window, True), ARTICLE[key]))
    d4_figures = figures(d4, True)
    d4_figures["tick drift ms"] = _drift_ms(d4)
    result.rows.append(
        Row(
            "D4 claim in storage, run in the replica, next run from now",
            d4_figures,
            ARTICLE["D4"],
            broken=True,
        )
    )
    _claims(result, expected)
    result.notes.append(
        f"the sqljobs window starts {WARM_UP:g} s after the schedules were added: workers "
        "notice a schedule added at run time within their schedule_interval (1 s), and the "
        "ticks before that fire together as a catch-up"
    )
    result.notes.append(
        "lag at end: how late the last tick's run started; with overlap='skip' sqljobs "
        "skips busy ticks instead of queueing them, so no backlog builds (the article's D5 "
        "fell 2.2 s behind)"
    )
    if quick:
        result.notes.append(f"--quick: {window:g} s instead of 5 s")
    progress(1.0)
    return result


def _tickers(path: Path, window: float) -> list[Run]:
    """Three ticker processes, each running every tick itself, for ``window`` seconds."""
    env = dict(os.environ, SQLJOBS_LAB_TICKS=str(path))
    _run_replicas(["sqljobs.lab.ticker", str(INTERVAL), "0", str(window)], env, window + 30)
    return read_runs(path)


def _claim_tickers(url: str, path: Path, window: float) -> list[Run]:
    """Three replicas claiming one stored schedule row, running a 300 ms job themselves
    and computing the next run from now (the article's D4)."""
    from .claimticker import prepare

    prepare(url, time.time())
    env = dict(os.environ, SQLJOBS_LAB_TICKS=str(path))
    args = ["sqljobs.lab.claimticker", url, str(INTERVAL), "0.3", str(window)]
    _run_replicas(args, env, window + 30)
    return read_runs(path)


def _run_replicas(args: list[str], env: dict[str, str], timeout: float) -> None:
    """Run ``python -m *args`` as REPLICAS processes to their end. If this one stops
    early (Ctrl-C, a timeout), kill them first: none may outlive the scratch database
    it writes to, which is dropped next."""
    procs = [subprocess.Popen([sys.executable, "-m", *args], env=env) for _ in range(REPLICAS)]
    try:
        for p in procs:
            p.wait(timeout)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def _drift_ms(runs: list[Run]) -> int:
    """How far the claimed ticks slid off the schedule's grid: 0 when each next run is
    computed from the tick, growing with every late claim when it is computed from now."""
    ticks = sorted(tick_time(key) for key, _, _, _ in runs)
    if len(ticks) < 2:
        return 0
    return round(((ticks[-1] - ticks[0]) - (len(ticks) - 1) * INTERVAL) * 1000)


def _claims(result: Result, expected: int) -> None:
    d1, d2, d3, d5, d4 = (r.ours for r in result.rows)
    result.claim(
        f"a ticker per replica runs every tick {REPLICAS} times: {d1['runs']} runs for "
        f"{expected} ticks (article 75 for 25)",
        int(str(d1["runs"])) >= (REPLICAS * expected) - REPLICAS,
    )
    result.claim(
        f"sqljobs: {d2['runs']} runs for {expected} ticks, one per tick, shared by replicas "
        f"{d2['per replica']} (article 26 for 25)",
        abs(int(str(d2["runs"])) - expected) <= 1 and d2["overlapping"] == 0,
    )
    result.claim(
        f"a job longer than the interval overlaps with overlap='allow': {d3['overlapping']} "
        f"overlapping runs (article 25); overlap='skip': {d5['overlapping']} (article 0)",
        int(str(d3["overlapping"])) > 0 and d5["overlapping"] == 0,
    )
    result.claim(
        f"claiming in storage but counting the next run from now drifts off the grid by "
        f"{d4['tick drift ms']} ms and overlaps {d4['overlapping']} runs (article: 24 runs "
        "for 25 ticks, 23 overlapping)",
        int(str(d4["tick drift ms"])) > 0 and int(str(d4["overlapping"])) > 0,
    )
