"""The renderer's Prometheus metrics, on the gateway's registry (listed in docs/metrics.md)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

RENDER_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)


class RenderMetrics:
    """Renders by outcome and duration, the requests pages made, browser replacements and RSS."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.renders = Counter(
            "crawler_gateway_renders",
            "Pages rendered by the gateway's browsers, by outcome",
            ["outcome"],
            registry=registry,
        )
        self.seconds = Histogram(
            "crawler_gateway_render_seconds",
            "Duration of a render, from the lease of a context to the DOM read",
            buckets=RENDER_BUCKETS,
            registry=registry,
        )
        self.requests = Counter(
            "crawler_gateway_render_requests",
            "Requests rendered pages made, by outcome",
            ["outcome"],
            registry=registry,
        )
        self.restarts = Counter(
            "crawler_gateway_browser_restarts",
            "Browsers replaced, by reason",
            ["reason"],
            registry=registry,
        )
        self.rss = Gauge(
            "crawler_gateway_browser_rss_bytes",
            "Resident memory of a browser's process tree, after its last render",
            ["browser"],
            registry=registry,
        )
