"""A page's content in a crawl: its main content (or a document read) in the worker's content pool,
then its simhash claimed in the fleet's near-duplicate index (docs/content.md).

The pool is started only when some domain has `content:` on, and the content libraries are imported
only then: a crawl without it costs what it did before.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from redis.asyncio import Redis

from crawler.config import CONTENT_SECONDS, ContentRules, CrawlConfig, Rules
from crawler.content.documents import DocumentLimits, is_document
from crawler.content.pool import ContentPool, PoolLimits
from crawler.dedup.near import NearIndexes
from crawler.errors import ContentRefused
from crawler.monitor.metrics import Metrics
from crawler.names import Names
from crawler.visited import MadeContent, PageTask

if TYPE_CHECKING:
    from crawler.content.jobs import Content

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Made:
    """A page's content (None: none made), a document's title, and whether the page is a near-duplicate
    whose links are not followed."""

    content: MadeContent | None = None
    title: str | None = None
    skip_links: bool = False


class Contents:
    """Makes the content of the pages of domains with `content:` on, through one content pool."""

    def __init__(self, pool: ContentPool, redis: Redis, names: Names, metrics: Metrics) -> None:
        from crawler.content import jobs  # the content libraries: a worker without content never loads them

        self._jobs = jobs
        self._metrics = metrics
        self._pool = pool
        self._near = NearIndexes(redis, names)

    @staticmethod
    def reads(rules: Rules, content_type: str | None, url: str) -> bool:
        """True if an answer of `url` that is not HTML, of `content_type`, is read as a document."""
        return rules.content is not None and is_document(content_type, url)

    async def page(self, task: PageTask, rules: Rules, body: bytes, url: str) -> Made:
        """An HTML page's main content (none without `main`), language and simhash."""
        content = rules.content
        if content is None or not content.main:
            return Made()
        try:
            found = await self._pool.run(self._jobs.html_content, body, url, content.favor)
        except ContentRefused as refused:
            return self._refused(task, refused)
        if found is None:
            self._metrics.observe_content(task.domain, "none")
            return Made()
        return await self._made(task, rules, content, found)

    async def document(
        self, task: PageTask, content_type: str | None, rules: Rules, body: bytes, url: str
    ) -> Made:
        """A document's text, title, language and simhash, or the reason it was refused."""
        content = rules.content
        if content is None:
            return Made()
        try:
            found = await self._pool.run(
                self._jobs.document_content, body, content_type, url, DocumentLimits()
            )
        except ContentRefused as refused:
            return self._refused(task, refused)
        made = await self._made(task, rules, content, found)
        return replace(made, content=replace(made.content or MadeContent(), markdown=None), title=found.title)

    def _refused(self, task: PageTask, refused: ContentRefused) -> Made:
        log.info("%s: content refused (%s): %s", task.url, refused.reason, refused)
        self._metrics.observe_content(task.domain, "refused", str(refused.reason))
        return Made(MadeContent(content_refused=str(refused.reason)))

    async def _made(self, task: PageTask, rules: Rules, content: ContentRules, found: Content) -> Made:
        near = rules.near_duplicates
        original = None
        if near is not None and found.simhash is not None:
            match = await self._near.at(near.distance).claim(found.simhash, task.url)
            original = match.page if match is not None else None
        markdown, text = found.kept(content.formats)
        made = MadeContent(
            markdown=markdown,
            text=text,
            lang=found.lang.code if found.lang is not None else None,
            simhash=found.simhash,
            near_duplicate_of=original,
        )
        self._metrics.observe_content(task.domain, "made" if original is None else "near_duplicate")
        return Made(made, skip_links=original is not None and near is not None and near.skip_links)


@asynccontextmanager
async def contents(
    config: CrawlConfig, redis: Redis, names: Names, metrics: Metrics, processes: int
) -> AsyncIterator[Contents | None]:
    """The worker's content work, its pool open while the context lasts; None if no domain has
    `content:` on (a domains.yaml edited to turn it on takes effect at the worker's next start)."""
    if not config.content:
        yield None
        return
    async with ContentPool(PoolLimits(processes=processes, seconds=CONTENT_SECONDS)) as pool:
        yield Contents(pool, redis, names, metrics)
