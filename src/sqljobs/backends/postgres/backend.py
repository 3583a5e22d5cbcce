"""PostgreSQL backend: many worker hosts on one database.

Claims are one statement (``FOR UPDATE SKIP LOCKED`` in a materialised CTE feeding an
``UPDATE ... RETURNING``); completions, retries and heartbeats are one ``unnest`` statement
per batch, every one fenced by state and token. Enqueues are in :mod:`.enqueuer`, connections in
:mod:`.pool`; what is the same on SQLite is in :mod:`..shared` and :mod:`..ops`; wake-ups
(LISTEN/NOTIFY) are :class:`sqljobs.notifiers.postgres.PostgresNotifier`.

``listen=False`` is poll-only mode, for PgBouncer in transaction mode, where one client
connection's transactions run on whichever server session is free: nothing may rest on a
session. So no LISTEN, no server-side prepared statements (psycopg prepares a statement
on its fifth run, and the next run may land on a session that never saw it), and no
session ``SET`` (it would stay on one server session, serving other clients, while ours
move on): the worker's asynchronous commit is dropped, and JIT and bitmap scans are left
to the server's settings (docs/pgbouncer.md shows how to set them there).
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import replace
from typing import Any

import psycopg
import psycopg.errors
import psycopg_pool

from ...errors import BackendError, ConfigurationError
from ...jobs import FINISHED_STATES, ClaimedJob, HeldJob, JobState, Outcome
from ...notifiers.postgres import PostgresNotifier, channel_for
from ..ops.claims import LimitedScans
from ..records import Claim
from ..rows import claimed_jobs, result
from .enqueuer import PostgresEnqueue
from .pool import SERVER_CLOCK_ONLY, on_client_clock
from .sql import migrations, statements

LIMITED_KEYS = 256
"""At most this many limit keys are locked and looked at per claim (starting where the
last claim left off, so every key gets its turn)."""
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")  # fullmatch: "$" would let "\n" by
log = logging.getLogger("sqljobs.postgres")


class PostgresBackend(PostgresEnqueue):
    """Jobs in PostgreSQL tables (``sqljobs_*``) in ``schema``."""

    claim_lanes = 2  # a second claim in flight keeps the server's other backend busy

    async_connections = True

    def __init__(
        self,
        url: str,
        *,
        schema: str = "public",
        pool_size: int = 10,
        pool_timeout: float = 10.0,
        listen: bool = True,
        notify_window: float = 0.005,
        connect_timeout: float = 10.0,
        synchronous_commit: bool = True,
        clock: Callable[[], float] = time.time,
        server_clock: bool | None = None,
    ) -> None:
        if not isinstance(schema, str) or not _IDENTIFIER.fullmatch(schema):
            raise ConfigurationError(f"schema {schema!r} is not a plain SQL identifier")
        if pool_size < 2:
            raise ConfigurationError(f"pool_size must be >= 2, got {pool_size}")
        self.url = url
        self.schema = schema
        self.pool_size = pool_size
        self.pool_timeout = pool_timeout
        self.connect_timeout = connect_timeout
        # poll-only mode sets nothing on the session (see the module docstring)
        self.session_settings = listen
        self.synchronous_commit = synchronous_commit or not listen
        self.clock = clock
        # delays count from the server's now(), the clock claims read; with a test's own
        # clock (unless told otherwise) every statement reads that clock instead
        self.server_clock = clock is time.time if server_clock is None else server_clock
        self.sql = statements(schema)
        if not self.server_clock:  # every time compared or stored is the App's clock's
            self.sql = {name: sql if name in SERVER_CLOCK_ONLY else on_client_clock(sql)
                        for name, sql in self.sql.items()}  # fmt: skip
        self.migrations = migrations(schema)
        self.notifier = PostgresNotifier(
            channel_for(schema),
            listen=listen,
            window=notify_window,
            connect=self._listen_connection,
            listen_sql=self.sql["listen"],
            send=self._notify,
        )
        self._pool: psycopg_pool.ConnectionPool | None = None
        self._lock = threading.Lock()
        self._limit_cursor = ""  # where the next limited claim starts its key scan
        self._statements: dict[tuple[str, bool, bool], str] = {}  # see _filled
        self._scans = LimitedScans()

    def filtered(
        self, name: str, queues: Sequence[str] | None, tasks: Collection[str] | None
    ) -> tuple[str, dict[str, Any]]:
        params = {"queues": list(queues or []), "tasks": None if tasks is None else list(tasks)}
        return self._filled(name, bool(queues), tasks is not None), params

    def _filled(self, name: str, queues: bool, tasks: bool) -> str:
        """Statement ``name`` for a worker of some queues or all, of some tasks or all:
        its filter fragments put in (each variant made once, not on every claim)."""
        key = (name, queues, tasks)
        sql = self._statements.get(key)
        if sql is None:
            by_queue, by_task = (self.sql[f] if on else "" for f, on in (
                ("filter_queues", queues), ("filter_tasks", tasks)))  # fmt: skip
            sql = (
                self.sql[name]
                .replace("{level_picked}", self.sql["level_picked"])
                .replace("{claim_chosen}", self.sql["claim_chosen"])
                .replace("{levels_of_keys}", self.sql["levels_of_keys"])
                .replace("{queue_filter}", f"{by_queue} {by_task}")
                .replace("{levels}", self.sql["levels_of_queues" if queues else "levels_of_all"])
                .replace("{level_queue}", self.sql["level_of_queue" if queues else "level_of_any"])
                .replace("{level_tasks}", self.sql["level_tasks"] if tasks else "")
            )
            self._statements[key] = sql
        return sql

    def array(self, values: Iterable[Any]) -> Any:
        return list(values)

    def _notify(self, queues: Sequence[str], channel: str) -> None:
        """The notifier's NOTIFY after a commit, through the pool."""
        params = {"channel": channel, "notify": list(queues)}
        self.change("notify", params)

    def _finish_and_claim(
        self, outcomes: Sequence[Outcome], claim: Claim
    ) -> tuple[list[int], list[ClaimedJob]]:
        """Plain completions and the claim are one statement (one round trip, one
        commit); other outcomes are written first, then the claim. Jobs under a
        concurrency limit are claimed first, in the transaction of :meth:`_claim_limited`."""
        if not (claim.limited and claim.at_once + claim.limited_buffer):
            return self._finish_and_claim_unlimited(outcomes, claim)
        marker = self.change_marker()
        if self._scans.may_skip(outcomes, marker):
            return self._hand_over(outcomes, claim)
        written: list[int] = []
        if not all(o.plain for o in outcomes):  # retries and failures: written first
            written = self.finish_jobs(outcomes, claim.started)
            outcomes, claim = [], replace(claim, started=())
        try:
            more, jobs = self._run(
                lambda conn: self._claim_limited(conn, outcomes, claim, marker), transaction=False
            )
            ended = set(more)
            missed = [o for o in outcomes if o.job_id not in ended]
            if missed:  # fenced off, or others wait for them: the careful path tells which
                # (its own round trip: a retry of the claim's would claim a second time)
                more += self.write(lambda conn: self._finish_parents(conn, missed))
        except BackendError as exc:
            if not isinstance(exc.__cause__, psycopg.errors.LockNotAvailable):
                raise
            log.debug("limited claim skipped: a key stayed locked (%s)", exc)
            # another claimer held a key too long: the next claim looks again
            more, jobs = self._finish_and_claim_unlimited(outcomes, claim)
        return written + more, jobs

    def _hand_over(
        self, outcomes: Sequence[Outcome], claim: Claim
    ) -> tuple[list[int], list[ClaimedJob]]:
        """Complete plain outcomes, each limited one handing its slot to its key's next
        due job, and claim jobs without a limit for the rest: one statement, no key lock
        (see LimitedScans). A slot left free makes the next round trip the full claim."""
        found = self.write(lambda conn: self._handing_over(conn, outcomes, claim, True))
        written, jobs, limited, handed = found
        self._scans.handed_over(limited, handed)
        missed = [o for o in outcomes if o.job_id not in set(written)]
        if missed:  # fenced off, or others wait for them: the careful path tells which
            written += self.write(lambda conn: self._finish_parents(conn, missed))
        return written, jobs

    def _handing_over(
        self,
        conn: psycopg.Connection[Any],
        outcomes: Sequence[Outcome],
        claim: Claim,
        unlimited: bool,
    ) -> tuple[list[int], list[ClaimedJob], int, int]:
        """The statement complete_and_hand_over: the outcomes written, the heirs (and, if
        ``unlimited``, jobs without a limit for the rest of the claim), how many of the
        jobs that ended were limited and how many heirs took their slots."""
        sql, params = self._claim_statement("complete_and_hand_over", claim)
        params.update(_began(claim.started))
        params.update(_fenced(outcomes))
        params.update(_values(outcomes))
        params["channel"] = self.notifier.channel
        params["hand_over"] = min(claim.limit, claim.at_once + claim.limited_buffer)
        if not unlimited:
            params["limit"] = 0
        found = result(conn.execute(sql, params))
        done, limited, handed = found.first("ids", "limited", "handed") or (None, 0, 0)
        ids = found.pick("id")
        rows = [row for row, (id_,) in zip(found.rows, ids, strict=True) if id_ is not None]
        return list(done or []), claimed_jobs(found.names, rows), limited, handed

    def _claim_limited(
        self,
        conn: psycopg.Connection[Any],
        outcomes: Sequence[Outcome],
        claim: Claim,
        marker: int | None,
    ) -> tuple[list[int], list[ClaimedJob]]:
        """One transaction: the completions first, handing their slots over (a limited
        job that just ended must not count as running), and the scan that locks the limit
        keys with pending jobs; then, in a snapshot taken after the locks, each key's
        free slots are claimed (see sqljobs.limits); then jobs without a limit, for what
        is left. (Sent as a pipeline, it measured no faster: the statements' own work is
        what costs.)"""
        wanted = min(claim.limit, claim.at_once + claim.limited_buffer)
        with conn.transaction():
            written: list[int] = []
            jobs: list[ClaimedJob] = []
            if outcomes or claim.started:
                written, jobs, _, _ = self._handing_over(conn, outcomes, claim, False)
            conn.execute(self.sql["limited_lock_timeout"])
            scanned: list[ClaimedJob] = []
            if wanted > len(jobs):
                left = replace(claim, limit=wanted - len(jobs), started=(),
                               start_now=max(0, claim.at_once - len(jobs)))  # fmt: skip
                scanned = self._scan_limited(conn, left)
            self._scans.scanned(len(scanned), wanted - len(jobs), marker)
            jobs += scanned
            rest = replace(claim, limit=claim.limit - len(jobs), started=(),
                           start_now=max(0, claim.at_once - len(jobs)))  # fmt: skip
            others = None
            if rest.limit > 0:
                sql, params = self._claim_statement("claim", rest)
                others = conn.execute(sql, {**params, **_began(())})
        if others is not None:
            found = result(others)
            jobs += claimed_jobs(found.names, found.rows)
        return written, jobs

    def _scan_limited(self, conn: psycopg.Connection[Any], claim: Claim) -> list[ClaimedJob]:
        """Lock the limit keys with pending jobs, then claim their free slots."""
        after = self._limit_cursor
        scan = {"after": after, "max_keys": LIMITED_KEYS}
        rows = result(conn.execute(self.sql["lock_limited_keys"], scan)).pick(
            "key", "turn", "locked"
        )
        later = [key for key, turn, _ in rows if turn == 0]
        # the next claim starts after the last key of this turn (or from the start)
        self._limit_cursor = max(later) if len(rows) >= LIMITED_KEYS and later else ""
        keys = [key for key, _, locked in rows if locked]
        if not keys:
            return []
        sql, params = self._claim_statement("claim_limited", claim)
        found = result(conn.execute(sql, {**params, "keys": keys}))
        return claimed_jobs(found.names, found.rows)

    def _finish_and_claim_unlimited(
        self, outcomes: Sequence[Outcome], claim: Claim
    ) -> tuple[list[int], list[ClaimedJob]]:
        plain = all(o.plain for o in outcomes)
        if not outcomes or not plain:
            written = self.finish_jobs(outcomes)
            sql, params = self._claim_statement("claim", claim)
            params.update(_began(claim.started))
            claimed = self.write(lambda c: result(c.execute(sql, params)))
            return written, claimed_jobs(claimed.names, claimed.rows)
        sql, params = self._claim_statement("complete_and_claim", claim)
        params.update(_began(claim.started))
        params.update(_fenced(outcomes))
        params.update(_values(outcomes))
        params["channel"] = self.notifier.channel
        found = self.write(lambda c: result(c.execute(sql, params)))
        (done,) = found.first("ids") or (None,)
        at = found.names.index("id")  # (NULL in the one row when none was claimed)
        rows = [row for row in found.rows if row[at] is not None]
        written = list(done or [])
        ended = set(written)  # (once: in the comprehension's test it is built per outcome)
        missed = [o for o in outcomes if o.job_id not in ended]
        if missed:  # fenced off, or others wait for them: the careful path tells which
            written += self.write(lambda conn: self._finish_parents(conn, missed))
        return written, claimed_jobs(found.names, rows)

    def _finish(
        self,
        conn: Any,
        outcomes: Sequence[Outcome],
        started: Sequence[HeldJob] = (),
    ) -> list[int]:
        """Plain completions in one statement, everything else in another: each one
        ``unnest`` over the batch, fenced by token. Neither ends a job that others wait
        for: those are ended by :meth:`_finish_parents` (as are any the fence refused,
        which it finds refused again)."""
        plain = [o for o in outcomes if o.state is JobState.DONE and o.history is None]
        other = [o for o in outcomes if not (o.state is JobState.DONE and o.history is None)]
        written: list[int] = []
        channel = self.notifier.channel
        if plain:  # buffered jobs that started ride along with the completions
            fenced = {**_fenced(plain), **_began(started), **_values(plain), "channel": channel}
            written += _ids(conn.execute(self.sql["complete_jobs"], fenced))
        elif started:
            conn.execute(self.sql["mark_started"], _began(started))
        ended = set(written)
        missed = [o for o in plain if o.job_id not in ended]
        if other:
            done = _ids(conn.execute(self.sql["finish_jobs"], _finish_params(other, channel)))
            written += done
            ended = set(done)
            missed += [o for o in other if o.job_id not in ended and o.state in FINISHED_STATES]
        if missed:
            written += self._finish_parents(conn, missed)
        return written

    def _finish_parents(self, conn: Any, outcomes: Sequence[Outcome]) -> list[int]:
        """End jobs that others may wait for, and settle those others, in one transaction
        (a savepoint inside the caller's): the statement that ends them takes their rows'
        locks first, so the settling statements after it see every child's edge."""
        params = _finish_params(outcomes, self.notifier.channel, with_children=True)
        with conn.transaction():
            found = result(conn.execute(self.sql["finish_jobs"], params))
            rows = found.pick("id", "state", "children")
            ended = [(i, state) for i, state, children in rows if children and state != "pending"]
            self.settle_children(conn, ended)
        return [i for i, _, _ in rows]

    def renew_leases(self, worker: str, held: Sequence[HeldJob]) -> set[int]:
        params = {
            "worker": worker,
            "ids": int_array(h.id for h in held),
            "tokens": int_array(h.token for h in held),
        }
        return {job_id for (job_id,) in self.change("renew_leases", params).pick("id")}

    def hold_slots(self, keep: Sequence[HeldJob], end: Sequence[HeldJob]) -> None:
        def work(conn: psycopg.Connection[Any]) -> None:
            if keep:
                conn.execute(self.sql["renew_holds"], _held(keep))
            if end:
                params = {**_held(end), "channel": self.notifier.channel}
                conn.execute(self.sql["end_holds"], params)

        if keep or end:
            self.write(work)

    def save_progress(self, reports: Sequence[tuple[HeldJob, str]]) -> set[int]:
        if not reports:
            return set()
        params = {
            "ids": int_array(h.id for h, _ in reports),
            "tokens": int_array(h.token for h, _ in reports),
            "progresses": [progress for _, progress in reports],
        }
        return {job_id for (job_id,) in self.change("save_progress", params).pick("id")}

    def _event_channel(self) -> str | None:
        return self.notifier.channel

    def _next_rate_opening(
        self, queues: Sequence[str] | None, tasks: Collection[str] | None
    ) -> float | None:
        sql, params = self.filtered("next_rate_opening", queues, tasks)
        wait = self.read(lambda conn: result(conn.execute(sql, params))).first("wait")
        return None if not wait or wait[0] is None else float(wait[0])


