"""The console's red markers in a real browser (Chromium, Playwright) against the real API: a crawl
whose field coverage fell shows one on its domain, in the crawl's view and in the domains view, naming
the field, with the alert's words; a crawl whose coverage holds shows none."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from playwright.sync_api import Browser, expect
from redis.asyncio import Redis

from crawler.frontier.crawls import CrawlState
from crawler.quality.coverage import ITEMS, fill_kind
from crawler.settings import Settings
from demo.site import Site, serve
from tests.support import console as browsing
from tests.support.api import READER, Api
from tests.support.services import settings_for
from tests.support.sites import shops, write_config

pytestmark = pytest.mark.timeout(120)
RED = "rgb(180, 35, 24)"  # console.css --bad


@pytest.fixture
def site() -> Iterator[Site]:
    (a,) = shops(products=20, hosts=["a.test"])
    with serve(a):
        yield a


@pytest.fixture
def settings(amqp_url: str, prefix: str, sqlite_url: str, tmp_path: Path, site: Site) -> Settings:
    """The shop's price expected on 90% of its pages, judged from 10 pages on."""
    expect_ = {"fields": {"price": {"present": "90%"}}, "min_sample": 10}
    return settings_for(
        amqp_url, prefix, sqlite_url, write_config(tmp_path / "d.yaml", [site], expect=expect_)
    )


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with browsing.browser() as launched:
        yield launched


def test_a_coverage_alert_is_a_red_marker_on_its_domain_in_the_crawl_and_domains_views(
    api: Api, settings: Settings, site: Site, browser: Browser
) -> None:
    with api.client() as client:
        crawl = client.post("/v1/crawls", json={"seeds": [site.url("/")]}).json()["id"]  # no worker: running
    _counted(settings, crawl, checked=20, priced=20)
    words = "price: on 20.0% of a.test's pages, below the 90.0% expected"
    with browsing.console(browser, api.base) as tab:
        tab.sign_in(READER)
        tab.go(f"crawl/{crawl}")
        row = tab.page.locator("#crawl tr[data-id='a.test']")
        expect(row.locator("[data-col='ok']")).to_be_visible()
        expect(row.locator("[data-col='coverage']")).to_have_count(0)  # 100% of 20 pages: no alert

        _counted(settings, crawl, checked=80, priced=0)  # the template changed: 20 of 100 priced
        marker = row.locator("[data-col='coverage']")
        expect(marker).to_have_text("coverage alert: price")
        expect(marker).to_have_attribute("title", words)
        expect(row.locator("[data-col='coverage-why']")).to_have_text(words)
        assert marker.evaluate("(e) => getComputedStyle(e).backgroundColor") == RED
        tab.screenshot("coverage-alert-crawl-1280")

        tab.go("domains")
        row = tab.page.locator("#domains tr[data-id='a.test']")
        expect(row.locator("[data-col='coverage']")).to_have_text("coverage alert: price")
        expect(row.locator("[data-col='coverage-why']")).to_have_text(f"crawl {crawl}: {words}")
        assert (
            row.locator("[data-col='coverage']").evaluate("(e) => getComputedStyle(e).backgroundColor") == RED
        )
        assert "alerted" in (row.get_attribute("class") or "")
        tab.screenshot("coverage-alert-domains-1280")
        assert tab.outside() == [], tab.outside()
        assert tab.errors == [], tab.errors
    with api.client(READER) as client:
        alerts = client.get("/v1/quality/alerts").json()["alerts"]
    assert alerts == [
        {
            "crawl": crawl,
            "domain": "a.test",
            "kind": "below_expected",
            "pages": "all",
            "subject": "price",
            "message": words,
        }
    ]


def _counted(settings: Settings, crawl: str, *, checked: int, priced: int) -> None:
    """Count `checked` pages of a.test checked in `crawl`, `priced` of them with a price, as workers do."""

    async def count() -> None:
        redis = Redis.from_url(settings.redis_url)
        try:
            kinds = {ITEMS: checked, fill_kind("", "title"): checked, fill_kind("", "price"): priced}
            await CrawlState(redis, settings.names).count(crawl, {("a.test", k): n for k, n in kinds.items()})
        finally:
            await redis.aclose()

    # An event loop of its own thread: Playwright's sync API owns this one's.
    with ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, count()).result()
