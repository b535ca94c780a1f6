"""Page quotas: a fleet-wide count of pages fetched per domain, held against max_pages."""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from collections.abc import Callable

from redis.asyncio import Redis

from crawler.names import Names

# How long the router trusts a domain's count read from Redis: reading it for every page's links was
# one of the few Redis round trips per page, and `take` enforces the limit whatever the router saw.
COUNT_READ_INTERVAL = 1.0


class PageQuota:
    """Counts pages per domain in Redis, shared by every worker of a crawl."""

    def __init__(self, redis: Redis, names: Names, clock: Callable[[], float] = time.monotonic) -> None:
        self._redis = redis
        self._names = names
        self._clock = clock
        # (crawl, domain) -> (when read, pages counted), oldest read first
        self._counts: OrderedDict[tuple[str | None, str], tuple[float, int]] = OrderedDict()

    @property
    def redis(self) -> Redis:
        """The Redis the counts are kept in (what else a router keeps per crawl goes there too)."""
        return self._redis

    @property
    def names(self) -> Names:
        """The names of the keys the counts are kept under."""
        return self._names

    @property
    def kept(self) -> int:
        """How many domains' counts this process holds read: those read within the interval."""
        return len(self._counts)

    async def take(self, domain: str, max_pages: int, crawl: str | None = None) -> bool:
        """Count one page against the domain in crawl `crawl`; False if that would exceed `max_pages`."""
        key = self._names.for_crawl(crawl).pages_key(domain)
        return int(await self._redis.incr(key)) <= max_pages

    async def take_crawl(self, crawl: str, max_pages: int) -> bool:
        """Count one page against a whole crawl (its own `max_pages` option); False past it."""
        return int(await self._redis.incr(self._names.crawl_pages_key(crawl))) <= max_pages

    async def full(self, domains: set[str], max_pages: dict[str, int], crawl: str | None = None) -> set[str]:
        """Which of `domains` had used up their quota when last read, at most COUNT_READ_INTERVAL ago.

        The router asks, so as not to queue pages that `take` would refuse.
        """
        now = self._clock()
        names = self._names.for_crawl(crawl)
        stale = sorted(
            d for d in domains if now - self._counts.get((crawl, d), (-math.inf, 0))[0] >= COUNT_READ_INTERVAL
        )
        if stale:
            counts = await self._redis.mget([names.pages_key(d) for d in stale])
            for domain, count in zip(stale, counts, strict=True):
                self._counts[crawl, domain] = (now, int(count or 0))
                self._counts.move_to_end((crawl, domain))
        found = {d for d in domains if self._counts[crawl, d][1] >= max_pages[d]}
        # A count past the interval is read again when asked: kept, it would only hold memory, a
        # domain's worth for every host of the open web this worker ever routed to.
        while self._counts and now - next(iter(self._counts.values()))[0] >= COUNT_READ_INTERVAL:
            self._counts.popitem(last=False)
        return found


class CreditQuota:
    """Counts fetch-service credits per domain in Redis, fleet-wide, held against max_credits.

    Checked before a fetch and added after it: the crawl stops within the credits of the fetches
    already in flight when the limit was reached.
    """

    def __init__(self, redis: Redis, names: Names) -> None:
        self._redis = redis
        self._names = names

    async def allows(self, domain: str, max_credits: float | None) -> bool:
        """False once the domain has spent `max_credits` (None: no limit, no round trip)."""
        if max_credits is None:
            return True
        spent = await self._redis.get(self._names.credits_key(domain))
        return float(spent or 0) < max_credits

    async def add(self, domain: str, credits: float) -> float:
        """Count `credits` against the domain; its total so far."""
        return float(await self._redis.incrbyfloat(self._names.credits_key(domain), credits))

    async def spent(self, domains: list[str]) -> dict[str, float]:
        """Credits each of `domains` spent in this crawl."""
        if not domains:
            return {}
        values = await self._redis.mget([self._names.credits_key(d) for d in domains])
        return {d: float(v or 0) for d, v in zip(domains, values, strict=True)}
