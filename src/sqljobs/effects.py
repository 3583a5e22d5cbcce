"""External effects (a payment gateway, an e-mail) made safe to repeat.

An effect outside the queue's database cannot commit with the job. So it is a small state
machine kept in ``sqljobs_effects``: the intent is recorded (``pending``, committed) before
the call; the key is passed downstream (a gateway's Idempotency-Key); success records
``done`` with the result. If the call times out, nobody knows whether it happened: the
effect becomes ``unknown`` and is never called blindly again. The next attempt first asks
the ``reconcile`` hook the user supplies ("did charge KEY happen?"); without one, the job
ends ``dead`` with the question, for a person to answer.

    @app.task
    def charge(ctx: sqljobs.JobContext, order_id: str) -> None:
        sqljobs.perform_once(
            ctx, f"order-{order_id}:charge",
            call=lambda key: gateway.charge(order_id, 100, idempotency_key=key),
            reconcile=lambda key: gateway.find_charge(idempotency_key=key),  # None: not made
        )
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from .backends.records import EffectEnd, EffectIntent
from .context import JobContext
from .errors import ConfigurationError, RetryLater  # its home before errors.py
from .errors import EffectUncertain as EffectUncertain

if TYPE_CHECKING:
    from .app import App

T = TypeVar("T")

UNCERTAIN: tuple[type[BaseException], ...] = (TimeoutError, ConnectionError)


def perform_once(
    where: JobContext | App,
    key: str,
    call: Callable[[str], T],
    *,
    reconcile: Callable[[str], T | None] | None = None,
    uncertain: tuple[type[BaseException], ...] = UNCERTAIN,
    retry_after: float = 1.0,
) -> T:
    """Make the external effect named ``key`` happen at most once, and return its result.

    ``call(key)`` makes the effect; pass ``key`` downstream. An exception of a type in
    ``uncertain`` means "it may or may not have happened"; any other exception means it
    did not, and the job is retried as usual. ``reconcile(key)`` looks the effect up
    downstream: it returns the result if the effect happened, or None if it did not.
    Results are stored as JSON. One attempt at a time makes a given effect: a concurrent
    delivery waits (``RetryLater(retry_after)``) until the holder finishes, or until its
    hold (the job's lease) runs out because it died.
    """
    if not key:
        raise ConfigurationError('an effect needs a non-empty key, e.g. f"order-{order_id}:charge"')
    backend = where.backend
    job_id = where.job_id if isinstance(where, JobContext) else None
    hold = where.job.lease if isinstance(where, JobContext) else 60.0
    holder = f"{job_id}:{where.token}" if isinstance(where, JobContext) else uuid.uuid4().hex
    record = backend.effect_begin(EffectIntent(key, job_id, holder, hold))
    if record.state == "done":
        done: T = _load(record.result)
        return done
    if not record.mine:  # another delivery is making this very effect right now
        raise RetryLater(retry_after, f"effect {key!r} is in flight in another attempt")
    if record.attempts > 1:  # an earlier attempt recorded the intent but not the outcome
        if reconcile is None:
            raise EffectUncertain(
                f"effect {key!r} may already have happened (state {record.state}, last error: "
                f"{record.error}); pass reconcile= to look it up downstream, or resolve it by "
                "hand before retrying this job"
            )
        found = reconcile(key)
        if found is not None:
            backend.effect_set(EffectEnd(key, holder, "done", json.dumps(found)))
            return found
    try:
        result = call(key)
    except uncertain as exc:
        backend.effect_set(EffectEnd(key, holder, "unknown", error=f"{type(exc).__name__}: {exc}"))
        if reconcile is None:
            raise EffectUncertain(
                f"effect {key!r} timed out and may have happened ({exc}); no reconcile= "
                "hook can tell, so it is not called again"
            ) from exc
        raise RetryLater(retry_after, f"effect {key!r} uncertain: reconcile first") from exc
    except Exception:
        backend.effect_forget(key, holder)  # it did not happen: a retry may call again
        raise
    backend.effect_set(EffectEnd(key, holder, "done", json.dumps(result)))
    return result


def _load(result: str | None) -> Any:
    return None if result is None else json.loads(result)
