"""A page's checks before its fetch in one round trip, against the real Redis: the crawl's cancel,
the max_pages counts and the rate token, with the same outcomes as asked one by one."""

from __future__ import annotations

import asyncio
import time

from redis.asyncio import Redis

from bench.crash import max_in_window
from crawler.config import CrawlConfig, Rules
from crawler.dns import HostResolver
from crawler.fetch.fetcher import BoundedFetcher
from crawler.fetch.ratelimit import RateLimiter, budget
from crawler.fetch.robots import Robots
from crawler.frontier.crawls import CrawlState
from crawler.frontier.quota import PageQuota
from crawler.names import Names
from crawler.worker.addresses import Addresses
from crawler.worker.admission import Admission, Checked
from crawler.worker.wiring import make_fetcher

CONFIG = CrawlConfig.model_validate({"domains": {"a.test": {}}})


def admission(redis: Redis, names: Names, rules: Rules, fetchers: list[BoundedFetcher]) -> Admission:
    fetchers.append(make_fetcher(CONFIG))
    robots = Robots(redis, names, fetchers[-1], "crawler-test")
    return Admission(redis, names, RateLimiter(redis, names), robots, lambda _: rules)


async def check(
    gate: Admission,
    rules: Rules,
    crawl: str | None = None,
    *,
    count: bool = True,
    crawl_max: int | None = None,
) -> Checked | None:
    return await gate.check(
        "http://a.test/p",
        "a.test",
        rules,
        crawl=crawl,
        cancellable=True,
        count=count,
        crawl_max_pages=crawl_max,
    )


async def test_a_page_is_counted_and_takes_a_token(
    redis: Redis, prefix: str, fetchers: list[BoundedFetcher]
) -> None:
    names = Names(prefix)
    rules = Rules(obey_robots=False, max_pages=2, rate=100, burst=5)
    gate = admission(redis, names, rules, fetchers)
    checked = await check(gate, rules)
    assert checked is not None and checked.held is None and checked.cleared_now
    assert checked.admitted is not None and checked.admitted.taken == (1, 0.0)
    assert int(await redis.get(names.pages_key("a.test")) or 0) == 1
    tokens = float(await redis.hget(names.bucket_key("a.test"), "tokens") or 0)
    assert 3.9 < tokens < 4.1  # the burst of 5, less this page's token
    assert await check(gate, rules, count=False) is not None  # a retry is not counted again
    assert int(await redis.get(names.pages_key("a.test")) or 0) == 1


async def test_past_max_pages_a_page_is_held_and_takes_no_token(
    redis: Redis, prefix: str, fetchers: list[BoundedFetcher]
) -> None:
    names = Names(prefix)
    rules = Rules(obey_robots=False, max_pages=1, rate=100, burst=5)
    gate = admission(redis, names, rules, fetchers)
    first = await check(gate, rules, "c1")
    assert first is not None and first.held is None
    before = await redis.hget(names.bucket_key("a.test"), "tokens")
    held = await check(gate, rules, "c1")
    assert held == Checked(held="max_pages")
    assert await redis.hget(names.bucket_key("a.test"), "tokens") == before
    # The same count PageQuota keeps: it refuses too.
    assert not await PageQuota(redis, names).take("a.test", 1, "c1")


async def test_a_crawls_own_max_pages_holds_its_pages(
    redis: Redis, prefix: str, fetchers: list[BoundedFetcher]
) -> None:
    names = Names(prefix)
    rules = Rules(obey_robots=False, max_pages=100, rate=100, burst=5)
    gate = admission(redis, names, rules, fetchers)
    first = await check(gate, rules, "c1", crawl_max=1)
    assert first is not None and first.held is None
    assert await check(gate, rules, "c1", crawl_max=1) == Checked(held="crawl_max_pages")
    assert int(await redis.get(names.crawl_pages_key("c1")) or 0) == 2


async def test_a_cancelled_crawls_page_is_held_uncounted(
    redis: Redis, prefix: str, fetchers: list[BoundedFetcher]
) -> None:
    names = Names(prefix)
    rules = Rules(obey_robots=False, max_pages=100, rate=100, burst=5)
    gate = admission(redis, names, rules, fetchers)
    await CrawlState(redis, names).cancel("c1")
    assert await check(gate, rules, "c1", crawl_max=10) == Checked(held="cancelled")
    assert await redis.get(names.for_crawl("c1").pages_key("a.test")) is None
    assert await redis.exists(names.bucket_key("a.test")) == 0
    other = await check(gate, rules, "c2")
    assert other is not None and other.held is None


