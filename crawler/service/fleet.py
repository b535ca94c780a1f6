"""The fleet: workers by heartbeat, gateway replicas by report, freshness per domain, and whether the
services answer."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from crawler.config import CrawlConfig
from crawler.frontier.client import Frontier
from crawler.frontier.concurrency import together
from crawler.gateway.report import GatewayStatus, gateways
from crawler.monitor.heartbeat import WorkerStatus, workers
from crawler.service.status_reads import StatusReads
from crawler.settings import Settings
from crawler.sink.crawls import CrawlStore


@dataclass(frozen=True, slots=True)
class Freshness:
    """A domain's schedule: whether it recrawls, its pages due, how long the oldest has waited."""

    domain: str
    recrawls: bool
    due: int
    overdue_seconds: float | None


@dataclass(frozen=True, slots=True)
class FleetView:
    """The fleet: workers by heartbeat, gateway replicas by report, and freshness per domain."""

    workers: list[WorkerStatus]
    gateways: list[GatewayStatus]
    freshness: list[Freshness]


@dataclass(frozen=True, slots=True)
class Fleet:
    """The processes that crawl, as they report themselves, and the services they share."""

    settings: Settings
    config: CrawlConfig
    frontier: Frontier
    store: CrawlStore
    reads: StatusReads

    async def view(self) -> FleetView:
        """Workers by their heartbeats, gateway replicas by their reports, freshness per domain."""
        names = self.settings.names
        found, replicas, data = await together(
            workers(self.frontier.redis, names),
            gateways(self.frontier.redis, names),
            self.reads.status(),
        )
        fresh = [
            Freshness(
                d["domain"],
                self.config.rules_for(d["domain"]).recrawls,
                d["freshness"]["due"],
                d["freshness"]["overdue_seconds"],
            )
            for d in data["domains"]
        ]
        return FleetView(found, replicas, fresh)

    async def readiness(self) -> dict[str, str]:
        """Each service: "ok", or what is wrong with it."""

        async def broker() -> str:
            channel = await asyncio.wait_for(self.frontier.connection.channel(), 5)
            await channel.close()
            return "ok"

        async def redis() -> str:
            await asyncio.wait_for(self.frontier.redis.ping(), 5)
            return "ok"

        async def database() -> str:
            await asyncio.wait_for(asyncio.to_thread(self.store.ping), 5)
            return "ok"

        names = ("rabbitmq", "redis", "database")
        results = await asyncio.gather(broker(), redis(), database(), return_exceptions=True)
        return {
            n: r if isinstance(r, str) else f"unreachable ({type(r).__name__})"
            for n, r in zip(names, results, strict=True)
        }

    async def worker_count(self) -> int:
        """Workers with a live heartbeat."""
        return sum(1 for w in await workers(self.frontier.redis, self.settings.names) if w.state == "live")
