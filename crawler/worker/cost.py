"""The worker's side of fetch cost: max_credits per domain, the credits metric, a page's total.

A page's row carries the credits of all its attempts: a retried attempt's charge travels in the
retry message's headers (HEADER_CREDITS) and is added to the next attempt's.
"""

from __future__ import annotations

from dataclasses import replace

from redis.asyncio import Redis

from crawler.config import Rules
from crawler.frontier.delivery import Delivery
from crawler.frontier.quota import CreditQuota
from crawler.monitor.metrics import Metrics
from crawler.names import HEADER_CREDITS, Names
from crawler.worker.page import Visit


class Cost:
    """Holds each domain to its max_credits and counts what its fetches were charged."""

    def __init__(self, redis: Redis, names: Names, metrics: Metrics, backend: str = "gateway") -> None:
        self.quota = CreditQuota(redis, names)
        self._metrics = metrics
        self.backend = backend

    async def allows(self, domain: str, rules: Rules) -> bool:
        """False once the domain has spent its max_credits: the page is skipped, like max_pages."""
        return await self.quota.allows(domain, rules.max_credits)

    async def charge(self, domain: str, visit: Visit, message: Delivery) -> Visit:
        """Count the visit's credits; the visit's answer carries the page's credits over all attempts.

        The running total is written into `message.headers`, which a retry or dead letter copies.
        """
        visited = visit.visited
        spent = visited.answered.credits
        if spent:
            await self.quota.add(domain, spent)
            self._metrics.add_credits(self.backend, spent)
        earlier = carried(message)
        total = earlier + spent
        if message.headers is not None and (spent or earlier):
            message.headers[HEADER_CREDITS] = total
        if not earlier:
            return visit
        answered = replace(visited.answered, credits=total)
        return replace(visit, visited=replace(visited, answered=answered))


def carried(message: Delivery) -> float:
    """Credits the page's earlier attempts were charged, from the message's headers."""
    value = (message.headers or {}).get(HEADER_CREDITS, 0)
    return float(value) if isinstance(value, int | float) and value >= 0 else 0.0
