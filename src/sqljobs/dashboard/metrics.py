"""Prometheus metrics, read from the database at scrape time (nothing is kept in between,
so any number of dashboards or scrapers agree with ``sqljobs stats`` and one another).

Gauges come from ``app.stats()``; counters and histograms from the rollup's totals,
which workers add to at each heartbeat (see :mod:`sqljobs.rollup` and docs/metrics.md).
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Iterable, Iterator

from prometheus_client import CollectorRegistry, generate_latest, start_http_server
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from ..app import App
from ..jobs import JobState
from ..rollup import (
    BUCKET_BOUNDS,
    INF,
    AttemptOutcome,
    MetricAmount,
    Series,
    replacement_counts,
)
from ..stats import CAPPED_STATES


class StatsCollector(Collector):
    """One ``app.stats()`` call per scrape, as gauges."""

    def __init__(self, app: App) -> None:
        self.app = app

    def collect(self) -> Iterator[GaugeMetricFamily]:
        stats = self.app.stats()
        jobs = GaugeMetricFamily(
            "sqljobs_jobs", "Jobs by queue and state.", labels=["queue", "state"]
        )
        for queue, by_state in sorted(stats.counts.items()):
            for state in JobState:
                jobs.add_metric([queue, state.value], by_state.get(state.value, 0))
        yield jobs
        capped = GaugeMetricFamily(
            "sqljobs_jobs_count_capped",
            f"1 where sqljobs_jobs stopped counting at {stats.count_cap}, else 0 (done and "
            "cancelled jobs are counted up to a cap per queue, so a scrape never reads them all).",
            labels=["queue", "state"],
        )
        for queue in sorted(stats.counts):
            for state in CAPPED_STATES:
                capped.add_metric([queue, state.value], 1 if stats.is_capped(state, queue) else 0)
        yield capped
        age = GaugeMetricFamily(
            "sqljobs_oldest_pending_age_seconds",
            "How long the oldest due pending job has waited (0 when none waits): alert on it.",
            labels=["queue"],
        )
        for queue in sorted(stats.counts):
            age.add_metric([queue], stats.oldest_pending_age_by_queue.get(queue, 0.0))
        yield age
        yield GaugeMetricFamily(
            "sqljobs_workers", "Worker processes seen within their heartbeat.", value=stats.workers
        )
        paused = GaugeMetricFamily(
            "sqljobs_queue_paused",
            "1 while the queue is paused (workers take no new jobs from it), else 0.",
            labels=["queue"],
        )
        # the queues that have jobs, are paused, or that this app's tasks use
        names = set(stats.counts) | set(stats.paused) | {t.queue for t in self.app.tasks.values()}
        for queue in sorted(names):
            paused.add_metric([queue], 1.0 if queue in stats.paused else 0.0)
        yield paused
        waiting = GaugeMetricFamily(
            "sqljobs_limit_waiting",
            "Due jobs of a concurrency or rate limit key that wait (for a slot, the rate's "
            "window, or a free worker); the busiest keys only.",
            labels=["key", "queue"],
        )
        running = GaugeMetricFamily(
            "sqljobs_limit_running", "Running jobs of a limit key.", labels=["key", "queue"]
        )
        for usage in stats.limits.values():
            waiting.add_metric([usage.key, usage.queue], usage.waiting)
            running.add_metric([usage.key, usage.queue], usage.running)
        yield waiting
        yield running


class RollupCollector(Collector):
    """One read of the rollup's totals per scrape, as counters and histograms. The totals
    are never pruned, so the counters only grow (a worker's flush adds to them)."""

    def __init__(self, app: App) -> None:
        self.app = app

    def collect(self) -> Iterator[Metric]:
        totals = self.app.metric_totals()
        tasks, scheduled = self.app.metric_label_sets()
        attempts = CounterMetricFamily(
            "sqljobs_attempts",
            "Attempts that ended, by outcome: done, retried (raised, runs again), dead (will "
            "not run again), cancelled (while held), lease_expired, crashed (its worker died).",
            labels=["queue", "task", "outcome"],
        )
        expiries = CounterMetricFamily(
            "sqljobs_lease_expiries",
            "Attempts whose lease ran out while their worker lived (the rescuer ended them).",
            labels=["queue", "task"],
        )
        retries = CounterMetricFamily(
            "sqljobs_retries",
            "Attempts that raised or timed out and were scheduled to run again.",
            labels=["queue", "task"],
        )
        # a series exists from the first scrape, at zero, for every task known: a rate or
        # quantile over it is 0 or empty rather than absent until a worker's first flush
        counts = {(q, t, o.value): 0.0 for q, t in tasks for o in AttemptOutcome}
        counts.update(_counts(totals))
        for (queue, task, outcome), count in sorted(counts.items()):
            attempts.add_metric([queue, task, outcome], count)
            if outcome == AttemptOutcome.LEASE_EXPIRED:
                expiries.add_metric([queue, task], count)
            elif outcome == AttemptOutcome.RETRIED:
                retries.add_metric([queue, task], count)
        yield attempts
        yield expiries
        yield retries
        replaced = CounterMetricFamily(
            "sqljobs_worker_process_replacements",
            "Worker processes a supervisor replaced on purpose, by reason: max_tasks and "
            "max_memory (recycled past --max-tasks-per-process or --max-memory-per-process), "
            "hard_timeout (killed for a handler past its hard_timeout).",
            labels=["reason"],
        )
        for reason, count in sorted(replacement_counts(totals).items()):
            replaced.add_metric([reason], count)
        yield replaced
        yield _histogram(
            "sqljobs_attempt_duration_seconds",
            "How long attempts ran, by outcome (for lease_expired and crashed: how long the "
            "attempt held its job until the rescuer ended it).",
            ["queue", "task", "outcome"],
            _zeros((q, t, AttemptOutcome.DONE.value) for q, t in tasks)
            | _by_labels(totals, Series.DURATION, Series.DURATION_SUM, with_outcome=True),
        )
        yield _histogram(
            "sqljobs_enqueue_to_start_seconds",
            "From a job's due time (its run_at, or its enqueue if later) to its handler's "
            "start, per attempt.",
            ["queue", "task"],
            _zeros(tasks) | _by_labels(totals, Series.WAIT, Series.WAIT_SUM, with_outcome=False),
        )
        yield _histogram(
            "sqljobs_schedule_lag_seconds",
            "How late a schedule's tick enqueued its job, against the tick's planned time, "
            "by the task and queue it enqueued.",
            ["queue", "task"],
            _zeros(scheduled)
            | _by_labels(totals, Series.SCHEDULE_LAG, Series.SCHEDULE_LAG_SUM, with_outcome=False),
        )


Labels = tuple[str, ...]


def _counts(totals: list[MetricAmount]) -> dict[tuple[str, str, str], float]:
    return {(a.queue, a.task, a.outcome): a.amount for a in totals if a.series == Series.ATTEMPTS}


def _zeros(label_sets: Iterable[Labels]) -> dict[Labels, tuple[dict[float, float], float]]:
    """A histogram series with nothing counted yet, per label set."""
    return {labels: ({}, 0.0) for labels in label_sets}


def _by_labels(
    totals: list[MetricAmount], buckets: Series, sums: Series, *, with_outcome: bool
) -> dict[Labels, tuple[dict[float, float], float]]:
    """Stored (non-cumulative) bucket counts by bound, and the sum, per label set."""
    out: dict[Labels, tuple[dict[float, float], float]] = {}
    for a in totals:
        if a.series != buckets and a.series != sums:
            continue
        labels = (a.queue, a.task, a.outcome) if with_outcome else (a.queue, a.task)
        counts, total = out.get(labels, ({}, 0.0))
        if a.series == sums:
            total += a.amount
        else:
            counts[a.le] = counts.get(a.le, 0.0) + a.amount
        out[labels] = counts, total
    return out


def _histogram(
    name: str,
    documentation: str,
    labels: list[str],
    series: dict[Labels, tuple[dict[float, float], float]],
) -> HistogramMetricFamily:
    """Every bucket of :data:`~sqljobs.rollup.BUCKET_BOUNDS` for every label set, counted
    up to each bound as Prometheus wants (stored counts are per bucket)."""
    family = HistogramMetricFamily(name, documentation, labels=labels)
    for values, (counts, total) in sorted(series.items()):
        running = 0.0
        buckets = []
        for le in (*BUCKET_BOUNDS, INF):
            running += counts.get(le, 0.0)
            buckets.append(("+Inf" if le == INF else str(le), running))
        family.add_metric(list(values), buckets, sum_value=total)
    return family


log = logging.getLogger("sqljobs.metrics")


def _registry(app: App) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(StatsCollector(app))
    registry.register(RollupCollector(app))
    return registry


def render(app: App) -> bytes:
    """The Prometheus text exposition of ``app``'s queue, freshly read."""
    return generate_latest(_registry(app))


def serve_metrics(app: App, host: str, port: int) -> None:
    """Serve ``/metrics`` alone (``sqljobs metrics``) until SIGINT or SIGTERM: for a
    Prometheus that should not reach the dashboard."""
    server, thread = start_http_server(port, addr=host, registry=_registry(app))
    stop = threading.Event()
    previous = {
        sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGINT, signal.SIGTERM)
    }
    log.info("metrics on http://%s:%s/metrics", host, port)
    try:
        stop.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
