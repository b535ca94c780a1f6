"""Routing what a page leads to, its links and its redirect, into the frontier, unconfirmed until its ack."""

from __future__ import annotations

from collections.abc import Sequence

from crawler.frontier.client import NO_OPTIONS, route_within
from crawler.frontier.concurrency import short_retries
from crawler.frontier.crawls import CrawlOptions
from crawler.frontier.message import CrawlMessage
from crawler.frontier.router import PublishFailed, Routed, Router
from crawler.frontier.urls import fingerprint
from crawler.monitor.metrics import Metrics
from crawler.worker.page import Visit, hop_id


class Linking:
    """Routes a page's links and redirect through the router, counting what became of them."""

    def __init__(self, router: Router, metrics: Metrics, short_retry_wait: float) -> None:
        self._router = router
        self._metrics = metrics
        self._wait = short_retry_wait

    async def route(
        self, domain: str, url: str, crawl: CrawlMessage, options: CrawlOptions, visit: Visit, route: bool
    ) -> list[Routed]:
        """Route the page's links and its redirect; nothing unless `route` (a refresh that found no
        change routes nothing)."""
        routed: list[Routed] = []
        if not route:
            return routed
        if visit.links:
            routed.append(
                await self._route(domain, visit.links, crawl.depth + 1, url, crawl=crawl, options=options)
            )
        if visit.redirect is not None:
            # Routed like a link at the page's own depth: the target's domain queue, rate, robots.txt
            # and dedup claim apply to it as to any request; a target already seen is not fetched.
            hops = (*crawl.via, hop_id(url))
            routed.append(await self._route(domain, [visit.redirect], crawl.depth, url, hops, crawl, options))
        return routed

    async def _route(
        self,
        domain: str,
        urls: Sequence[str],
        depth: int,
        parent: str,
        via: tuple[str, ...] = (),
        crawl: CrawlMessage | None = None,
        options: CrawlOptions | None = None,
    ) -> Routed:
        """Route a page's links (or its redirect); their claims are confirmed when the page is acked."""
        claimant = fingerprint(parent)
        # Links inherit the page's crawl: its own dedup store, and its options' limits.
        crawl_id = crawl.crawl if crawl is not None else None
        routed = await short_retries(
            PublishFailed,
            lambda: route_within(
                self._router,
                urls,
                depth=depth,
                claimant=claimant,
                crawl=crawl_id,
                options=options or NO_OPTIONS,
                via=via,
                confirm=False,
            ),
            self._wait,
        )
        self._metrics.observe_links(domain, routed)
        return routed