def _ids(cursor: Any) -> list[int]:
    """The ids a ``RETURNING j.id`` statement gave."""
    return [job_id for (job_id,) in result(cursor).pick("id")]


def _began(started: Sequence[HeldJob]) -> dict[str, str]:
    """Buffered jobs that started since the last round trip: no longer `prefetched`."""
    return {
        "began_ids": int_array(h.id for h in started),
        "began_tokens": int_array(h.token for h in started),
    }


def _held(held: Sequence[HeldJob]) -> dict[str, str]:
    """The ids and fencing tokens of held jobs, as the statements' two arrays."""
    return {"ids": int_array(h.id for h in held), "tokens": int_array(h.token for h in held)}


def _fenced(outcomes: Sequence[Outcome]) -> dict[str, str]:
    """The ids and fencing tokens a batch of outcomes is conditional on."""
    return {
        "ids": int_array(o.job_id for o in outcomes),
        "tokens": int_array(o.token for o in outcomes),
    }


def _values(outcomes: Sequence[Outcome]) -> dict[str, str | None]:
    """Completions' results and last progress, each as one JSON object keyed by job id
    (NULL when there are none: most tasks return nothing)."""
    results = {str(o.job_id): o.result for o in outcomes if o.result is not None}
    progress = {str(o.job_id): o.progress for o in outcomes if o.progress is not None}
    return {
        "results": json.dumps(results) if results else None,
        "progress": json.dumps(progress) if progress else None,
    }


