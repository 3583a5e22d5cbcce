"""E4: one charge of 100, delivered 5 times, on a balance of 10000.

Every variant runs in the library's Worker; what differs is how the handler guards the
charge. C1-C3 and C5 are the mistakes; C4 and C6 use ``sqljobs.idempotent`` and
``ctx.transaction()``.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from ..app import App
from ..context import JobContext
from ..idempotency import idempotent
from ..retry import Retry
from .common import worker_thread
from .db import Db
from .procs import wait_for
from .results import Progress, Result, Row, no_progress

START, AMOUNT, DELIVERIES, RACERS = 10_000, 100, 5, 10
ARTICLE = {
    "C1": {"charges": 5, "balance": 9500, "idempotency rows": 0, "outcome": "overcharged 400"},
    "C2": {"charges": 5, "balance": 9500, "idempotency rows": 0, "outcome": "overcharged 400"},
    "C3": {"charges": 3, "balance": 9700, "idempotency rows": 0, "outcome": "overcharged 200"},
    "C4": {"charges": 1, "balance": 9900, "idempotency rows": 1, "outcome": "correct"},
    "C5": {"charges": 0, "balance": 10000, "idempotency rows": 1, "outcome": "job silently lost"},
    "C6": {"charges": 1, "balance": 9900, "idempotency rows": 1, "outcome": "correct"},
}
LABELS = {
    "C1": "C1 no idempotency key",
    "C2": "C2 key regenerated per retry (fresh uuid)",
    "C3": f"C3 business key, check-then-insert, {RACERS} at once",
    "C4": "C4 sqljobs.idempotent: UNIQUE + insert-or-ignore",
    "C5": "C5 marker committed first, then the charge fails",
    "C6": "C6 marker and charge in one ctx.transaction()",
}
Handler = Callable[[JobContext], None]


class Bank:
    """The business tables: one account per variant, and a row per charge made."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.p = "%s" if url.startswith("postgres") else "?"
        with Db(url) as db:
            db.execute("CREATE TABLE IF NOT EXISTS lab_accounts (id TEXT PRIMARY KEY, "
                       "balance INTEGER NOT NULL)")  # fmt: skip
            db.execute("CREATE TABLE IF NOT EXISTS lab_charges (account TEXT NOT NULL)")
            db.execute("CREATE TABLE IF NOT EXISTS lab_loose_markers (key TEXT NOT NULL)")

    def open(self, account: str) -> None:
        with Db(self.url) as db:
            db.execute("INSERT INTO lab_accounts VALUES (?, ?)", (account, START))

    def charge(self, tx: Any, account: str) -> None:
        """The business write, inside the caller's transaction."""
        tx.execute(f"UPDATE lab_accounts SET balance = balance - {AMOUNT} WHERE id = {self.p}",
                   (account,))  # fmt: skip
        tx.execute(f"INSERT INTO lab_charges VALUES ({self.p})", (account,))

    def figures(self, account: str) -> dict[str, Any]:
        with Db(self.url) as db:
            balance = db.value("SELECT balance FROM lab_accounts WHERE id = ?", (account,))
            charges = db.value("SELECT count(*) FROM lab_charges WHERE account = ?", (account,))
            rows = db.value("SELECT count(*) FROM sqljobs_idempotency WHERE key LIKE ?",
                            (f"{account}:%",))  # fmt: skip
        over = START - AMOUNT - balance
        outcome = "correct" if charges == 1 else (
            f"overcharged {over}" if over > 0 else "job silently lost")  # fmt: skip
        return {"charges": charges, "balance": balance, "idempotency rows": rows,
                "outcome": outcome}  # fmt: skip


