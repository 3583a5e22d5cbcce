"""Enqueue-to-start latency from another process, with an idle worker subprocess.

The worker is the real command line (``python -m sqljobs --app latency_app:app worker``),
so it learns of new jobs only through the database, as it would in production. Jobs are
enqueued one at a time with gaps, so each finds the worker idle.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from common import Sample, percentile, sqlite_url, temp_db, wait_until
from latency_app import register

import sqljobs

HERE = Path(__file__).resolve().parent
TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _start_worker(url: str, out: Path, log: Path, concurrency: int) -> subprocess.Popen[bytes]:
    env = dict(os.environ, SQLJOBS_URL=url, BENCH_LATENCY_OUT=str(out))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(HERE), env.get("PYTHONPATH")) if p)
    command = [sys.executable, "-m", "sqljobs", "--app", "latency_app:app", "worker",
               "--concurrency", str(concurrency)]  # fmt: skip
    with open(log, "wb") as sink:
        return subprocess.Popen(command, env=env, cwd=HERE, stdout=sink, stderr=subprocess.STDOUT)


def _stop_worker(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM (graceful drain), then kill if it does not exit."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _cpu_seconds(pid: int) -> float | None:
    """User + system CPU time of a live process, from /proc (None elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / TICKS


def _delays(out: Path) -> list[float]:
    if not out.exists():
        return []
    return [float(line) for line in out.read_text().split()]


def _expect(out: Path, count: int, proc: subprocess.Popen[bytes], log: Path) -> None:
    """Wait for ``count`` recorded starts, failing fast (with the log) if the worker died."""

    def ready() -> bool:
        if proc.poll() is not None:
            raise RuntimeError(f"worker exited with {proc.returncode}:\n{log.read_text()[-2000:]}")
        return len(_delays(out)) >= count

    wait_until(ready, timeout=60, step=0.01)


def latency(n: int = 200, gap: float = 0.02, concurrency: int = 8) -> Sample:
    """p50/p99 of enqueue-to-start over ``n`` single enqueues ``gap`` seconds apart."""
    with temp_db() as path:
        out, log = path.parent / "latency.txt", path.parent / "worker.log"
        app = sqljobs.App(sqlite_url(path))
        stamp = register(app)
        app.migrate()
        proc = _start_worker(app.url, out, log, concurrency)
        try:
            stamp.enqueue(time.time())  # warm-up: waits for the worker to come up
            _expect(out, 1, proc, log)
            time.sleep(0.2)
            cpu, wall = _cpu_seconds(proc.pid), time.perf_counter()
            enqueue_s = []
            for _ in range(n):
                sent = time.time()
                stamp.enqueue(sent)
                enqueue_s.append(time.time() - sent)
                time.sleep(gap)
            _expect(out, n + 1, proc, log)
            cpu_end, wall = _cpu_seconds(proc.pid), time.perf_counter() - wall
        finally:
            _stop_worker(proc)
            app.close()
        delays = _delays(out)[1:]
    sample = {
        "p50_ms": percentile(delays, 50) * 1000,
        "p99_ms": percentile(delays, 99) * 1000,
        "enqueue_p50_ms": percentile(enqueue_s, 50) * 1000,
    }
    if cpu is not None and cpu_end is not None:
        sample["worker_cpu_pct"] = 100 * (cpu_end - cpu) / wall
    return sample
