"""A spooled sitemap file parsed a batch of entries at a time: a urlset's URLs routed, an index's
sitemaps queued one level deeper."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from itertools import islice
from typing import IO

from crawler.config import Rules
from crawler.frontier.crawls import CrawlOptions
from crawler.frontier.message import CrawlMessage, SitemapTask
from crawler.frontier.sitemaps import SitemapTasks
from crawler.frontier.urls import host_of
from crawler.parse.sitemaps import SitemapEntry, SitemapKind, SitemapReader, SitemapReport, within_depth
from crawler.worker.sitemaps.done import SitemapDone
from crawler.worker.sitemaps.fetching import chunks
from crawler.worker.sitemaps.listing import Listing

BATCH = 1_000  # entries routed at once


class FileParsing:
    """Parses sitemap files and routes what they list."""

    def __init__(self, listing: Listing, tasks: SitemapTasks) -> None:
        self._listing = listing
        self._tasks = tasks

    async def parse(
        self,
        url: str,
        spool: IO[bytes],
        message: CrawlMessage,
        task: SitemapTask,
        rules: Rules,
        options: CrawlOptions,
        done: SitemapDone,
    ) -> tuple[SitemapReport, Counter[str], Counter[str]]:
        """Read a spooled file a batch of entries at a time, each routed before the next is read: its
        report, what its entries became, and the URLs routed per domain. SitemapError: no sitemap."""
        reader = SitemapReader(url)
        counts: Counter[str] = Counter()
        routed: Counter[str] = Counter()
        entries = reader.read(chunks(spool))
        loop = asyncio.get_running_loop()
        # Parsed off the event loop, by one thread throughout: lxml's parser is not to change threads.
        parsing = ThreadPoolExecutor(1, thread_name_prefix="sitemap")
        try:
            while batch := await loop.run_in_executor(parsing, lambda: list(islice(entries, BATCH))):
                if reader.report.kind is SitemapKind.INDEX:
                    await self._children(url, batch, message, task, counts, done)
                else:
                    await self._listing.route(url, batch, message, rules, options, counts, routed)
        finally:
            await loop.run_in_executor(parsing, entries.close)  # the parser ends in its own thread
            parsing.shutdown()
        return reader.report, counts, routed

    async def _children(
        self,
        url: str,
        batch: Sequence[SitemapEntry],
        message: CrawlMessage,
        task: SitemapTask,
        counts: Counter[str],
        done: SitemapDone,
    ) -> None:
        """Have an index's sitemaps read, one level deeper, while within MAX_DEPTH."""
        if not within_depth(task.depth + 1):
            counts["too_deep"] += len(batch)
            return
        child = SitemapTask(task.round, task.depth + 1, counted=task.counted)
        tasked = await self._tasks.files([e.loc for e in batch], child, message.crawl, url, host_of(url))
        counts["sitemaps"] += sum(tasked.published.values())
        for why, n in tasked.dropped.items():
            counts["known" if why == "seen" else why] += n
        done.tasked(task, tasked)
