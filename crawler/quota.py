"""Page quotas: a fleet-wide count of pages fetched per domain, held against max_pages."""

from __future__ import annotations

from redis.asyncio import Redis

from crawler.names import Names


class PageQuota:
    """Counts pages per domain in Redis, shared by every worker of a crawl."""

    def __init__(self, redis: Redis, names: Names) -> None:
        self._redis = redis
        self._names = names

    async def take(self, domain: str, max_pages: int) -> bool:
        """Count one page against the domain; False if that would exceed `max_pages`."""
        return int(await self._redis.incr(self._names.pages_key(domain))) <= max_pages

    async def full(self, domains: set[str], max_pages: dict[str, int]) -> set[str]:
        """Which of `domains` have used up their quota."""
        if not domains:
            return set()
        ordered = sorted(domains)
        counts = await self._redis.mget([self._names.pages_key(d) for d in ordered])
        return {d for d, c in zip(ordered, counts, strict=True) if c is not None and int(c) >= max_pages[d]}
