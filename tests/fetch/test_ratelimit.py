"""The fleet-wide token bucket against the real Redis, and a real fleet against a test site."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from redis.asyncio import Redis

from bench.crash import max_in_window
from crawler.config import load_config
from crawler.fetch.ratelimit import Budget, Kept, RateLimiter
from crawler.names import BUCKET_KEPT, Names
from crawler.worker import wiring
from demo.site import Reply, Site, free_port, page, serve
from tests.support.crawls import consumer, finish, rows
from tests.support.services import settings_for
from tests.support.sites import IPS, write_config
from tests.support.wait import until


async def test_takers_share_one_budget(redis: Redis, prefix: str) -> None:
    limiter = RateLimiter(redis, Names(prefix))
    budget = Budget(rate=20, burst=3, recovery=10)
    granted: list[float] = []

    async def taker() -> None:
        for _ in range(10):
            await limiter.acquire("s.test", lambda: budget)
            granted.append(time.monotonic())

    await asyncio.gather(*(taker() for _ in range(4)))  # 40 requests at 20/s with a burst of 3
    assert len(granted) == 40
    for window in (0.25, 0.5, 1.0):
        assert max_in_window(granted, window) <= 20 * window + 3 + 1
    assert max(granted) - min(granted) >= (40 - 3) / 20 * 0.9


async def test_a_bucket_lost_while_takers_hold_reservations_grants_no_more_than_the_limit(
    redis: Redis, prefix: str
) -> None:
    names = Names(prefix)
    limiter = RateLimiter(redis, names)
    budget = Budget(rate=20, burst=3, recovery=10)
    granted: list[float] = []

    async def taker() -> None:
        for _ in range(15):
            await limiter.acquire("s.test", lambda: budget)
            granted.append(time.monotonic())

    async def lose() -> None:
        await until(lambda: len(granted) >= 20, every=0.01)
        await redis.delete(names.bucket_key("s.test"))  # what a flush or an empty restart does to it

    await asyncio.gather(lose(), *(taker() for _ in range(4)))  # 60 requests, some still reserved
    assert len(granted) == 60
    for window in (0.5, 1.0, 2.0):
        assert max_in_window(granted, window) <= 20 * window + 3 + 1, window


async def test_a_bucket_left_to_expire_starts_full_again(redis: Redis, prefix: str) -> None:
    names = Names(prefix)
    now = [0.0]
    limiter = RateLimiter(redis, names, clock=lambda: now[0])
    budget = Budget(rate=1, burst=3, recovery=10)
    await limiter.acquire("s.test", lambda: budget)
    await redis.delete(names.bucket_key("s.test"))
    now[0] += BUCKET_KEPT  # its last ask was as long ago as a bucket is kept: it expired, not lost
    # The whole burst at once, not one a second: the waits the bucket asked for (not the wall
    # clock, which a loaded machine stretches).
    waited = [await limiter.acquire("s.test", lambda: budget) for _ in range(3)]
    assert waited == [0.0, 0.0, 0.0]


async def test_slow_down_halves_the_rate_and_pauses(redis: Redis, prefix: str) -> None:
    limiter = RateLimiter(redis, Names(prefix))
    budget = Budget(rate=50, burst=1, recovery=60)
    await limiter.acquire("s.test", lambda: budget)
    assert (await limiter.slow_down("s.test", budget))[0] == 0.5
    assert (await limiter.slow_down("s.test", budget, pause=0.5))[0] == 0.5  # at most once a second
    started = time.monotonic()
    await limiter.acquire("s.test", lambda: budget)
    assert time.monotonic() - started >= 0.45  # paused: not before the pause is over


async def test_a_bucket_lost_with_redis_comes_back_with_the_back_off_and_pause_kept_outside(
    redis: Redis, prefix: str
) -> None:
    names = Names(prefix)
    kept: dict[str, Kept] = {}  # what the fleet keeps in the database (crawler/worker/backoffs.py)
    limiter = RateLimiter(redis, names, kept=kept.get)
    budget = Budget(rate=50, burst=1, recovery=60)
    await limiter.acquire("s.test", lambda: budget)
    kept["s.test"] = await limiter.slow_down("s.test", budget, pause=1.0)
    await redis.delete(names.bucket_key("s.test"))  # what a flush or an empty restart does to it
    started = time.monotonic()
    await limiter.acquire("s.test", lambda: budget)
    assert time.monotonic() - started >= 0.9  # still paused, as the site asked
    seen = await RateLimiter(redis, names).backoffs({"s.test": budget})  # the bucket alone
    assert seen["s.test"].factor == 0.5  # and still at half its rate


def leaf_site(host: str, pages: int, robots: str | None = None) -> Site:
    port = free_port(IPS[host])
    routes: dict[str, object] = {"/": page("home", [f"/p/{i}" for i in range(pages)])}
    routes.update({f"/p/{i}": page(f"p{i}", []) for i in range(pages)})
    if robots is not None:
        routes["/robots.txt"] = Reply(200, robots.encode(), {"Content-Type": "text/plain"})
    return Site(host, IPS[host], port, routes)  # type: ignore[arg-type]


async def test_three_consumers_together_keep_the_domains_rate(
    tmp_path: Path, amqp_url: str, prefix: str, sqlite_url: str
) -> None:
    site = leaf_site("a.test", 24)
    config = write_config(tmp_path / "d.yaml", [site], rate=2, burst=2, prefetch=8)
    settings = settings_for(amqp_url, prefix, sqlite_url, config)
    with serve(site):
        await wiring.seed(settings, load_config(settings.config_path), [site.url()])
        workers = [consumer(settings, "--burst") for _ in range(3)]
        await asyncio.to_thread(finish, *workers, timeout=120)
    times = [t for t, _ in site.requests]
    assert len(times) == 26  # robots.txt, home, 24 pages
    for window in (1.0, 2.0, 5.0):
        assert max_in_window(times, window) <= 2 * window + 2 + 1, window
    mean = (len(times) - 2) / (max(times) - min(times))  # the burst comes free
    assert 1.6 <= mean <= 2.3


async def test_robots_txt_is_obeyed_by_every_consumer_and_crawl_delay_holds(
    tmp_path: Path, amqp_url: str, prefix: str, sqlite_url: str
) -> None:
    robots = "User-agent: *\nDisallow: /p/1\nCrawl-delay: 1\n"
    site = leaf_site("a.test", 12, robots)
    config = write_config(tmp_path / "d.yaml", [site], rate=50, burst=10)
    settings = settings_for(amqp_url, prefix, sqlite_url, config)
    with serve(site):
        await wiring.seed(settings, load_config(settings.config_path), [site.url()])
        workers = [consumer(settings, "--burst") for _ in range(2)]
        await asyncio.to_thread(finish, *workers, timeout=120)
    paths = [p for _, p in site.requests]
    assert paths.count("/robots.txt") == 1  # fetched once, shared through Redis
    assert not [p for p in paths if p == "/p/1" or p.startswith("/p/1")]  # /p/1, /p/10, /p/11
    pages = sorted(t for t, p in site.requests if p != "/robots.txt")
    assert len(pages) == 10  # home and the 9 allowed pages
    # Crawl-delay: 1 across both consumers (a little slack for the workers' own scheduling).
    for window in (2.0, 4.0):
        assert max_in_window(pages, window) <= window + 1
    assert (len(pages) - 1) / (pages[-1] - pages[0]) <= 1.1

    stored = rows(sqlite_url)
    assert site.url("/p/1") not in stored  # skipped by robots.txt: counted, not stored
    assert stored[site.url("/p/2")][0] == 200


async def test_a_429_storm_slows_the_domain_and_it_recovers(
    tmp_path: Path, amqp_url: str, prefix: str, sqlite_url: str, redis: Redis
) -> None:
    site = leaf_site("a.test", 150)
    storm: dict[str, float] = {}
    original = dict(site.routes)

    def route(path: str) -> object:
        def answer(n: int) -> Reply:
            now = time.monotonic()
            if "start" in storm and now < storm["start"] + 3:
                return Reply(429)
            return original[path] if not callable(original[path]) else original[path](n)  # type: ignore[operator,return-value]

        return answer

    for path in list(site.routes):
        if path.startswith("/p/"):
            site.routes[path] = route(path)  # type: ignore[assignment]
    config = write_config(
        tmp_path / "d.yaml", [site], rate=20, burst=1, backoff_recovery=3, retry_delays=[0.5]
    )
    settings = settings_for(amqp_url, prefix, sqlite_url, config)
    with serve(site):
        await wiring.seed(settings, load_config(settings.config_path), [site.url()])
        worker = consumer(settings, "--burst")
        await until(lambda: len(site.requests) >= 30, every=0.02)
        storm["start"] = time.monotonic()
        limiter, budget = RateLimiter(redis, Names(prefix)), {"a.test": Budget(20, 1, 3)}
        backoff_seen: list[float] = []

        async def recovered() -> bool:
            backoff_seen.append((await limiter.backoffs(budget))["a.test"].factor)
            return time.monotonic() > storm["start"] + 3 and backoff_seen[-1] == 1.0

        await until(recovered, within=90, every=0.2, what="the back-off lowered, then recovered")
        await asyncio.to_thread(finish, worker, timeout=120)
    start = storm["start"]
    times = [t for t, _ in site.requests]

    def rate(a: float, b: float) -> float:
        return sum(1 for t in times if start + a <= t < start + b) / (b - a)

    # The rate the bucket allowed, not the one a loaded machine reached: the site saw at most what a
    # halved rate allows during the storm (20/s before it), and the bucket's own factor went down
    # and came back to the full rate after it (backoff_recovery 3 s).
    assert max(rate(x / 2, x / 2 + 1) for x in range(3, 5)) <= 0.5 * 20 + 1
    assert min(backoff_seen) <= 0.5 and backoff_seen[-1] == 1.0, backoff_seen
