"""Routing the links a reparse finds, as a crawl's worker routes a page's: into the page's crawl,
within its limits (domains, depth) and counted in its counts; dedup drops those seen before. A
cancelled crawl's pages route nothing: its messages would be dropped unfetched."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import asynccontextmanager

from crawler.config import CrawlConfig
from crawler.frontier.client import NO_OPTIONS, Frontier, route_within
from crawler.frontier.crawls import CrawlOptions, CrawlState
from crawler.frontier.router import PublishFailed, Router

PUBLISH_TRIES = 3
PUBLISH_WAIT = 1.0  # seconds between tries of publishes the broker did not confirm

Found = tuple[int, str | None, Sequence[str]]
"""A page's links: their depth (the page's, plus one), its crawl, the URLs."""


class Links:
    """Routes pages' links through `router` into `frontier`'s crawls: each one's limits, and its counts."""

    def __init__(self, frontier: Frontier, router: Router) -> None:
        self._frontier = frontier
        self._router = router
        self._crawls = CrawlState(frontier.redis, frontier.names)

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
            routed += sum(by_domain.values())
        return routed

    async def _publish(
        self, urls: Sequence[str], depth: int, crawl: str | None, options: CrawlOptions, claimant: bytes
    ) -> dict[str, int]:
        attempt = 1
        while True:
            try:
                done = await route_within(
                    self._router, urls, depth=depth, claimant=claimant, crawl=crawl, options=options
                )
            except PublishFailed:  # its URLs were released: the next try claims them again
                if attempt >= PUBLISH_TRIES:
                    raise
                attempt += 1
                await asyncio.sleep(PUBLISH_WAIT)
                continue
            await self._frontier.count(crawl, done.counts())
            return dict(done.by_domain)


@asynccontextmanager
async def links_into(frontier: Frontier, config: CrawlConfig) -> AsyncIterator[Links]:
    """Links routed into `frontier` (declared first, as a seed does: a broker that never saw a crawl
    has no queues yet), with confirms."""
    async with frontier.router(config) as router:
        yield Links(frontier, router)
