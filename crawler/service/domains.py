"""Configured domains: each one's queue, rate, health and freshness; pause and resume fleet-wide."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from crawler.config import CrawlConfig
from crawler.errors import ConfigError, NotFound
from crawler.frontier.client import Frontier
from crawler.frontier.concurrency import together
from crawler.frontier.crawls import CrawlState
from crawler.service.health import DomainHealth, domain_health
from crawler.service.status_reads import StatusReads
from crawler.settings import Settings
from crawler.worker import wiring


@dataclass(frozen=True, slots=True)
class DomainView:
    """A configured domain: its queue depth, its rate, whether it is paused, its consumers, how it
    fares with its site, and its pages due for a refresh."""

    domain: str
    depth: int
    unacked: int | None
    rate: float  # requests per second domains.yaml allows
    pages_per_second: float
    paused: bool
    workers: int  # consumers subscribed to its queue
    health: DomainHealth = field(default_factory=DomainHealth)
    due: int = 0
    overdue_seconds: float | None = None


def configured(config: CrawlConfig, domain: str, *, queued: bool = True) -> list[str]:
    """`domain` as configured (a one-item list); NotFound saying which domains there are, or with
    `queued` that it has no queue of its own."""
    try:
        return wiring.check_domains(config, [domain], queued=queued)
    except ConfigError as exc:
        raise NotFound(str(exc)) from None


@dataclass(frozen=True, slots=True)
class Domains:
    """The configured domains as the fleet serves them; pauses kept in Redis and the database."""

    settings: Settings
    config: CrawlConfig
    frontier: Frontier
    state: CrawlState
    reads: StatusReads

    async def listed(self) -> list[DomainView]:
        """Every configured domain's queue, rate, pause and consumers."""
        data, paused, health = await together(
            self.reads.status(),
            self.state.paused(),
            domain_health(self.frontier.redis, self.settings.names, self.config, sorted(self.config.domains)),
        )
        return [
            DomainView(
                d["domain"],
                d["queue"]["ready"],
                d["queue"]["unacked"],
                self.config.rules_for(d["domain"]).rate,
                d["pages_per_second"],
                d["domain"] in paused,
                d["queue"]["consumers"],
                health.get(d["domain"], DomainHealth()),
                d["freshness"]["due"],
                d["freshness"]["overdue_seconds"],
            )
            for d in data["domains"]
        ]

    async def discovered(self) -> dict[str, Any]:
        """The discovered hosts in aggregate, from the same status read (crawler/monitor/status.py)."""
        data = await self.reads.status()
        hosts: dict[str, Any] = data["discovered"]
        return hosts

    async def pause(self, domain: str) -> str:
        """Pause a configured domain fleet-wide: consumers leave its queue alone until resumed."""
        (chosen,) = configured(self.config, domain)
        await self.state.pause(chosen)
        return chosen

    async def resume(self, domain: str) -> str:
        """Resume a paused domain fleet-wide."""
        (chosen,) = configured(self.config, domain)
        await self.state.resume(chosen)
        return chosen
