"""Tests for crawler.quota: the fleet-wide page count and the router's view of it."""

from __future__ import annotations

from redis.asyncio import Redis

from crawler.frontier.quota import COUNT_READ_INTERVAL, PageQuota
from crawler.names import Names


async def test_take_counts_pages_across_workers_up_to_max_pages(redis: Redis, prefix: str) -> None:
    names = Names(prefix)
    one, two = PageQuota(redis, names), PageQuota(redis, names)
    taken = [await q.take("a.test", 3) for q in (one, two, one, two)]
    assert taken == [True, True, True, False]
    assert await one.take("b.test", 3)  # each domain has its own count


async def test_full_reads_counts_at_most_once_per_interval(redis: Redis, prefix: str) -> None:
    names = Names(prefix)
    now = [100.0]
    worker, router = PageQuota(redis, names), PageQuota(redis, names, clock=lambda: now[0])
    limits = {"a.test": 2, "b.test": 5}
    assert await router.full({"a.test", "b.test"}, limits) == set()
    await worker.take("a.test", 2)
    await worker.take("a.test", 2)
    # Within the interval the router keeps what it read; the workers' `take` still holds the limit.
    now[0] += COUNT_READ_INTERVAL / 2
    assert await router.full({"a.test"}, limits) == set()
    assert not await worker.take("a.test", 2)
    now[0] += COUNT_READ_INTERVAL / 2
    assert await router.full({"a.test", "b.test"}, limits) == {"a.test"}
    # A domain the router had not asked about is read at once.
    for _ in range(4):
        await worker.take("c.test", 4)
    assert await router.full({"c.test"}, {"c.test": 4}) == {"c.test"}


async def test_full_keeps_only_the_counts_read_within_the_interval(redis: Redis, prefix: str) -> None:
    now = [100.0]
    router = PageQuota(redis, Names(prefix), clock=lambda: now[0])
    hosts = {f"h{i}.test": 10 for i in range(1000)}  # the open web's hosts, each asked about once
    assert await router.full(set(hosts), hosts) == set()
    assert router.kept == 1000
    now[0] += COUNT_READ_INTERVAL / 2
    assert await router.full({"h1.test"}, hosts) == set()
    assert router.kept == 1000  # all still within the interval
    now[0] += COUNT_READ_INTERVAL / 2
    assert await router.full({"h2.test"}, hosts) == set()  # h2 read again; the others dropped
    assert router.kept == 1
