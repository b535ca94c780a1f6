"""A sitemap's URLs into the crawl: routed like links at depth 0 from the sitemap's own host only, and
a known page whose `lastmod` is newer than its row's last fetch refreshed at once."""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from crawler.config import Rules
from crawler.errors import BadURL
from crawler.frontier.crawls import CrawlOptions
from crawler.frontier.message import CrawlMessage
from crawler.frontier.publisher import Publisher
from crawler.frontier.recrawl import refresh_outgoing
from crawler.frontier.router import Routed, Router, priority_for
from crawler.frontier.sitemaps import listed_by
from crawler.frontier.urls import fingerprint, host_of
from crawler.names import MAX_PRIORITY
from crawler.parse.sitemaps import SitemapEntry
from crawler.sink.schedule import Schedule
from crawler.worker.live import LiveConfig

log = logging.getLogger(__name__)

LEASE = 1800.0  # seconds a page refreshed for its lastmod stays claimed (the scheduler's lease)


class Listing:
    """Routes a sitemap's URLs a batch at a time, counting what each became."""

    def __init__(self, live: LiveConfig, router: Router, refreshes: Publisher, schedule: Schedule) -> None:
        self._live = live
        self._router = router
        self._refreshes = refreshes
        self._schedule = schedule

    async def route(
        self,
        url: str,
        batch: Sequence[SitemapEntry],
        message: CrawlMessage,
        rules: Rules,
        options: CrawlOptions,
        counts: Counter[str],
        routed_by_domain: Counter[str],
    ) -> None:
        """Route a batch of the sitemap at `url`; refresh the known pages it says changed. `counts`
        gets what its URLs became, `routed_by_domain` those routed, per domain."""
        own = host_of(url)
        kept: dict[str, datetime | None] = {}
        for entry in batch:
            try:
                canonical = self._live.scope.canonical(entry.loc)
            except BadURL:
                counts["invalid"] += 1
                continue
            if not listed_by(host_of(canonical), own):
                counts["other_host"] += 1
                continue
            kept.setdefault(canonical, entry.lastmod)
        if not kept:
            return
        routed = await self._router.route(
            list(kept),
            depth=0,
            claimant=fingerprint(url),
            # With a base, the router does not remember each URL's canonical form (its cache is for
            # a site's links, seen again and again; a sitemap lists each URL once).
            base=url,
            # Below the seeds': a sitemap of 50,000 URLs does not go before every link found.
            priority=min(priority_for(url, 1, rules), MAX_PRIORITY - 1),
            crawl=message.crawl,
            domains=options.domains,
            max_depth=options.max_depth,
        )
        _count(routed, counts)
        routed_by_domain.update(routed.by_domain)
        published = set(routed.published)
        moved = {u: m for u, m in kept.items() if m is not None and u not in published}
        if moved:
            counts["modified"] += await self._refresh(moved)

    async def _refresh(self, moved: dict[str, datetime]) -> int:
        """Publish a refresh of each stored page fetched before its sitemap lastmod; how many."""
        now = datetime.now(UTC)
        due = await asyncio.to_thread(
            self._schedule.claim_modified, moved, now, now + timedelta(seconds=LEASE)
        )
        if not due:
            return 0
        config = self._live.config
        outgoing = [refresh_outgoing(d, config) for d in due]
        outcomes = await self._refreshes.publish(outgoing)
        failed = sum(1 for o in outcomes if o is not None)
        if failed:
            log.warning(
                "%d of %d refreshes for a sitemap's lastmod not confirmed: due again after %gs",
                failed,
                len(due),
                LEASE,
            )
        return len(due) - failed


def _count(routed: Routed, counts: Counter[str]) -> None:
    counts["discovered"] += len(routed.published)
    counts["known"] += routed.seen
    for why, n in routed.dropped().items():
        counts[why] += n
