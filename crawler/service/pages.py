"""Stored pages: a page's latest state by its URL, its archived answer, its versions."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from crawler.archive import Stored, read
from crawler.archive.source import ArchiveSource
from crawler.config import CrawlConfig
from crawler.errors import ArchiveError, NotFound
from crawler.frontier.urls import canonicalise
from crawler.settings import Settings
from crawler.sink.history import PageHistory, PageState, StoredVersion


@dataclass(frozen=True, slots=True)
class VersionsView:
    """Versions of a page, newest first; `before` asks for the next ones (None: there are none)."""

    page: int
    versions: list[StoredVersion]
    before: int | None


@dataclass(frozen=True, slots=True)
class StoredPages:
    """The pages the sink stored, their versions, and their answers in the archive."""

    settings: Settings
    config: CrawlConfig
    history: PageHistory

    async def at(self, url: str) -> PageState:
        """The stored page at `url`, canonicalised as the crawler stores it; BadURL, NotFound."""
        canon = canonicalise(url, tracking=self.config.dropped_params)
        found = await asyncio.to_thread(self.history.page, canon)
        if found is None:
            raise NotFound(f"no page is stored for {canon}")
        return found

    async def archived(self, page: int) -> Stored:
        """Page `page`'s latest answer as the archive holds it (a ranged GET for a record in object
        storage); NotFound if there is no such page, or no record of it."""
        stored, archived = await asyncio.to_thread(self.history.archived, page)
        if not stored:
            raise NotFound(f"no page {page}: GET /v1/pages?url=URL gives a page's id")
        if archived is None:
            raise NotFound(f"page {page} has no archived answer: its domain does not set `archive: true`")
        try:
            return await asyncio.to_thread(read, ArchiveSource.of(self.settings), archived)
        except ArchiveError as exc:
            raise NotFound(f"page {page}'s archived answer cannot be read: {exc}") from None

    async def versions(self, page: int, before: int | None = None, limit: int = 100) -> VersionsView:
        """Up to `limit` versions of page `page` numbered below `before`, newest first; NotFound."""
        # One more than asked says whether there is a next page.
        found = await asyncio.to_thread(self.history.versions, page, before, limit + 1)
        if found is None:
            raise NotFound(f"no page {page}: GET /v1/pages?url=URL gives a page's id")
        more = len(found) > limit
        return VersionsView(page, found[:limit], found[limit - 1].version if more else None)
