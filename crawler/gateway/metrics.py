"""The gateway's Prometheus metrics (listed in docs/metrics.md)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class GatewayMetrics:
    """The gateway's metrics, in a registry of their own (the renderer adds its to it)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "crawler_gateway_exit_requests",
            "Requests sent through an exit, by outcome",
            ["exit", "outcome"],
            registry=r,
        )
        self.bans = Counter(
            "crawler_gateway_exit_bans",
            "Bans seen through an exit, by reason",
            ["exit", "reason"],
            registry=r,
        )
        self.cooldowns = Counter(
            "crawler_gateway_exit_cooldown_seconds",
            "Cooldown imposed on an exit's (exit, domain) pairs after bans, in seconds",
            ["exit"],
            registry=r,
        )
        self.latency = Histogram(
            "crawler_gateway_exit_latency_seconds",
            "Duration of a request through an exit",
            ["exit"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.credits = Counter(
            "crawler_gateway_credits", "Credits charged, by API key id", ["key"], registry=r
        )
        self.answers = Counter(
            "crawler_gateway_answers",
            "Answers, by the gateway's own HTTP status (200: the target answered or failed)",
            ["code"],
            registry=r,
        )
        # This replica's load, what its autoscaler reads (deploy/k8s/gateway/scaledobject.yaml):
        # requests held open, including those waiting for a free exit.
        self.inflight = Gauge(
            "crawler_gateway_inflight_requests", "Requests this replica is serving now", registry=r
        )
