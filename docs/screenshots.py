"""Take the README's dashboard screenshots from a queue that has done some work.

    .venv/bin/python docs/screenshots.py [--out docs/images]

A fresh SQLite file gets a few hundred jobs in four queues, a worker runs them for a
while (some fail and retry, a few die, a slow task keeps running), one queue is paused,
and the dashboard is served by its own process; headless Chromium (Debian's ``chromium``,
driven by Playwright) then photographs the overview and a dead job's page.
"""

from __future__ import annotations

import argparse
import os
import random
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import sqljobs

ROOT = Path(__file__).resolve().parent.parent


def build_app(url: str) -> sqljobs.App:
    app = sqljobs.App(url)
    slow_gate = threading.Event()

    @app.task(
        queue="billing", retry=sqljobs.Retry(max_attempts=2, base=0.05), redact=["card"], lease=3
    )
    def charge(customer: str, card: str, cents: int) -> dict[str, object]:
        time.sleep(random.uniform(0.01, 0.05))
        if customer.endswith("7"):
            raise ValueError(f"card declined for customer {customer}")
        return {"charged": cents}

    @app.task(queue="mail", lease=3)
    def send_receipt(to: str) -> None:
        time.sleep(random.uniform(0.005, 0.02))

    @app.task(queue="reports", lease=3)
    def build_report(ctx: sqljobs.JobContext, month: str) -> None:
        for page in range(1, 50):
            ctx.progress(page, total=50, note=f"page {page}")
            if slow_gate.wait(0.5):
                return

    @app.task(queue="exports")
    def export(table: str) -> None: ...

    @app.periodic("0 3 * * 1-5", tz="Europe/Berlin", lease=3)
    def nightly_cleanup() -> None: ...

    return app


def populate(app: sqljobs.App) -> None:
    tasks = app.tasks
    for i in range(240):
        tasks["charge"].enqueue(f"cus_{1000 + i}", "4111-1111-1111-1111", 100 * (i % 50 + 1))
        tasks["send_receipt"].enqueue(f"user{i}@example.org")
    for month in ("2026-09", "2026-10", "2026-11"):
        tasks["build_report"].enqueue(month)
    for table in ("orders", "invoices", "customers"):
        tasks["export"].enqueue(table)
    app.pause_queue("exports")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=str(ROOT / "docs" / "images"))
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as folder:
        url = f"sqlite:///{folder}/jobs.db"
        app = build_app(url)
        populate(app)
        worker = sqljobs.Worker(app, install_signal_handlers=False)
        thread = threading.Thread(target=worker.run, daemon=True)
        thread.start()
        time.sleep(8)  # let it work: minutes of throughput for the chart, retries, deaths
        port = free_port()
        env = dict(os.environ, SQLJOBS_URL=url, PYTHONPATH=str(ROOT / "docs"))
        server = subprocess.Popen(
            [sys.executable, "-m", "sqljobs", "--app", "screenshots:serving_app", "dashboard",
             "--port", str(port)],
            env=env, cwd=ROOT / "docs",
        )  # fmt: skip
        base = f"http://127.0.0.1:{port}"
        try:
            for _ in range(100):
                try:
                    urllib.request.urlopen(base + "/api/stats", timeout=1)
                    break
                except OSError:
                    time.sleep(0.1)
            dead = app.find_jobs(sqljobs.JobFilter(state="dead"), limit=1).jobs[0]
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path="/usr/bin/chromium")
                page = browser.new_page(viewport={"width": 1280, "height": 900})
                page.goto(base + "/")
                page.screenshot(path=str(out / "dashboard-overview.png"), full_page=True)
                page.goto(f"{base}/jobs/{dead.id}")
                page.screenshot(path=str(out / "dashboard-job.png"), full_page=True)
                browser.close()
        finally:
            server.terminate()
            server.wait(timeout=10)
            worker.stop(immediate=True)
            thread.join(timeout=10)
            app.close()
    print(f"screenshots in {out}")


# The dashboard process imports this module for its App: the same tasks, so redaction holds.
serving_app = build_app(os.environ.get("SQLJOBS_URL", "sqlite:///unused.db"))

if __name__ == "__main__":
    main()
