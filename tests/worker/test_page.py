"""One page's visit against a real site on loopback: robots.txt, the fetch, extraction, failures."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from redis.asyncio import Redis

from crawler.config import CrawlConfig, load_config
from crawler.fetch.fetcher import BoundedFetcher
from crawler.names import Names
from crawler.parse.extract import compile_fields
from crawler.visited import PageTask
from crawler.worker import wiring
from crawler.worker.live import LiveConfig
from crawler.worker.page import DISALLOWED
from crawler.worker.wiring import make_fetcher
from demo.site import Reply, Site, free_port, page, serve
from tests.support.sites import IPS, write_config
from tests.support.visits import Observed

TEXT = {"Content-Type": "text/plain"}


@pytest.fixture
def site() -> Iterator[Site]:
    routes = {
        "/robots.txt": Reply(
            200, b"User-agent: *\nDisallow: /private\n", headers={"Content-Type": "text/plain"}
        ),
        "/": page("Home", ["/a", "/b"], price="9.99"),
        "/private/x": page("secret", []),
        "/busy": Reply(503, headers={"Retry-After": "1"}),
    }
    site = Site("a.test", IPS["a.test"], free_port(IPS["a.test"]), routes)  # type: ignore[arg-type]
    with serve(site):
        yield site


async def visit(
    tmp_path: Path, site: Site, redis: Redis, prefix: str, fetchers: list[BoundedFetcher], path: str
) -> Observed:
    config: CrawlConfig = load_config(write_config(tmp_path / "d.yaml", [site]))
    fetchers.append(make_fetcher(config))
    visitor = wiring.visitor(LiveConfig(config), redis, Names(prefix), fetchers[-1])
    task = PageTask(url=site.url(path), domain="a.test", depth=0, attempts=1)
    rules = config.rules_for("a.test")
    return Observed(await visitor.visit(task, rules, compile_fields(rules.extract)))


async def test_a_page_is_fetched_and_extracted(
    tmp_path: Path, site: Site, redis: Redis, prefix: str, fetchers: list[BoundedFetcher]
) -> None:
    outcome = await visit(tmp_path, site, redis, prefix, fetchers, "/")
    assert outcome.failure is None
    assert outcome.record.status_code == 200 and outcome.record.error is None
    assert outcome.record.data == {"title": "Home", "price": "9.99"}
    assert sorted(outcome.links) == [site.url("/a"), site.url("/b")]
    assert outcome.fetched is not None and outcome.fetched.nbytes > 0 and outcome.fetched.error is None


async def test_robots_txt_keeps_a_page_from_being_fetched(
    tmp_path: Path, site: Site, redis: Redis, prefix: str, fetchers: list[BoundedFetcher]
) -> None:
    outcome = await visit(tmp_path, site, redis, prefix, fetchers, "/private/x")
    assert outcome.failure is not None and not outcome.failure.transient
    assert outcome.record.error == DISALLOWED and outcome.fetched is None
    assert site.hits("/private/x") == 0


async def test_a_503_is_a_transient_failure(
    tmp_path: Path, site: Site, redis: Redis, prefix: str, fetchers: list[BoundedFetcher]
) -> None:
    outcome = await visit(tmp_path, site, redis, prefix, fetchers, "/busy")
    assert outcome.failure is not None and outcome.failure.transient
    assert outcome.record.status_code == 503 and outcome.links == ()
    assert outcome.fetched is not None