def _finish_params(
    outcomes: Sequence[Outcome], channel: str, with_children: bool = False
) -> dict[str, Any]:
    """The parameters of ``finish_jobs`` for a batch of outcomes (``with_children``: also
    end jobs that others wait for, which the caller then settles)."""
    return {
        **_fenced(outcomes),
        "states": [o.state.value for o in outcomes],
        "delays": [o.delay for o in outcomes],
        "uncharges": [1 if o.uncharge else 0 for o in outcomes],
        "errors_text": [o.error for o in outcomes],
        "tracebacks": [o.traceback for o in outcomes],
        "errors": [o.errors for o in outcomes],
        "lease_expiries": [o.lease_expiries for o in outcomes],
        "crashes": [o.crashes for o in outcomes],
        "histories": [None if o.history is None else json.dumps(o.history) for o in outcomes],
        "results": [o.result for o in outcomes],
        "progresses": [o.progress for o in outcomes],
        "holds": [o.hold for o in outcomes],
        "channel": channel,
        "with_children": with_children,
    }


def int_array(values: Iterable[int]) -> str:
    """Integers as one array literal (``{1,2,3}``), cast by the statement: psycopg adapts a
    list element by element in Python, which cost more than the claim statement it fed."""
    return "{" + ",".join(map(str, values)) + "}"
