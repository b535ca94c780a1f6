"""A page's latest state and its versions, read back for the HTTP API.

Blocking (callers run it in a thread). Versions are read newest first, a page of them per query, keyed
on the version number (`before`), so a long history is paged without an offset to count past.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import select

from crawler.archive import Archived
from crawler.sink.reader import Reader
from crawler.sink.tables import Page, PageVersion


@dataclass(frozen=True, slots=True)
class PageState:
    """A stored page's latest state (its `pages` row); `version` is its newest version's number."""

    id: int
    url: str
    final_url: str | None
    domain: str
    status_code: int | None
    content_type: str | None
    error: str | None
    depth: int
    title: str | None
    data: dict[str, Any] | None
    fetched_at: datetime
    attempts: int
    crawl: str | None
    version: int | None
    changed_at: datetime | None
    next_fetch_at: datetime | None
    # Its content, with `content:` on (docs/content.md); None where not made.
    markdown: str | None
    text: str | None
    lang: str | None
    simhash: str | None
    near_duplicate_of: str | None
    content_refused: str | None


@dataclass(frozen=True, slots=True)
class StoredVersion:
    """One version of a page, as `page_versions` holds it."""

    version: int
    kind: str
    fetched_at: datetime
    status_code: int | None
    title: str | None
    data: dict[str, Any] | None
    crawl: str | None


_PAGE = (
    Page.id,
    Page.url,
    Page.final_url,
    Page.domain,
    Page.status_code,
    Page.content_type,
    Page.error,
    Page.depth,
    Page.title,
    Page.data,
    Page.fetched_at,
    Page.attempts,
    Page.crawl_id,
    Page.version,
    Page.changed_at,
    Page.next_fetch_at,
    Page.markdown,
    Page.text,
    Page.lang,
    Page.simhash,
    Page.near_duplicate_of,
    Page.content_refused,
)
_VERSION = (
    PageVersion.version,
    PageVersion.kind,
    PageVersion.fetched_at,
    PageVersion.status_code,
    PageVersion.title,
    PageVersion.data,
    PageVersion.crawl_id,
)


def _utc(value: Any) -> Any:
    # SQLite hands back naive times; every stored time is UTC.
    return value.replace(tzinfo=UTC) if isinstance(value, datetime) and value.tzinfo is None else value


class PageHistory(Reader):
    """Reads pages and their versions."""

    def page(self, url: str) -> PageState | None:
        """The stored page at `url` (a canonical URL), or None."""
        rows = self._rows(select(*_PAGE).where(Page.url == url), "a page")
        return PageState(*(_utc(value) for value in rows[0])) if rows else None

    def archived(self, page: int) -> tuple[bool, Archived | None]:
        """Whether page `page` is stored, and where its latest answer's records are (None: nowhere)."""
        columns = (Page.warc_file, Page.warc_offset, Page.warc_length, Page.warc_digest, Page.warc_date)
        rows = self._rows(select(*columns).where(Page.id == page), "a page")
        if not rows:
            return False, None
        file, offset, length, digest, date = rows[0]
        if file is None or offset is None or length is None:
            return True, None
        return True, Archived(file, offset, length, digest or "", date or "")

    def versions(self, page: int, before: int | None, limit: int) -> list[StoredVersion] | None:
        """Up to `limit` versions of page `page` numbered below `before` (None: from its newest),
        newest first; None if there is no such page."""
        stmt = select(*_VERSION).where(PageVersion.page_id == page)
        if before is not None:
            stmt = stmt.where(PageVersion.version < before)
        rows = self._rows(stmt.order_by(PageVersion.version.desc()).limit(limit), "versions")
        if not rows and not self._rows(select(Page.id).where(Page.id == page), "a page"):
            return None
        return [StoredVersion(*(_utc(value) for value in row)) for row in rows]