async def test_robots_txt_not_at_hand_or_a_credit_limit_goes_the_long_way(
    redis: Redis, prefix: str, fetchers: list[BoundedFetcher]
) -> None:
    names = Names(prefix)
    rules = Rules(obey_robots=True, max_pages=100)
    assert await check(admission(redis, names, rules, fetchers), rules) is None
    credits = Rules(obey_robots=False, max_credits=10)
    assert await check(admission(redis, names, credits, fetchers), credits) is None
    assert await redis.exists(names.pages_key("a.test"), names.bucket_key("a.test")) == 0


async def test_admitted_pages_keep_the_fleet_wide_rate(
    redis: Redis, prefix: str, fetchers: list[BoundedFetcher]
) -> None:
    names = Names(prefix)
    rules = Rules(obey_robots=False, max_pages=1000, rate=20, burst=3, backoff_recovery=10)
    gate = admission(redis, names, rules, fetchers)
    limiter = RateLimiter(redis, names)
    granted: list[float] = []

    async def taker() -> None:
        for _ in range(10):
            checked = await check(gate, rules)
            assert checked is not None and checked.admitted is not None
            await limiter.acquire("a.test", lambda: budget(rules, None), checked.admitted.taken)
            granted.append(time.monotonic())

    await asyncio.gather(*(taker() for _ in range(4)))  # 40 requests at 20/s with a burst of 3
    assert len(granted) == 40
    for window in (0.25, 0.5, 1.0):
        assert max_in_window(granted, window) <= 20 * window + 3 + 1
    assert max(granted) - min(granted) >= (40 - 3) / 20 * 0.9


async def test_pages_checked_together_share_a_write_and_each_get_their_answer(
    redis: Redis, prefix: str, fetchers: list[BoundedFetcher]
) -> None:
    names = Names(prefix)
    rules = Rules(obey_robots=False, max_pages=5, rate=100, burst=100)
    gate = admission(redis, names, rules, fetchers)
    checked = await asyncio.gather(*(check(gate, rules, "c1") for _ in range(12)))
    held = [c for c in checked if c is not None and c.held == "max_pages"]
    admitted = [c for c in checked if c is not None and c.admitted is not None]
    assert (len(admitted), len(held)) == (5, 7)
    assert int(await redis.get(names.for_crawl("c1").pages_key("a.test")) or 0) == 12
    tokens = float(await redis.hget(names.bucket_key("a.test"), "tokens") or 0)
    assert 94.9 < tokens < 95.1  # a token for each admitted page only


async def test_with_per_ip_a_page_takes_its_addresss_token_in_the_same_script(
    redis: Redis, prefix: str, fetchers: list[BoundedFetcher]
) -> None:
    names = Names(prefix)
    config = CrawlConfig.model_validate(
        {
            "domains": {"a.test": {}, "b.test": {}},
            "resolve": {"a.test": "127.0.0.9", "b.test": "127.0.0.9"},
            "per_ip": {"rate": 1, "burst": 1},
        }
    )
    rules = Rules(obey_robots=False, rate=100, burst=5)
    fetchers.append(make_fetcher(config))
    addresses = Addresses(HostResolver(redis, names, config.dns), lambda: config)
    robots = Robots(redis, names, fetchers[-1], "crawler-test")
    # Every page takes only a token due now, as a discovered host's does.
    gate = Admission(
        redis, names, RateLimiter(redis, names), robots, lambda _: rules, lambda _: True, addresses
    )

    async def ask(host: str) -> Checked | None:
        return await gate.check(
            f"http://{host}/p", host, rules, crawl=None, cancellable=True, count=True, crawl_max_pages=None
        )

    first = await ask("a.test")
    assert first is not None and first.cleared_now
    assert float(await redis.hget(names.ip_bucket_key("127.0.0.9"), "tokens") or 1) < 0.1
    # b.test's own bucket is full, but its address's token is spent: neither is taken.
    second = await ask("b.test")
    assert second is not None and second.admitted is not None
    grant, wait = second.admitted.taken
    assert grant == 0 and 0.5 < wait <= 1.0
    assert float(await redis.hget(names.bucket_key("b.test"), "tokens") or 0) > 4.9
