"""Pages with versions, stored through the real sink: each answer whose signature changed is a version."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from crawler.sink.database import Database
from crawler.sink.sql import PageRecord, Sink, migrate

T0 = datetime(2024, 5, 1, 8, 0, tzinfo=UTC)
DAY = timedelta(days=1)
LAMP, DESK, BLOG = "https://shop.test/p/1", "https://shop.test/p/2", "https://blog.test/"


def answer(url: str, at: datetime, signature: str, status: int = 200, crawl: str | None = None) -> PageRecord:
    """An answer of `url` fetched `at`, its content `signature`; a 404 or 410 is the page gone."""
    gone = status in (404, 410)
    return PageRecord(
        url=url,
        domain=url.split("/")[2],
        depth=0,
        attempts=1,
        status_code=status,
        error=f"HTTP {status}" if gone else None,
        title=None if gone else f"{signature} title",
        data=None if gone else {"price": float(len(signature)), "stock": 3, "sku": signature},
        signature=None if gone else signature,
        fetched_at=at,
        crawl=crawl,
        history=True,
        text=None if gone else f"{signature} text",
        lang=None if gone else "en",
    )


# Three passes over three pages. The lamp changes twice, the desk never, the blog goes and comes back.
PASSES = [
    [answer(LAMP, T0, "a1", crawl="c1"), answer(DESK, T0, "b1", crawl="c1"), answer(BLOG, T0, "c1")],
    [answer(LAMP, T0 + DAY, "a2", crawl="c2"), answer(DESK, T0 + DAY, "b1"), answer(BLOG, T0 + DAY, "", 404)],
    [answer(LAMP, T0 + 2 * DAY, "a3"), answer(BLOG, T0 + 2 * DAY, "c2")],
]
# (url, version, kind, fetched_at) of every version the passes make, in the order they are written (a
# batch in url order).
VERSIONS = [
    (BLOG, 1, "new", T0),
    (LAMP, 1, "new", T0),
    (DESK, 1, "new", T0),
    (BLOG, 2, "gone", T0 + DAY),
    (LAMP, 2, "changed", T0 + DAY),
    (BLOG, 3, "back", T0 + 2 * DAY),
    (LAMP, 3, "changed", T0 + 2 * DAY),
]


async def store(database_url: str, passes: Sequence[Sequence[PageRecord]] = PASSES) -> None:
    """Migrate the database and store `passes` through the sink, a batch each."""
    migrate(database_url)
    sink_db = Database(database_url)
    sink = Sink(sink_db)
    try:
        for records in passes:
            await sink.store_many(records)
    finally:
        sink_db.close()


def changes(url: str, times: Sequence[datetime]) -> list[list[PageRecord]]:
    """Passes storing `url` once at each of `times`, its content changed each time: a version each."""
    return [[answer(url, at, f"s{i}")] for i, at in enumerate(times)]


def utc(value: Any) -> Any:
    """A stored time as read back: SQLite's are naive, and UTC."""
    return value.replace(tzinfo=UTC) if isinstance(value, datetime) and value.tzinfo is None else value
