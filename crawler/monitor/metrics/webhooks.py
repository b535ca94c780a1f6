"""A worker's deliveries of the change feed's versions to webhook receivers."""

from __future__ import annotations

from crawler.monitor.metrics.declared import Declarations


class WebhookMetrics:
    """Versions POSTed to receivers, by outcome, and how long each version's POSTs took."""

    def __init__(self, declared: Declarations) -> None:
        self.webhook_deliveries = declared.counter("crawler_webhook_deliveries")
        self.webhook_seconds = declared.histogram("crawler_webhook_seconds")

    def observe_webhook(self, host: str, outcome: str) -> None:
        """A version's delivery to the receiver on `host`: delivered, retried or dead."""
        self.webhook_deliveries.labels(host, outcome).inc()

    def observe_webhook_seconds(self, seconds: float) -> None:
        """How long one version's POSTs took."""
        self.webhook_seconds.observe(seconds)
