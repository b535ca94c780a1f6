"""Routing the links a reparse finds, as a crawl's worker routes a page's: into the page's crawl,
within its limits (domains, depth) and counted in its counts; dedup drops those seen before. A
cancelled crawl's pages route nothing: its messages would be dropped unfetched."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import asynccontextmanager

from aio_pika.abc import AbstractConnection
from redis.asyncio import Redis

from crawler.config import CrawlConfig
from crawler.connections import publishing_channel
from crawler.dedup.store import SeenStore
from crawler.frontier.crawls import CrawlOptions, CrawlState
from crawler.frontier.exchanges import declare, topology
from crawler.frontier.quota import PageQuota
from crawler.frontier.router import PublishFailed, Router
from crawler.names import Names

PUBLISH_TRIES = 3
PUBLISH_WAIT = 1.0  # seconds between tries of publishes the broker did not confirm
NO_OPTIONS = CrawlOptions()

Found = tuple[int, str | None, Sequence[str]]
"""A page's links: their depth (the page's, plus one), its crawl, the URLs."""


class Links:
    """Routes pages' links through `router`; `crawls` says each crawl's limits and takes its counts."""

    def __init__(self, router: Router, crawls: CrawlState) -> None:
        self._router = router
        self._crawls = crawls

    async def route(self, found: Iterable[Found], claimant: bytes) -> int:
        """Route the links found, as `claimant` (a resumed run may publish again what it claimed
        but never got confirmed); how many were published."""
        groups: dict[tuple[int, str | None], list[str]] = defaultdict(list)
        for depth, crawl, urls in found:
            groups[depth, crawl].extend(urls)
        routed = 0
        for (depth, crawl), urls in groups.items():
            options = NO_OPTIONS
            if crawl is not None:
                if await self._crawls.cancelled(crawl):
                    continue
                options = await self._crawls.options(crawl) or NO_OPTIONS
            by_domain = await self._publish(urls, depth, crawl, options, claimant)
            if crawl is not None and by_domain:
                await self._crawls.count(crawl, {(d, "routed"): n for d, n in by_domain.items()})
            routed += sum(by_domain.values())
        return routed

    async def _publish(
        self, urls: Sequence[str], depth: int, crawl: str | None, options: CrawlOptions, claimant: bytes
    ) -> dict[str, int]:
        attempt = 1
        while True:
            try:
                done = await self._router.route(
                    urls,
                    depth=depth,
                    claimant=claimant,
                    crawl=crawl,
                    domains=options.domains,
                    max_depth=options.max_depth,
                )
            except PublishFailed:  # its URLs were released: the next try claims them again
                if attempt >= PUBLISH_TRIES:
                    raise
                attempt += 1
                await asyncio.sleep(PUBLISH_WAIT)
                continue
            return dict(done.by_domain)


@asynccontextmanager
async def links_into(
    connection: AbstractConnection, seen: SeenStore, redis: Redis, config: CrawlConfig, names: Names
) -> AsyncIterator[Links]:
    """Links routed over `connection` (the frontier declared first, as a seed does: a broker that
    never saw a crawl has no queues yet), with confirms."""
    channel = await connection.channel()
    try:
        await declare(channel, topology(config, names))
    finally:
        await channel.close()
    channel = await publishing_channel(connection)
    try:
        exchange = await channel.get_exchange(names.frontier, ensure=False)
        yield Links(Router(config, exchange, seen, PageQuota(redis, names)), CrawlState(redis, names))
    finally:
        await channel.close()
