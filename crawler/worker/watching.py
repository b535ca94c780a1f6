"""What watches a consumer while it runs: its /metrics endpoint, its heartbeat, its queue sampler, and
its crawls' coverage, whose alerts go to the change feed."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field

from redis.asyncio import Redis

from crawler.monitor import endpoint, readings
from crawler.monitor.alerting import ALERT_EVERY, Alerting
from crawler.monitor.endpoint import METRICS_ADDR
from crawler.monitor.heartbeat import Heartbeat
from crawler.monitor.metrics import Metrics
from crawler.monitor.quality import COVERAGE_EVERY, export_coverage
from crawler.monitor.sampler import SAMPLE_EVERY, QueueSampler
from crawler.names import HEARTBEAT_TTL
from crawler.worker.background import background
from crawler.worker.consumer import Consumer

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Monitoring:
    """How a consumer is watched; by default it serves no endpoint but still beats and samples."""

    metrics: Metrics = field(default_factory=Metrics)
    port: int | None = None  # serve /metrics here if set
    addr: str = METRICS_ADDR
    heartbeat_ttl: float = HEARTBEAT_TTL
    sample_every: float = SAMPLE_EVERY
    coverage_every: float = COVERAGE_EVERY
    alert_every: float = ALERT_EVERY


@asynccontextmanager
async def monitored(
    monitoring: Monitoring, consumer: Consumer, redis: Redis, *, role: str
) -> AsyncIterator[Heartbeat]:
    """Serve metrics, beat and sample queues for the length of the block."""
    async with AsyncExitStack() as stack:
        if monitoring.port is not None:
            metrics, ttl = monitoring.metrics, monitoring.heartbeat_ttl
            server = endpoint.serve(
                metrics.registry, monitoring.port, monitoring.addr, lambda: readings.health(metrics, ttl)
            )
            stack.push_async_callback(asyncio.to_thread, server.close)
            log.info("metrics on http://%s:%d/metrics, health on /healthz", monitoring.addr, server.port)
        heartbeat = Heartbeat(
            redis,
            consumer.names,
            lambda: consumer.domains,
            monitoring.metrics,
            role=role,
            ttl=monitoring.heartbeat_ttl,
        )
        sampler = QueueSampler(
            consumer.frontier.connection,
            consumer.names,
            lambda: consumer.config,
            lambda: consumer.domains,
            monitoring.metrics,
            monitoring.sample_every,
            redis=redis,
        )
        watchers = [heartbeat.run(), sampler.run()]
        parts = consumer.parts
        if parts.crawls is not None and parts.crawl_records is not None:
            alerting = Alerting(
                consumer.publishing,
                redis,
                consumer.names,
                parts.crawls,
                parts.crawl_records,
                lambda: consumer.config,
            )
            # Entered before the watchers: read once more after they stop (a burst worker's crawl ends
            # with its last pages, between two readings).
            stack.push_async_callback(alerting.last_reading)
            watchers.append(alerting.run(monitoring.alert_every))
        if monitoring.port is not None and parts.crawls is not None and parts.crawl_records is not None:
            # Served only: the gauges are for Prometheus, which alerts on them (CrawlerFieldCoverageLow).
            watchers.append(
                export_coverage(
                    monitoring.metrics.coverage,
                    parts.crawls,
                    parts.crawl_records,
                    lambda: consumer.config,
                    lambda: consumer.domains,
                    monitoring.coverage_every,
                )
            )
        await stack.enter_async_context(background(*watchers))
        yield heartbeat
