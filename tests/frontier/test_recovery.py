"""A dedup store Redis lost, rebuilt from the sink: detected by the claim, rebuilt once under a lock,
quotas and crawl bookkeeping restored, pages queued twice spotted. A private Redis restarted empty."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import pytest
from redis.asyncio import Redis

from crawler.config import DedupConfig
from crawler.dedup.store import SeenStore
from crawler.frontier.crawls import CrawlOptions, CrawlState
from crawler.frontier.recovery import Recovery
from crawler.frontier.urls import fingerprint
from crawler.names import DISCOVERED_LABEL, Names
from crawler.sink.crawls import CrawlRecord, CrawlStore
from crawler.sink.database import Database
from crawler.sink.sql import PageRecord, Sink, migrate
from tests.support.redis_server import PrivateRedis

PREFIX = "crawler"
MODES = ("plain", "compact", "bloom")


def url(i: int) -> str:
    return f"http://shop.test/product/{i}"


@pytest.fixture
async def lost_redis(private_redis: PrivateRedis) -> AsyncIterator[Redis]:
    client = Redis.from_url(private_redis.url)
    try:
        yield client
    finally:
        await client.aclose()


async def restart_empty(server: PrivateRedis, client: Redis) -> None:
    """Redis restarted empty; the client's pooled connections to the old server are dropped."""
    await asyncio.to_thread(server.restart_empty)
    await client.connection_pool.disconnect()


def store_pages(database_url: str, crawl: str | None, n: int, *, failed: int = 0, credits: float = 0) -> None:
    migrate(database_url)
    sink_db = Database(database_url)
    sink = Sink(sink_db)
    try:
        records = [
            PageRecord(
                url=url(i),
                domain="shop.test",
                depth=1,
                attempts=1,
                status_code=404 if i < failed else 200,
                error="404" if i < failed else None,
                credits=credits,
                crawl=crawl,
            )
            for i in range(n)
        ]
        asyncio.run(sink.store_many(records))
    finally:
        sink_db.close()


def record_crawl(database_url: str, crawl: str, state: str = "running", max_pages: int | None = 50) -> None:
    store_db = Database(database_url)
    store = CrawlStore(store_db)
    try:
        options = {"domains": None, "max_depth": 3, "max_pages": max_pages, "priority": None}
        store.add(CrawlRecord(crawl, None, "running", [url(0)], options, datetime.now(UTC), None, None))
        if state != "running":
            store.end(crawl, "cancelled", {})
    finally:
        store_db.close()


@pytest.mark.parametrize("mode", MODES)
async def test_a_lost_store_is_rebuilt_from_the_sink_before_the_claim_goes_on(
    mode: str, private_redis: PrivateRedis, lost_redis: Redis, sqlite_url: str
) -> None:
    await asyncio.to_thread(store_pages, sqlite_url, "c1", 0)
    await asyncio.to_thread(record_crawl, sqlite_url, "c1")
    names = Names(PREFIX)
    recovery_db = Database(sqlite_url)
    # In one mode shop.test is a discovered host: its counts are rebuilt as the discovered hosts'.
    label = DISCOVERED_LABEL if mode == "bloom" else "shop.test"
    discovered = (lambda domain: domain == "shop.test") if mode == "bloom" else (lambda domain: False)
    recovery = Recovery(lost_redis, names, recovery_db, batch=7, discovered=discovered)  # several batches
    try:
        root = SeenStore(lost_redis, names, DedupConfig(mode=mode), recovery)  # type: ignore[arg-type]
        seen = root.for_crawl("c1")
        # Before the loss: 30 URLs routed, the first 25 of them fetched and stored.
        fps = [fingerprint(url(i)) for i in range(30)]
        assert all(await seen.claim(fps, b"page"))
        await seen.confirm(fps)
        await asyncio.to_thread(store_pages, sqlite_url, "c1", 25, failed=5)
        assert recovery.rebuilds == []
        await restart_empty(private_redis, lost_redis)
        assert private_redis.keys() == 0
        # A confirm of a claim made before the loss lands first (compact, Bloom: it makes a meta hash).
        await seen.confirm([fingerprint(url(29))])
        # A claim after the loss: detected, rebuilt, then answered from the rebuilt store.
        fresh = await seen.claim([fingerprint(url(i)) for i in range(20, 30)], b"other")
        assert fresh == [False] * 5 + [True] * 4 + [False]
        assert [(c, rows) for c, rows, _ in recovery.rebuilds] == [("c1", 25)]
        assert int(await lost_redis.get(names.for_crawl("c1").pages_key("shop.test")) or 0) == 25
        assert int(await lost_redis.get(names.crawl_pages_key("c1")) or 0) == 25
        counts = await CrawlState(lost_redis, names).counts("c1")
        assert list(counts) == [label]
        assert counts[label]["ok"] == 20 and counts[label]["failed"] == 5
        options = await CrawlState(lost_redis, names).options("c1")
        assert options == CrawlOptions(None, 3, 50, None)
        # From now on a first delivery is taken once; one the sink holds is not fetched again.
        assert await recovery.duplicate(seen, url(3))  # stored before the loss
        assert not await recovery.duplicate(seen, url(27))  # queued, not stored: fetch it
        assert await recovery.duplicate(seen, url(27))  # its second copy: not again
    finally:
        recovery_db.close()


