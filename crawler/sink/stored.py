"""What the sink says a crawl already did: its stored pages, read back when Redis lost the dedup store.

Blocking (callers run it in a thread). Pages are read in id order, a batch per query (keyset paging),
so a rebuild of millions of rows holds no long transaction and no cursor open between batches.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import ColumnElement, Executable, func, inspect, select
from sqlalchemy.exc import DBAPIError

from crawler.errors import SinkError
from crawler.sink.sql import create_sink_engine, engine_url
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


class StoredPages:
    """Reads a crawl's stored pages."""

    def __init__(self, database_url: str) -> None:
        url = engine_url(database_url)
        self._url = url
        self._redacted = url.render_as_string(hide_password=True)
        self._engine = create_sink_engine(url)

    def _rows(self, stmt: Executable, what: str) -> Sequence[Any]:
        try:
            with self._engine.connect() as conn:
                return conn.execute(stmt).all()
        except DBAPIError as exc:
            first = str(exc.orig).strip().splitlines()[0] if str(exc.orig).strip() else type(exc).__name__
            raise SinkError(f"reading {what} from {self._redacted} failed: {first}") from exc

    def any(self, crawl: str | None) -> bool:
        """Whether the crawl stored any page (none in a database never migrated, or never made)."""
        if self._url.get_backend_name() == "sqlite" and not Path(self._url.database or "").is_file():
            return False  # asking would make the file
        try:
            with self._engine.connect() as conn:
                if not inspect(conn).has_table(Page.__tablename__):
                    return False
        except DBAPIError as exc:
            raise SinkError(f"reading pages from {self._redacted} failed: {exc.orig}") from exc
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

    def close(self) -> None:
        """Close pooled connections."""
        self._engine.dispose()
