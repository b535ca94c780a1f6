"""A consumer's Prometheus metrics, in a registry of its own so several consumers never collide.

Every name is declared in crawler/monitor/metrics/declared.py and listed in docs/metrics.md; the
Grafana dashboard and the alert rules in deploy/ use only these.
"""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CollectorRegistry, ProcessCollector

from crawler.monitor.metrics.archive import ArchiveMetrics
from crawler.monitor.metrics.declared import Declarations
from crawler.monitor.metrics.deliveries import DeliveryMetrics
from crawler.monitor.metrics.hosts import HostMetrics
from crawler.monitor.metrics.process import ProcessMetrics
from crawler.monitor.metrics.sitemaps import SitemapMetrics
from crawler.monitor.metrics.visits import VisitMetrics
from crawler.monitor.metrics.webhooks import WebhookMetrics
from crawler.quality.metrics import CoverageMetrics


@dataclass(frozen=True, slots=True)
class DomainStats:
    """What one consumer did for one domain, as its summary prints it (failed includes dead)."""

    ok: int = 0
    failed: int = 0
    retried: int = 0
    dead: int = 0
    invalid: int = 0
    skipped: int = 0
    # Refreshes of stored pages, by what they found (crawler/worker/refresh.py).
    changed: int = 0
    not_modified: int = 0
    same_signature: int = 0
    gone: int = 0


@dataclass(frozen=True, slots=True)
class Totals:
    """One domain's counts so far, as a progress display shows them."""

    done: int = 0
    failed: int = 0
    errors: int = 0
    retries: int = 0
    dead: int = 0
    inflight: int = 0
    queued: int | None = None  # None until the queue was sampled


class Metrics(
    VisitMetrics, DeliveryMetrics, SitemapMetrics, ArchiveMetrics, WebhookMetrics, ProcessMetrics, HostMetrics
):
    """The metrics of one consumer, each job's part of them; `registry` is what /metrics serves."""

    def __init__(self, *, process: bool = True) -> None:
        self.registry = CollectorRegistry()
        if process:
            ProcessCollector(registry=self.registry)
        declared = Declarations(self.registry)
        VisitMetrics.__init__(self, declared)
        DeliveryMetrics.__init__(self, declared)
        SitemapMetrics.__init__(self, declared)
        ArchiveMetrics.__init__(self, declared)
        WebhookMetrics.__init__(self, declared)
        ProcessMetrics.__init__(self, declared)
        HostMetrics.__init__(self, declared)
        # Each field's fill rate in its domain's running crawl, and its floor (docs/quality.md).
        self.coverage = CoverageMetrics(self.registry)
