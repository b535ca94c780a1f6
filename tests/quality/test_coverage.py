"""A crawl's coverage is counted in the same atomic step as its outcomes, in Redis, by many workers at
once, read back live, kept in the crawl's row once it ends, and frozen by a cancel."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from redis.asyncio import Redis

from crawler.frontier.crawls import COUNTED, CrawlState
from crawler.names import Names
from crawler.quality.checks import Expectations
from crawler.quality.coverage import Coverage, coverage_of, is_quality
from crawler.quality.expect import load_expect
from crawler.sink.crawls import CrawlRecord, CrawlStore
from crawler.sink.database import Database
from crawler.sink.sql import migrate

DOMAIN = "shop.test"
PLAN = Expectations(
    load_expect(
        {
            "fields": {"title": {"present": True}},
            "pages": [
                {"name": "product", "match": "^/p/", "fields": {"price": {"present": "95%", "range": "> 0"}}}
            ],
        }
    ),
    fields=["title", "price"],
)


def _page(i: int, price: float | None) -> dict[tuple[str, str], int]:
    """What a worker adds for one product page stored ok: its outcome and its quality, in one mapping."""
    verdict = PLAN.check(f"http://shop.test/p/{i}", {"title": f"Lamp {i}", "price": price})
    return {(DOMAIN, "ok"): 1, **verdict.counts(DOMAIN)}


async def test_coverage_rides_in_the_crawls_counts_step_from_many_workers(redis: Redis, prefix: str) -> None:
    state = CrawlState(redis, Names(prefix))
    # Eight workers at once: 80 pages with a price, 16 with none, 4 with a price of 0.
    prices = [12.5] * 80 + [None] * 16 + [0.0] * 4

    async def worker(k: int) -> None:
        for i in range(k, len(prices), 8):
            await state.count("c1", _page(i, prices[i]))

    await asyncio.gather(*(worker(k) for k in range(8)))
    counts = await state.counts("c1")
    assert counts[DOMAIN]["ok"] == 100
    coverage = coverage_of(counts)[DOMAIN]
    assert coverage.pages() == coverage.pages("product") == 100
    assert coverage.fill("", "title").n == 100
    assert coverage.fill("product", "price") == coverage.fill("", "price")
    assert coverage.fill("product", "price").rate == 0.84
    assert coverage.failures("product/price.range").n == 4
    assert coverage.invalid == 4
    # The outcome kinds are the crawl's as before; the quality ones are told apart by their name.
    assert {k for k in counts[DOMAIN] if not is_quality(k)} == set(COUNTED)


async def test_a_cancel_freezes_the_coverage_with_the_outcomes(redis: Redis, prefix: str) -> None:
    state = CrawlState(redis, Names(prefix))
    await state.count("c2", _page(1, 3.0))
    await state.cancel("c2")
    await state.count("c2", _page(2, None))
    counts = await state.counts("c2")
    assert counts[DOMAIN]["ok"] == 1
    assert coverage_of(counts)[DOMAIN].fill("product", "price").rate == 1.0


async def test_a_window_of_recent_pages_shows_a_break_the_whole_crawl_hides(
    redis: Redis, prefix: str
) -> None:
    state = CrawlState(redis, Names(prefix))
    for i in range(200):
        await state.count("c3", _page(i, 9.0))
    earlier = coverage_of(await state.counts("c3"))[DOMAIN]
    for i in range(200, 240):  # the template changed: no price from here on
        await state.count("c3", _page(i, None))
    now = coverage_of(await state.counts("c3"))[DOMAIN]
    assert now.fill("product", "price").rate == 200 / 240
    recent = now.since(earlier)
    assert recent.pages("product") == 40 and recent.fill("product", "price").rate == 0.0


async def test_a_finished_crawl_keeps_its_coverage_in_its_row(
    redis: Redis, prefix: str, sqlite_url: str
) -> None:
    state = CrawlState(redis, Names(prefix))
    for i, price in enumerate([5.0, 6.0, None]):
        await state.count("c4", _page(i, price))
    migrate(sqlite_url)
    store_db = Database(sqlite_url)
    store = CrawlStore(store_db)
    try:
        store.add(CrawlRecord("c4", None, "running", [], {}, datetime.now(UTC), None, None))
        assert store.end("c4", "finished", await state.counts("c4"))
        await state.forget("c4")
        record = store.get("c4")
    finally:
        store_db.close()
    assert await state.counts("c4") == {}
    assert record is not None and record.counts is not None
    kept = coverage_of(record.counts)[DOMAIN]
    assert kept == Coverage.of(record.counts[DOMAIN])
    assert (kept.pages("product"), kept.fill("product", "price").n) == (3, 2)
