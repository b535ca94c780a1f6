"""What the sink says a crawl already did: its stored pages, read back when Redis lost the dedup store.

Blocking (callers run it in a thread). Pages are read in id order, a batch per query (keyset paging),
so a rebuild of millions of rows holds no long transaction and no cursor open between batches.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import ColumnElement, func, inspect, select

from crawler.sink.reader import Reader
from crawler.sink.tables import Page


@dataclass(frozen=True, slots=True)
class Tally:
    """One domain's stored pages in a crawl: successful, failed, and the credits they cost."""

    ok: int
    failed: int
    credits: float


def _of(crawl: str | None) -> ColumnElement[bool]:
    # The default crawl's pages are those stored without a crawl id.
    return Page.crawl_id.is_(None) if crawl is None else Page.crawl_id == crawl


class StoredPages(Reader):
    """Reads a crawl's stored pages."""

    def any(self, crawl: str | None) -> bool:
        """Whether the crawl stored any page (none in a database never migrated, or never made)."""
        if self._db.backend == "sqlite" and not Path(self._db.url.database or "").is_file():
            return False  # asking would make the file
        with (
            self._db.errors(f"reading pages from {self._db.redacted} failed"),
            self._engine.connect() as conn,
        ):
            if not inspect(conn).has_table(Page.__tablename__):
                return False
        return bool(self._rows(select(Page.id).where(_of(crawl)).limit(1), "pages"))

    def urls(self, crawl: str | None, after: int, limit: int) -> list[tuple[int, str]]:
        """Up to `limit` (id, url) of the crawl's pages with ids above `after`, in id order."""
        stmt = select(Page.id, Page.url).where(_of(crawl), Page.id > after).order_by(Page.id).limit(limit)
        return [(int(row[0]), str(row[1])) for row in self._rows(stmt, "page URLs")]

    def tallies(self, crawl: str | None) -> dict[str, Tally]:
        """Per domain, the crawl's stored pages: successful, failed, credits."""
        stmt = (
            select(
                Page.domain,
                func.count() - func.count(Page.error),
                func.count(Page.error),
                func.coalesce(func.sum(Page.credits), 0.0),
            )
            .where(_of(crawl))
            .group_by(Page.domain)
        )
        return {
            str(row[0]): Tally(int(row[1]), int(row[2]), float(row[3]))
            for row in self._rows(stmt, "page counts")
        }

    def stored(self, url: str, crawl: str | None) -> bool:
        """Whether the crawl stored a page for `url` (a canonical URL)."""
        return bool(self._rows(select(Page.id).where(Page.url == url, _of(crawl)), "a page"))
