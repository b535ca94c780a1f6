"""robots.txt against real sites on loopback: verdicts, Crawl-delay, the cache shared through Redis."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from redis.asyncio import Redis

from crawler.config import CrawlConfig, load_config
from crawler.fetch.fetcher import FollowingFetcher
from crawler.fetch.robots import Robots
from crawler.names import Names
from crawler.worker.wiring import make_fetcher
from demo.site import Reply, Site, free_port, page, serve
from tests.support.sites import IPS, write_config

ROBOTS = b"User-agent: *\nDisallow: /private\nCrawl-delay: 2\n"


def robots_site(robots: Reply) -> Site:
    routes = {"/robots.txt": robots, "/": page("home", ["/private/x"]), "/private/x": page("x", [])}
    return Site("a.test", IPS["a.test"], free_port(IPS["a.test"]), routes)  # type: ignore[arg-type]


@pytest.fixture
def site() -> Iterator[Site]:
    site = robots_site(Reply(200, ROBOTS, headers={"Content-Type": "text/plain"}))
    with serve(site):
        yield site


def config_for(tmp_path: Path, site: Site) -> CrawlConfig:
    return load_config(write_config(tmp_path / "d.yaml", [site]))


def robots(redis: Redis, prefix: str, config: CrawlConfig, fetchers: list[FollowingFetcher]) -> Robots:
    fetchers.append(make_fetcher(config))
    return Robots(redis, Names(prefix), fetchers[-1], "crawler-test/1.0")


async def no_wait() -> float:
    return 0.0


def anywhere(url: str) -> None:
    return None


async def test_disallow_and_crawl_delay_give_the_verdicts(
    tmp_path: Path, site: Site, redis: Redis, prefix: str, fetchers: list[FollowingFetcher]
) -> None:
    config = config_for(tmp_path, site)
    rules = config.rules_for("a.test")
    r = robots(redis, prefix, config, fetchers)
    home = await r.check(site.url("/"), rules, anywhere, no_wait)
    private = await r.check(site.url("/private/x"), rules, anywhere, no_wait)
    assert home.allowed and home.crawl_delay == 2.0 and home.unavailable is None
    assert not private.allowed and private.unavailable is None
    assert site.hits("/robots.txt") == 1  # asked once, then answered from the cache


async def test_the_cache_is_shared_through_redis(
    tmp_path: Path, site: Site, redis: Redis, prefix: str, fetchers: list[FollowingFetcher]
) -> None:
    config = config_for(tmp_path, site)
    rules = config.rules_for("a.test")
    first, second = (
        robots(redis, prefix, config, fetchers),
        robots(redis, prefix, config, fetchers),
    )  # two workers
    assert (await first.check(site.url("/"), rules, anywhere, no_wait)).allowed
    assert not (await second.check(site.url("/private/x"), rules, anywhere, no_wait)).allowed
    assert site.hits("/robots.txt") == 1
    assert await redis.exists(Names(prefix).robots_key(f"http://a.test:{site.port}")) == 1


async def test_a_5xx_robots_txt_makes_the_site_unavailable_and_a_404_allows_all(
    tmp_path: Path, redis: Redis, prefix: str, fetchers: list[FollowingFetcher]
) -> None:
    for status, allowed in ((503, False), (404, True)):
        site = robots_site(Reply(status))
        with serve(site):
            config = config_for(tmp_path, site)
            verdict = await robots(redis, f"{prefix}{status}", config, fetchers).check(
                site.url("/private/x"), config.rules_for("a.test"), anywhere, no_wait
            )
        assert verdict.allowed is allowed
        if status == 503:
            assert verdict.unavailable is not None and "503" in verdict.unavailable
        else:
            assert verdict.unavailable is None