def handlers(bank: Bank, account: str, app: App) -> Handler:
    """The handler for one variant (named by ``account``)."""
    key = f"{account}:order-1001:pay"
    if account in ("C1", "C2"):

        def no_guard(ctx: JobContext) -> None:
            with ctx.transaction() as tx:  # C2's uuid key only made every delivery look new
                bank.charge(tx, account)

        return no_guard
    if account == "C3":
        checked = threading.Barrier(RACERS)

        def check_then_insert(ctx: JobContext) -> None:
            with Db(bank.url) as db:  # the check: its own statement, before the insert
                seen = db.value("SELECT count(*) FROM lab_loose_markers WHERE key = ?", (key,))
            checked.wait(10)  # every delivery arrives at once
            if not seen:
                with ctx.transaction() as tx:
                    tx.execute(f"INSERT INTO lab_loose_markers VALUES ({bank.p})", (key,))
                    bank.charge(tx, account)

        return check_then_insert
    if account == "C4":

        def unique_marker(ctx: JobContext) -> None:
            with ctx.transaction() as tx:
                if idempotent(tx, key):
                    bank.charge(tx, account)

        return unique_marker
    if account == "C5":

        def marker_first(ctx: JobContext) -> None:
            # the backend's plain transaction, on purpose: C5 is the mistake of committing
            # the marker outside the job's fenced ctx.transaction(), which the App never offers
            with app.backend.job_transaction() as tx:  # the marker commits on its own
                fresh = idempotent(tx, key)
            if fresh:
                raise ConnectionError("gateway down")  # the charge fails after the marker
            # the retry sees the marker and skips the charge: "already done"

        return marker_first

    def one_transaction(ctx: JobContext) -> None:
        with ctx.transaction() as tx:
            if idempotent(tx, key):
                bank.charge(tx, account)
                if ctx.attempt == 1:
                    raise ConnectionError("gateway down")  # rolls back marker and charge

    return one_transaction


def run_variant(url: str, bank: Bank, account: str) -> dict[str, Any]:
    app = App(url)
    queue = f"lab-e4-{account.lower()}"
    try:
        bank.open(account)
        handler = handlers(bank, account, app)
        task = app.task(name=f"lab_e4_{account.lower()}", queue=queue, lease=30,
                        retry=Retry(max_attempts=3, base=0.0))(handler)  # fmt: skip
        deliveries = RACERS if account == "C3" else DELIVERIES
        if account == "C2":
            ids = [task.with_options(key=str(uuid.uuid4())).enqueue().id for _ in range(deliveries)]
        elif account == "C5":
            ids = [task.enqueue().id]  # one delivery and its retry are enough to lose it
        else:
            ids = [task.enqueue().id for _ in range(deliveries)]
        with Db(url) as db, worker_thread(app, concurrency=RACERS, queues=(queue,)):

            def settled() -> bool:
                left = db.value(
                    "SELECT count(*) FROM sqljobs_jobs WHERE queue = ? AND state IN "
                    "('pending', 'running')", (queue,))  # fmt: skip
                return bool(left == 0)

            wait_for(settled, 30)
        figures = bank.figures(account)
        figures["jobs done"] = sum(1 for i in ids if (j := app.get_job(i)) and j.state == "done")
        return figures
    finally:
        app.close()


def run(url: str, quick: bool = False, progress: Progress = no_progress) -> Result:
    result = Result(
        "E4",
        "idempotency: one charge of 100 delivered 5 times",
        f"balance starts at {START}; each variant is a real job run by the sqljobs Worker",
        ["charges", "balance", "idempotency rows", "jobs done", "outcome"],
        chart="charges",
    )
    began = time.perf_counter()
    bank = Bank(url)
    for n, account in enumerate(LABELS):
        figures = run_variant(url, bank, account)
        broken = account not in ("C4", "C6")
        result.rows.append(Row(LABELS[account], figures, ARTICLE[account], broken))
        progress((n + 1) / len(LABELS))
    rows = {k: result.row(k).ours for k in LABELS}
    for k in ("C1", "C2"):
        result.claim(f"{k}: {rows[k]['charges']} charges for one payment (article 5)",
                     rows[k]["charges"] == DELIVERIES)  # fmt: skip
    result.claim(f"C3 check-then-insert: {rows['C3']['charges']} charges (article 3, more than 1)",
                 rows["C3"]["charges"] > 1)  # fmt: skip
    for k in ("C4", "C6"):
        result.claim(
            f"{k}: exactly {rows[k]['charges']} charge, balance {rows[k]['balance']} "
            "(article 1, 9900)",
            rows[k]["charges"] == 1 and rows[k]["balance"] == START - AMOUNT,
        )
    result.claim(
        f"C5 marker first: {rows['C5']['charges']} charges, yet the job is done "
        f"({rows['C5']['jobs done']}): silently lost (article 0)",
        rows["C5"]["charges"] == 0 and rows["C5"]["jobs done"] == 1,
    )
    result.notes.append(
        f"C3's {RACERS} deliveries are released together after their checks (a barrier), the "
        "worst case of the race the article hit by chance, hence more charges than its 3"
    )
    result.seconds = time.perf_counter() - began
    return result
