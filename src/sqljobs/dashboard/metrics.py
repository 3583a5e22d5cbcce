"""Prometheus metrics, read from the database at scrape time (nothing is kept in between,
so any number of dashboards or scrapers agree with ``sqljobs stats``)."""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, generate_latest, start_http_server
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from ..app import App
from ..jobs import JobState


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
            f"1 where sqljobs_jobs stopped counting at {stats.count_cap} (done and cancelled "
            "jobs are counted up to a cap per queue, so a scrape never reads them all).",
            labels=["queue", "state"],
        )
        for queue, states in sorted(stats.capped.items()):
            for state_name in states:
                capped.add_metric([queue, state_name], 1)
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


log = logging.getLogger("sqljobs.metrics")


def _registry(app: App) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(StatsCollector(app))
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
