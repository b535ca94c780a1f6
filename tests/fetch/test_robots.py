"""robots.txt against real sites on loopback: verdicts, Crawl-delay, the cache shared through Redis,
and the fetch lock only its holder can release."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml
from redis.asyncio import Redis

from crawler.config import CrawlConfig, Rules, load_config
from crawler.errors import BackendDown, Refused
from crawler.fetch.api import ApiEndpoint, ApiFetcher
from crawler.fetch.fetcher import BoundedFetcher, Headers, Response
from crawler.fetch.robots import Robots
from crawler.names import ROBOTS_ERROR_TTL, ROBOTS_TTL, Names
from crawler.worker.wiring import make_fetcher
from demo.site import Reply, Site, free_port, page, serve
from tests.support.services import run, settings_for
from tests.support.sites import IPS, write_config
from tests.support.wait import until

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


def robots(redis: Redis, prefix: str, config: CrawlConfig, fetchers: list[BoundedFetcher]) -> Robots:
    fetchers.append(make_fetcher(config))
    return Robots(redis, Names(prefix), fetchers[-1], "crawler-test/1.0")


async def anywhere(url: str) -> None:
    """A hop callback clearing every request at once: no scope, no rate to wait for."""


async def test_disallow_and_crawl_delay_give_the_verdicts(
    tmp_path: Path, site: Site, redis: Redis, prefix: str, fetchers: list[BoundedFetcher]
) -> None:
    config = config_for(tmp_path, site)
    rules = config.rules_for("a.test")
    r = robots(redis, prefix, config, fetchers)
    home = await r.check(site.url("/"), rules, anywhere)
    private = await r.check(site.url("/private/x"), rules, anywhere)
    assert home.allowed and home.crawl_delay == 2.0 and home.unavailable is None
    assert not private.allowed and private.unavailable is None
    assert site.hits("/robots.txt") == 1  # asked once, then answered from the cache


async def test_the_cache_is_shared_through_redis(
    tmp_path: Path, site: Site, redis: Redis, prefix: str, fetchers: list[BoundedFetcher]
) -> None:
    config = config_for(tmp_path, site)
    rules = config.rules_for("a.test")
    first, second = (
        robots(redis, prefix, config, fetchers),
        robots(redis, prefix, config, fetchers),
    )  # two workers
    assert (await first.check(site.url("/"), rules, anywhere)).allowed
    assert not (await second.check(site.url("/private/x"), rules, anywhere)).allowed
    assert site.hits("/robots.txt") == 1
    assert await redis.exists(Names(prefix).robots_key(f"http://a.test:{site.port}")) == 1


async def test_a_5xx_or_unreachable_robots_txt_disallows_all_for_a_while_and_a_404_allows_all(
    tmp_path: Path, redis: Redis, prefix: str, fetchers: list[BoundedFetcher]
) -> None:
    for status, allowed, ttl in (
        (503, False, ROBOTS_ERROR_TTL),
        (404, True, ROBOTS_TTL),
        (0, False, ROBOTS_ERROR_TTL),
    ):
        site = robots_site(Reply(status or 200))
        config = config_for(tmp_path, site)
        checking = robots(redis, f"{prefix}{status}", config, fetchers)
        with serve(site) if status else contextlib.nullcontext():  # 0: nothing listens there
            verdict = await checking.check(site.url("/private/x"), config.rules_for("a.test"), anywhere)
        assert verdict.allowed is allowed and verdict.refused is None
        if allowed:
            assert verdict.unavailable is None
        else:
            assert (
                verdict.unavailable is not None
                and ("503" if status else "unavailable") in verdict.unavailable
            )
        # A real answer (or a site that cannot be reached) is cached: the 5xx and the unreachable briefly.
        held = await redis.ttl(Names(f"{prefix}{status}").robots_key(f"http://a.test:{site.port}"))
        assert ttl - 10 < held <= ttl


async def test_a_robots_txt_fetch_the_guard_refused_is_no_verdict_and_is_asked_again(
    tmp_path: Path, site: Site, redis: Redis, prefix: str, fetchers: list[BoundedFetcher]
) -> None:
    allowed = config_for(tmp_path, site)
    guarded = allowed.model_copy(update={"allow_private_networks": False})
    rules, key = allowed.rules_for("a.test"), Names(prefix).robots_key(f"http://a.test:{site.port}")
    refused = await robots(redis, prefix, guarded, fetchers).check(site.url("/private/x"), rules, anywhere)
    assert not refused.allowed and refused.unavailable is None
    assert isinstance(refused.refused, Refused) and "loopback" in str(refused.refused), refused
    assert await redis.exists(key) == 0 and site.hits("/robots.txt") == 0  # nothing asked, nothing held
    # Private networks allowed now: the next check asks for robots.txt and obeys it.
    fixed = robots(redis, prefix, allowed, fetchers)
    assert not (await fixed.check(site.url("/private/x"), rules, anywhere)).allowed
    assert (await fixed.check(site.url("/open"), rules, anywhere)).allowed
    assert site.hits("/robots.txt") == 1 and await redis.ttl(key) > ROBOTS_ERROR_TTL


async def test_a_fetch_service_that_cannot_be_reached_gives_no_verdict(
    tmp_path: Path, site: Site, redis: Redis, prefix: str
) -> None:
    config = load_config(write_config(tmp_path / "d.yaml", [site], fetch="api"))
    down = ApiFetcher(config, ApiEndpoint(f"http://127.0.0.47:{free_port('127.0.0.47')}/fetch", "k"))
    try:
        checking = Robots(redis, Names(prefix), down, "crawler-test/1.0")
        # A refused connection is an outage of the service: its domain pauses, the page unspent.
        with pytest.raises(BackendDown, match="cannot reach the fetch service"):
            await checking.check(site.url("/"), config.rules_for("a.test"), anywhere)
    finally:
        await down.aclose()
    assert (
        await redis.exists(Names(prefix).robots_key(f"http://a.test:{site.port}")) == 0
    )  # asked again next time
    assert checking.cached(site.url("/")) is None


async def test_only_the_first_500_kib_of_a_robots_txt_are_parsed(
    tmp_path: Path, redis: Redis, prefix: str, fetchers: list[BoundedFetcher]
) -> None:
    padding = b"# " + b"x" * 1000 + b"\n"
    body = b"User-agent: *\nDisallow: /private\n" + padding * 600 + b"Disallow: /late\n"  # ~600 KiB
    site = robots_site(Reply(200, body, headers={"Content-Type": "text/plain"}))
    with serve(site):
        config = config_for(tmp_path, site)
        checking = robots(redis, prefix, config, fetchers)
        rules = config.rules_for("a.test")
        assert not (await checking.check(site.url("/private/x"), rules, anywhere)).allowed
        assert (await checking.check(site.url("/late"), rules, anywhere)).allowed  # past 500 KiB


ORIGIN = "http://robots.test"


class Gate:
    """A fetcher whose robots.txt arrives only when the test opens the gate."""

    def __init__(self, body: bytes) -> None:
        self.body = body
        self.started = asyncio.Event()
        self.open = asyncio.Event()
        self.fetches = 0

    async def fetch(
        self, url: str, rules: Rules, *, html_only: bool = True, headers: Headers | None = None
    ) -> Response:
        self.fetches += 1
        self.started.set()
        await self.open.wait()
        return Response(url, url, 200, httpx.Headers({"content-type": "text/plain"}), self.body)

    async def aclose(self) -> None:
        """Nothing to release."""


async def _check(robots: Robots, path: str) -> bool:
    verdict = await robots.check(f"{ORIGIN}{path}", Rules(), anywhere)
    return verdict.allowed


async def test_a_holder_whose_lock_expired_leaves_the_next_holders_lock(redis: Redis, prefix: str) -> None:
    names = Names(prefix)
    lock_key = names.robots_lock_key(ORIGIN)
    slow, fast = Gate(b"User-agent: *\nDisallow: /slow\n"), Gate(b"User-agent: *\nDisallow: /fast\n")
    first = asyncio.create_task(_check(Robots(redis, names, slow, "crawler", lock_ttl=0.3), "/slow"))
    await slow.started.wait()
    await until(lambda: redis.exists(lock_key), lambda n: n == 0, within=10, what="first lock expires")

    second = asyncio.create_task(_check(Robots(redis, names, fast, "crawler"), "/fast"))
    await fast.started.wait()
    successor = await redis.get(lock_key)
    assert successor is not None

    slow.open.set()
    assert await first is False
    assert await redis.get(lock_key) == successor, "the expired holder released its successor's lock"

    fast.open.set()
    assert await second is False
    assert await redis.exists(lock_key) == 0  # the successor released its own
    assert (slow.fetches, fast.fetches) == (1, 1)


async def test_waiters_take_over_from_a_holder_that_died(redis: Redis, prefix: str) -> None:
    names = Names(prefix)
    await redis.set(names.robots_lock_key(ORIGIN), b"a dead worker's token", px=300)
    gate = Gate(b"User-agent: *\nDisallow: /private\n")
    gate.open.set()
    robots = Robots(redis, names, gate, "crawler")
    verdicts = await asyncio.gather(_check(robots, "/private"), _check(robots, "/public"))
    assert list(verdicts) == [False, True]
    assert gate.fetches == 1  # the second waiter read what the first fetched


@pytest.mark.timeout(120)
def test_pages_robots_txt_disallows_are_skipped_in_every_view(
    tmp_path: Path, amqp_url: str, prefix: str, sqlite_url: str
) -> None:
    routes = {
        "/robots.txt": Reply(200, ROBOTS.replace(b"Crawl-delay: 2\n", b""), {"Content-Type": "text/plain"}),
        "/": page("home", ["/private/a", "/private/b", "/open"]),
        "/open": page("open", []),
    }
    site = Site("a.test", IPS["a.test"], free_port(IPS["a.test"]), routes)  # type: ignore[arg-type]
    settings = settings_for(amqp_url, prefix, sqlite_url, write_config(tmp_path / "d.yaml", [site]))
    with serve(site):
        result = run("crawler", ["crawl", site.url()], settings)
    assert result.returncode == 0, result.stderr
    head, row = result.stdout.splitlines()[:2]
    summary = dict(zip(head.split()[1:], map(int, row.split()[1:]), strict=True))
    assert (summary["ok"], summary["failed"], summary["skipped"]) == (2, 0, 2)
    status = json.loads(run("crawler", ["status", "--json"], settings).stdout)
    assert [(d["pages_ok"], d["pages_failed"]) for d in status["domains"]] == [(2, 0)]
    crawls = [
        json.loads(line)
        for line in run("crawler", ["crawls", "list", "--json"], settings).stdout.splitlines()
    ]
    counts = crawls[0]["counts"]["a.test"]
    assert (counts["ok"], counts["failed"], counts["skipped"]) == (2, 0, 2)


@pytest.mark.timeout(120)
def test_a_crawl_whose_robots_txt_was_refused_leaves_nothing_and_the_next_crawl_obeys_it(
    tmp_path: Path, amqp_url: str, prefix: str, sqlite_url: str
) -> None:
    host, ip = "a.test", IPS["a.test"]
    port = free_port(ip)
    # 1.2 MB, read up to its first 500 KiB by the crawl's own fetcher (RFC 9309 2.5), not refused.
    padding = ("# " + "x" * 1000 + "\n") * 1200
    robots_txt = f"User-agent: *\nDisallow: /private\nSitemap: http://{host}:{port}/s.xml\n{padding}"
    listed = f'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"><url><loc>http://{host}:{port}/only</loc></url></urlset>'
    routes = {
        "/robots.txt": Reply(200, robots_txt.encode(), {"Content-Type": "text/plain"}),
        "/": page("home", ["/private/x"]),
        "/private/x": page("x", []),
        "/s.xml": Reply(200, listed.encode(), {"Content-Type": "application/xml"}),
        "/only": page("only", []),
    }
    site = Site(host, ip, port, routes)  # type: ignore[arg-type]
    path = write_config(tmp_path / "d.yaml", [site], sitemaps="auto")
    settings = settings_for(amqp_url, prefix, sqlite_url, path)
    allowed = yaml.safe_load(path.read_text())
    with serve(site):
        path.write_text(yaml.safe_dump({**allowed, "allow_private_networks": False}))
        run("crawler", ["crawl", site.url()], settings)  # every fetch refused by the guard
        assert site.requests == []
        path.write_text(yaml.safe_dump(allowed))
        result = run("crawler", ["crawl", site.url()], settings)
    assert result.returncode == 0, result.stderr
    paths = [p for _, p in site.requests]
    assert {"/robots.txt", "/", "/s.xml", "/only"} <= set(paths) and "/private/x" not in paths
    assert "none in robots.txt" not in result.stderr
