"""A visit's extraction against a real site on loopback: required fields, parse hooks, encodings."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from redis.asyncio import Redis

from crawler.config import load_config
from crawler.fetch.fetcher import BoundedFetcher
from crawler.monitor.metrics import Metrics
from crawler.names import Names
from crawler.parse.extract import compile_fields
from crawler.parse.reading import PARSE_HOOK
from crawler.visited import PageTask
from crawler.worker import wiring
from crawler.worker.live import LiveConfig
from crawler.worker.wiring import make_fetcher
from demo.site import Reply, Site, free_port, page, serve
from tests.parse import hooks
from tests.support.sites import IPS, write_config
from tests.support.visits import Observed


@pytest.fixture
def site() -> Iterator[Site]:
    routes = {
        "/robots.txt": Reply(200, b"", headers={"Content-Type": "text/plain"}),
        "/": page("Home", ["/a"], price="1.299,00 \u20ac"),
        "/product/1": page("Lamp", ["/b"], price="$12.50"),
        "/no-price": page("Bare", ["/c"]),
    }
    site = Site("a.test", IPS["a.test"], free_port(IPS["a.test"]), routes)  # type: ignore[arg-type]
    with serve(site):
        yield site


async def visit(
    tmp_path: Path,
    site: Site,
    redis: Redis,
    prefix: str,
    fetchers: list[BoundedFetcher],
    path: str,
    rules: dict[str, Any],
    timeout: float = 10,
) -> Observed:
    file = write_config(tmp_path / "d.yaml", [site], timeout=timeout)
    raw = yaml.safe_load(file.read_text())
    raw["domains"]["a.test"] = rules
    file.write_text(yaml.safe_dump(raw))
    config = load_config(file)
    fetchers.append(make_fetcher(config))
    visitor = wiring.visitor(LiveConfig(config), redis, Names(prefix), fetchers[-1])
    task = PageTask(url=site.url(path), domain="a.test", depth=0, attempts=1)
    domain_rules = config.rules_for("a.test")
    return Observed(await visitor.visit(task, domain_rules, compile_fields(domain_rules.extract)))


PRICE = {"extract": {"title": "h1", "price": {"css": ".price", "type": "price", "required": True}}}


async def test_typed_fields_land_in_the_row(
    tmp_path: Path, site: Site, redis: Redis, prefix: str, fetchers: list[BoundedFetcher]
) -> None:
    outcome = await visit(tmp_path, site, redis, prefix, fetchers, "/", PRICE)
    assert outcome.failure is None and outcome.record.error is None
    assert outcome.record.data == {"title": "Home", "price": 1299.0}


async def test_a_missing_required_field_is_a_visible_failure(
    tmp_path: Path, site: Site, redis: Redis, prefix: str, fetchers: list[BoundedFetcher]
) -> None:
    outcome = await visit(tmp_path, site, redis, prefix, fetchers, "/no-price", PRICE)
    assert outcome.failure is not None and not outcome.failure.transient
    assert outcome.record.error == "extraction: required field 'price' missing"
    assert outcome.record.data == {"title": "Bare", "price": None}  # the row keeps what was found
    assert outcome.links == [site.url("/c")]  # its links are still followed
    assert outcome.extraction_failures == ("price",)
    metrics = Metrics(process=False)
    metrics.observe_visit("a.test", outcome, outcome.record.status_code)
    value = metrics.registry.get_sample_value(
        "crawler_extraction_failures_total", {"domain": "a.test", "field": "price"}
    )
    assert value == 1


async def test_a_hook_adds_fields_and_links(
    tmp_path: Path, site: Site, redis: Redis, prefix: str, fetchers: list[BoundedFetcher]
) -> None:
    rules = {
        **PRICE,
        "parse": "tests.parse.hooks:plain_dict",
        "parsers": [{"match": "^/product/", "parse": "tests.parse.hooks:fields_and_links"}],
    }
    outcome = await visit(tmp_path, site, redis, prefix, fetchers, "/product/1", rules)
    assert outcome.failure is None, outcome.record.error
    assert outcome.record.data == {
        "title": "Lamp",
        "price": 12.5,
        "heading": "Lamp",
        "status": 200,
        "seen_price": 12.5,  # the hook sees the declarative fields
    }
    assert outcome.links == [site.url("/b"), site.url("/from-hook"), "https://elsewhere.test/x"]
    # Other pages take the domain's hook.
    outcome = await visit(tmp_path, site, redis, prefix, fetchers, "/", rules)
    assert outcome.record.data is not None
    assert outcome.record.data["content_type"] == "text/html; charset=utf-8"


async def test_a_hook_can_ask_for_beautifulsoup(
    tmp_path: Path, site: Site, redis: Redis, prefix: str, fetchers: list[BoundedFetcher]
) -> None:
    rules = {"parse": "tests.parse.hooks:with_soup"}
    outcome = await visit(tmp_path, site, redis, prefix, fetchers, "/", rules)
    assert outcome.record.data == {"links_in_soup": 1, "when": "2024-03-12"}


async def test_a_hook_that_raises_fails_the_page_with_its_redacted_traceback(
    tmp_path: Path, site: Site, redis: Redis, prefix: str, fetchers: list[BoundedFetcher]
) -> None:
    outcome = await visit(
        tmp_path, site, redis, prefix, fetchers, "/", {**PRICE, "parse": "tests.parse.hooks:raises"}
    )
    assert outcome.failure is not None and not outcome.failure.transient
    error = outcome.record.error or ""
    assert error.startswith("parse hook tests.parse.hooks:raises raised ValueError: cannot read")
    assert "Traceback" in error and 'tests/parse/hooks.py", line' in error
    assert "hunter2" not in error and "bot:***@db.test" in error
    assert outcome.record.data == {"title": "Home", "price": 1299.0}
    assert outcome.extraction_failures == (PARSE_HOOK,)


@pytest.mark.parametrize("hook", ["slow", "slow_async"])
async def test_a_slow_hook_is_bounded_by_the_page_deadline(
    tmp_path: Path, site: Site, redis: Redis, prefix: str, fetchers: list[BoundedFetcher], hook: str
) -> None:
    started = time.monotonic()
    try:
        outcome = await visit(
            tmp_path, site, redis, prefix, fetchers, "/", {"parse": f"tests.parse.hooks:{hook}"}, timeout=1
        )
    finally:
        hooks.released.set()  # the thread of the sync hook runs on; let it end
    assert time.monotonic() - started < 20  # far short of the hook's 30 s, however loaded the machine
    assert outcome.failure is not None and not outcome.failure.transient
    assert "did not return within" in (outcome.record.error or "")


async def test_a_hook_returning_nonsense_fails_the_page(
    tmp_path: Path, site: Site, redis: Redis, prefix: str, fetchers: list[BoundedFetcher]
) -> None:
    outcome = await visit(
        tmp_path, site, redis, prefix, fetchers, "/", {"parse": "tests.parse.hooks:wrong_type"}
    )
    assert "returned int" in (outcome.record.error or "")
