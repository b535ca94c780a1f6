"""A scheduler's Prometheus metrics: what it published, and how far behind each domain's schedule is."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime

from prometheus_client import CollectorRegistry, Counter, Gauge, ProcessCollector

from crawler.sink.schedule import Backlog


class SchedulerMetrics:
    """The metrics of one scheduler; `registry` is what its /metrics endpoint serves."""

    def __init__(self, *, process: bool = True) -> None:
        self.registry = r = CollectorRegistry()
        if process:
            ProcessCollector(registry=r)
        self._published = Counter(
            "crawler_refreshes_published", "Due pages published for a refresh", ["domain"], registry=r
        )
        self._due = Gauge(
            "crawler_due_pages",
            "Stored pages due for a refresh now, not yet published",
            ["domain"],
            registry=r,
        )
        self._overdue = Gauge(
            "crawler_due_oldest_seconds",
            "How long the domain's longest-waiting due page has been due (0: none due)",
            ["domain"],
            registry=r,
        )

    def published(self, domain: str, n: int) -> None:
        """`n` refreshes of `domain` published (confirmed by the broker)."""
        self._published.labels(domain).inc(n)

    def backlog(self, domains: Sequence[str], backlog: Mapping[str, Backlog], now: datetime) -> None:
        """The due gauges of `domains` as read at `now` (a domain with nothing due reads 0)."""
        for domain in domains:
            found = backlog.get(domain)
            oldest = found.oldest if found is not None else None
            self._due.labels(domain).set(found.due if found is not None else 0)
            self._overdue.labels(domain).set(max(0.0, (now - oldest).total_seconds()) if oldest else 0.0)
