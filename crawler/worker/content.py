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
from crawler.sink.sql import PageRecord

if TYPE_CHECKING:
    from crawler.content.jobs import Content

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Made:
    """A page's row with its content, and whether it is a near-duplicate whose links are not followed."""

    record: PageRecord
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

    async def page(self, record: PageRecord, rules: Rules, body: bytes, url: str) -> Made:
        """`record` with an HTML page's main content (none without `main`), language and simhash."""
        content = rules.content
        if content is None or not content.main:
            return Made(record)
        try:
            found = await self._pool.run(self._jobs.html_content, body, url, content.favor)
        except ContentRefused as refused:
            return self._refused(record, refused)
        if found is None:
            self._metrics.observe_content(record.domain, "none")
            return Made(record)
        return await self._made(record, rules, content, found)

    async def document(self, record: PageRecord, rules: Rules, body: bytes, url: str) -> Made:
        """`record` with a document's text, title, language and simhash, or the reason it was refused."""
        content = rules.content
        if content is None:
            return Made(record)
        try:
            found = await self._pool.run(
                self._jobs.document_content, body, record.content_type, url, DocumentLimits()
            )
        except ContentRefused as refused:
            return self._refused(record, refused)
        made = await self._made(record, rules, content, found)
        return replace(made, record=replace(made.record, title=found.title, markdown=None))

    def _refused(self, record: PageRecord, refused: ContentRefused) -> Made:
        log.info("%s: content refused (%s): %s", record.url, refused.reason, refused)
        self._metrics.observe_content(record.domain, "refused", str(refused.reason))
        return Made(replace(record, content_refused=str(refused.reason)))

    async def _made(self, record: PageRecord, rules: Rules, content: ContentRules, found: Content) -> Made:
        near = rules.near_duplicates
        original = None
        if near is not None and found.simhash is not None:
            match = await self._near.at(near.distance).claim(found.simhash, record.url)
            original = match.page if match is not None else None
        markdown, text = found.kept(content.formats)
        record = replace(
            record,
            markdown=markdown,
            text=text,
            lang=found.lang.code if found.lang is not None else None,
            simhash=found.simhash,
            near_duplicate_of=original,
        )
        self._metrics.observe_content(record.domain, "made" if original is None else "near_duplicate")
        return Made(record, skip_links=original is not None and near is not None and near.skip_links)


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