async def test_the_first_claim_of_a_crawl_that_stored_nothing_makes_its_store_without_a_rebuild(
    lost_redis: Redis, sqlite_url: str
) -> None:
    await asyncio.to_thread(store_pages, sqlite_url, "old", 3)
    names = Names(PREFIX)
    recovery_db = Database(sqlite_url)
    recovery = Recovery(lost_redis, names, recovery_db)
    try:
        seen = SeenStore(lost_redis, names, None, recovery).for_crawl("new")
        assert await seen.claim([fingerprint(url(0))], b"seed") == [True]
        assert recovery.rebuilds == []
        assert not await recovery.duplicate(seen, url(0))  # never rebuilt: nothing is checked
    finally:
        recovery_db.close()


async def test_many_claimers_wait_for_one_rebuild(
    private_redis: PrivateRedis, lost_redis: Redis, pg_url: str
) -> None:
    await asyncio.to_thread(store_pages, pg_url, None, 2000)
    names = Names(PREFIX)
    databases = [Database(pg_url) for _ in range(4)]  # four processes, a pool each
    recoveries = [Recovery(lost_redis, names, db, batch=100) for db in databases]
    try:
        stores = [SeenStore(lost_redis, names, None, r) for r in recoveries]  # four processes
        for store in stores:
            await store.check()
        # No store, and pages stored: Redis was lost while every process was down. Rebuilt once.
        assert sum(len(r.rebuilds) for r in recoveries) == 1
        await restart_empty(private_redis, lost_redis)
        answers = await asyncio.gather(*(s.claim([fingerprint(url(i))], b"x") for i, s in enumerate(stores)))
        assert answers == [[False]] * 4  # none published a stored page again
        assert sum(len(r.rebuilds) for r in recoveries) == 2
    finally:
        for db in databases:
            db.close()


async def test_a_lost_cancelled_crawl_stays_cancelled_and_is_not_rebuilt(
    private_redis: PrivateRedis, lost_redis: Redis, sqlite_url: str
) -> None:
    await asyncio.to_thread(store_pages, sqlite_url, "gone", 5)
    await asyncio.to_thread(record_crawl, sqlite_url, "gone", "cancelled")
    names = Names(PREFIX)
    recovery_db = Database(sqlite_url)
    recovery = Recovery(lost_redis, names, recovery_db)
    try:
        seen = SeenStore(lost_redis, names, None, recovery).for_crawl("gone")
        await CrawlState(lost_redis, names).cancel("gone")
        await seen.check()
        await restart_empty(private_redis, lost_redis)
        await seen.claim([fingerprint(url(9))], b"x")
        assert await CrawlState(lost_redis, names).cancelled("gone")
        assert recovery.rebuilds == []
    finally:
        recovery_db.close()


async def test_a_store_emptied_by_reset_is_not_rebuilt(lost_redis: Redis, sqlite_url: str) -> None:
    await asyncio.to_thread(store_pages, sqlite_url, None, 5)
    names = Names(PREFIX)
    recovery_db = Database(sqlite_url)
    recovery = Recovery(lost_redis, names, recovery_db)
    try:
        seen = SeenStore(lost_redis, names, None, recovery)
        await seen.forgotten()  # what `crawler reset` leaves
        assert await seen.claim([fingerprint(url(0))], b"seed") == [True]
        assert recovery.rebuilds == []
    finally:
        recovery_db.close()
