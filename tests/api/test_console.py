"""The web console in a real browser (Debian's Chromium, Playwright) against the real API, workers and
services: sign in, start and watch a crawl, pause and resume a domain, replay a dead letter."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Coroutine, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import aio_pika
import pytest
from playwright.sync_api import Browser, expect
from redis.asyncio import Redis

from crawler.config import load_config
from crawler.fetch.robots import origin_of
from crawler.frontier import exchanges
from crawler.gateway.proxies import ProxiesConfig
from crawler.gateway.report import Reporter
from crawler.names import HEADER_DOMAIN, HEADER_ERROR, HEADER_REASON, Names
from crawler.settings import Settings
from crawler.sink.crawls import CrawlStore
from crawler.sink.database import Database
from demo.site import Reply, Site, serve
from tests.support import console as browsing
from tests.support.api import ADMIN, READER, Api
from tests.support.crawls import consumer, finish
from tests.support.sites import shops, slow
from tests.support.wait import wait_for

pytestmark = pytest.mark.timeout(240)
T = TypeVar("T")


@pytest.fixture
def site() -> Iterator[Site]:
    (a,) = shops(products=20, hosts=["a.test"])
    with serve(a):
        yield a


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with browsing.browser() as launched:
        yield launched


def test_a_wrong_token_is_told_and_a_read_token_sees_no_button_that_needs_admin(
    api: Api, settings: Settings, site: Site, browser: Browser
) -> None:
    _run(_gateway_reports(settings))
    hostile = '<img src="/x" onerror="document.title=1">'
    with api.client() as client:
        client.post("/v1/crawls", json={"seeds": [site.url("/")], "label": hostile}).raise_for_status()
    with browsing.console(browser, api.base) as tab:
        tab.sign_in("wrong-token-0123456789abcdef")
        expect(tab.page.get_by_role("alert")).to_contain_text("refused")
        expect(tab.page.locator("#signin")).to_be_visible()

        # By keyboard alone: the field has focus after a refusal, Enter signs in.
        tab.page.keyboard.type(READER)
        tab.page.keyboard.press("Enter")
        expect(tab.page.locator("#crawls")).to_be_visible()
        expect(tab.page.get_by_text("dash (read)")).to_be_visible()
        # What a person or a site wrote is shown as text, never run as markup.
        expect(tab.page.locator("#crawls [data-col='label']")).to_have_text(hostile)
        expect(tab.page.locator("#crawls img")).to_have_count(0)
        for section in ("crawls", "domains", "dead", "fleet"):
            tab.go(section)
            expect(tab.page.locator(f"#{section}")).to_be_visible()
            for name in ("Start crawl", "Cancel", "Pause", "Resume", "Replay", "Delete"):
                expect(tab.page.get_by_role("button", name=name)).to_have_count(0)
        gateway = tab.page.locator("#fleet .gateway")
        expect(gateway).to_contain_text("1 healthy, 1 cooling, 1 dead")
        expect(gateway).to_contain_text("e1: cooling for a.test")
        expect(gateway.locator("meter")).to_have_attribute("value", "2.5")
        # The token lives in this tab's session only, never in a URL.
        assert READER not in tab.page.url
        assert not [u for u in tab.requests if READER in u]
        tab.page.reload()  # still signed in: the tab's session keeps the token
        expect(tab.page.locator("#fleet")).to_be_visible()
        tab.page.get_by_role("button", name="Sign out").click()
        expect(tab.page.locator("#signin")).to_be_visible()
        expect(tab.page.get_by_role("navigation")).to_be_hidden()
        expect(tab.page.get_by_role("button", name="Sign out")).to_be_hidden()
        assert tab.page.evaluate("() => sessionStorage.length") == 0
        assert tab.outside() == [], tab.outside()
        assert _only_refusals(tab.errors), tab.errors


def test_an_admin_starts_a_crawl_from_the_form_and_watches_it_finish(
    api: Api, settings: Settings, site: Site, browser: Browser
) -> None:
    slow(site, 0.05)
    # One page its robots.txt forbids: counted once, as skipped, in every view.
    site.routes["/robots.txt"] = Reply(
        200, b"User-agent: *\nDisallow: /product/20\n", {"Content-Type": "text/plain"}
    )
    worker = consumer(settings)
    try:
        with browsing.console(browser, api.base) as tab:
            tab.sign_in(ADMIN)
            page = tab.page
            page.get_by_label("Seeds").fill(site.url("/"))
            page.get_by_label("Label").fill("from the console")
            page.get_by_label("Max depth").fill("3")
            page.get_by_role("button", name="Start crawl").click()
            crawl = page.locator("#crawl")
            expect(crawl).to_be_visible()
            expect(crawl).to_contain_text("from the console")
            # Its counts move while it runs: a screenshot of it under way, at both widths.
            ok = crawl.locator("tr[data-id='a.test'] [data-col='ok']")
            expect(ok).not_to_have_text("0", timeout=60_000)
            tab.screenshot("crawl-running-1280")
            page.set_viewport_size(browsing.PHONE)  # type: ignore[arg-type]
            tab.screenshot("crawl-running-390")
            page.set_viewport_size(browsing.DESKTOP)  # type: ignore[arg-type]
            expect(crawl.locator("[data-col='state']").first).to_have_text("finished", timeout=90_000)
            expect(ok).to_have_text("20")
            expect(crawl.locator("tr[data-id='a.test'] [data-col='failed']")).to_have_text("1")
            expect(crawl.locator("tr[data-id='a.test'] [data-col='skipped']")).to_have_text("1")
            expect(crawl.locator("progress")).to_have_attribute("value", "22")  # skipped is done too
            expect(crawl.locator("svg polyline").first).to_be_attached()

            tab.go("crawls")
            row = page.locator("#crawls tr[data-id]").first
            expect(row.locator("[data-col='state']")).to_have_text("finished")
            expect(row.locator("[data-col='skipped']")).to_have_text("1")
            tab.go("domains")
            expect(page.locator("#domains tr[data-id='a.test']")).to_be_visible()
            tab.screenshot("domains-1280")
            page.set_viewport_size(browsing.PHONE)  # type: ignore[arg-type]
            tab.screenshot("domains-390")
            assert tab.outside() == [], tab.outside()
            assert tab.errors == [], tab.errors
    finally:
        worker.terminate()
        finish(worker)


def test_pausing_a_domain_stops_its_consumer_and_resuming_starts_it(
    api: Api, settings: Settings, site: Site, browser: Browser
) -> None:
    slow(site, 0.2)
    worker = consumer(settings, "--prefetch", "1")
    try:
        with browsing.console(browser, api.base) as tab, api.client() as client:
            client.post("/v1/crawls", json={"seeds": [site.url("/")]}).raise_for_status()
            wait_for(lambda: len(site.requests) >= 3, within=60, what="the crawl under way")
            tab.sign_in(ADMIN)
            tab.go("domains")
            row = tab.page.locator("#domains tr[data-id='a.test']")
            row.get_by_role("button", name="Pause").click()
            expect(row.locator("[data-col='paused']")).to_have_text("yes")
            wait_for(lambda: _queue(settings)[1] == 0, what="the consumer off the queue")
            served = len(site.requests)
            # The console shows nothing in flight once the broker's statistics catch up (every 5 s).
            expect(row.locator("[data-col='unacked']")).to_have_text("0", timeout=30_000)
            assert len(site.requests) <= served + 1  # at most the one fetch under way when it paused
            assert _queue(settings)[0] > 0  # the rest waits in the queue, untouched

            row.get_by_role("button", name="Resume").click()
            expect(row.locator("[data-col='paused']")).to_have_text("no")
            wait_for(lambda: _queue(settings)[1] == 1, what="its consumer back")
            wait_for(lambda: len(site.requests) > served + 1, within=60, what="fetches again")
            assert tab.errors == [], tab.errors
    finally:
        worker.terminate()
        finish(worker)


def test_a_dead_letter_is_replayed_from_the_console(
    api: Api, settings: Settings, site: Site, browser: Browser
) -> None:
    site.routes["/product/3"] = Reply(503, b"down")  # retried, then set aside as dead
    with api.client() as client:
        client.post("/v1/crawls", json={"seeds": [site.url("/")]}).raise_for_status()
    finish(consumer(settings, "--burst"))
    fetched = site.hits("/product/3")
    with browsing.console(browser, api.base) as tab:
        tab.sign_in(ADMIN)
        tab.go("dead")
        group = tab.page.locator("#dead tr[data-id='a.test|transient']")
        expect(group.locator("[data-col='count']")).to_have_text("1")
        group.get_by_role("button", name="Replay").click()
        expect(tab.page.get_by_role("status").filter(has_text="Replayed 1")).to_be_visible()
        expect(group).to_have_count(0)
        assert tab.errors == [], tab.errors
    site.routes["/product/3"] = site.routes["/product/4"]
    finish(consumer(settings, "--burst"))
    assert site.hits("/product/3") == fetched + 1  # replayed: fetched again, and stored this time


def test_every_action_is_on_screen_or_in_a_table_that_shows_it_scrolls_at_both_widths(
    api: Api, settings: Settings, site: Site, browser: Browser
) -> None:
    refused = "the fetch was refused: 127.0.0.71 is a private network address; set allow_private_networks"
    why = f"robots.txt unavailable: {refused} in domains.yaml to crawl it ({refused})"
    _run(_robots_unavailable(settings, site.url("/"), why))
    _run(_dead_letter(settings, site.url("/gone"), "a.test"))  # status 0: the connection failed
    with api.client() as client:
        created = client.post("/v1/crawls", json={"seeds": [site.url("/")], "label": "left running"})
        running = created.json()["id"]  # no worker: it stays running, with its Cancel button
        created = client.post("/v1/crawls", json={"seeds": [site.url("/")], "label": "stopped"})
        crawl = created.json()["id"]
    # Stopped as Ctrl-C or a refusing fetch service stops it: still open, so it can be cancelled.
    _interrupt(settings, crawl)
    views = {
        "crawls": "#crawls tr[data-id] button",
        f"crawl/{crawl}": "#crawl-actions button",
        "domains": "#domains tr[data-id='a.test'] button",
        "dead": "#dead tr[data-id] button",
        "fleet": "#fleet td.empty",
    }
    with browsing.console(browser, api.base) as tab:
        tab.sign_in(ADMIN)
        page = tab.page
        for size in browsing.WIDTHS:
            page.set_viewport_size(size)  # type: ignore[arg-type]
            for view, ready in views.items():
                tab.go(view)
                expect(page.locator(ready).first).to_be_visible()
                if view == "dead":
                    page.get_by_role("button", name="Letters").click()
                    expect(page.locator("#dead-letters [data-col='status']")).to_have_text("no answer")
                assert tab.out_of_reach() == [], (size, view, tab.out_of_reach())
                tab.screenshot(f"reach-{view.split('/')[0]}-{size['width']}")
        # An interrupted crawl stands out from a running one, and is cancelled like one.
        tab.go("crawls")
        labels = {c: page.locator(f"#crawls tr[data-id='{c}'] [data-col='state']") for c in (crawl, running)}
        expect(labels[crawl]).to_have_text("interrupted")
        expect(labels[crawl]).to_have_attribute("title", re.compile("a later crawl of its leftovers"))
        colours = {c: label.evaluate("(e) => getComputedStyle(e).color") for c, label in labels.items()}
        assert colours[crawl] != colours[running], colours
        tab.go(f"crawl/{crawl}")
        page.once("dialog", lambda dialog: dialog.accept())
        page.locator("#crawl-actions").get_by_role("button", name="Cancel").click()
        expect(page.locator("#crawl [data-col='state']")).to_have_text("cancelled")
        expect(page.locator("#crawl-actions button")).to_have_count(0)
        # At 1280 px the long robots.txt error is cut (whole in its title); the columns after it stay.
        row = page.locator("#domains tr[data-id='a.test']")
        tab.go("domains")
        expect(row.locator("[data-col='robots']")).to_have_attribute("title", f"unavailable: {why}")
        # Measured in one go: the table is drawn again every 3 s.
        right = row.evaluate(
            "(tr) => Math.max(...['paused', 'workers'].map((c) => "
            "tr.querySelector(`[data-col=${c}]`).getBoundingClientRect().right))"
        )
        assert right <= browsing.DESKTOP["width"], right
        # An enabled button never looks like the disabled ones (Newest and Older on the first page).
        looks = []
        for view in ("crawls", "dead"):
            tab.go(view)
            expect(page.locator(views[view]).first).to_be_visible()
            looks += page.evaluate(_LOOKS)
        disabled = {tuple(look) for enabled, look in looks if not enabled}
        assert disabled, looks
        alike = [look for on, look in looks if on and (tuple(look) in disabled or look[0] != "1")]
        assert alike == [], looks
        assert tab.errors == [], tab.errors


# [enabled, [opacity, color, border style]] of each visible button in the page's main part.
_LOOKS = """() => {
  return [...document.querySelectorAll("main button")].filter((b) => b.offsetParent).map((b) => {
    const s = getComputedStyle(b);
    return [!b.disabled, [s.opacity, s.color, s.borderTopStyle]];
  });
}"""


def test_an_unreachable_api_is_said_in_words_and_the_last_numbers_stay(
    api: Api, settings: Settings, site: Site, browser: Browser
) -> None:
    with browsing.console(browser, api.base, browsing.PHONE) as tab:
        tab.sign_in(READER)
        tab.go("domains")
        page = tab.page
        depth = page.locator("#domains tr[data-id='a.test'] [data-col='depth']")
        expect(depth).to_have_text("0")
        page.route("**/v1/**", lambda route: route.abort("connectionrefused"))
        banner = page.get_by_role("status")
        expect(banner).to_contain_text(f"the API at {api.base} is unreachable")
        expect(banner).to_contain_text("last ones read")
        expect(depth).to_have_text("0")  # still shown
        page.unroute("**/v1/**")
        expect(banner).to_be_hidden()


def _interrupt(settings: Settings, crawl: str) -> None:
    """Mark `crawl` interrupted in its record, as `crawler crawl` does on Ctrl-C."""
    store_db = Database(settings.database_url)
    store = CrawlStore(store_db)
    try:
        assert store.end(crawl, "interrupted", {})
    finally:
        store_db.close()


def _run(work: Coroutine[Any, Any, T]) -> T:
    """Run `work` on an event loop of its own thread: Playwright's sync API owns this one's."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, work).result()


def _queue(settings: Settings) -> tuple[int, int]:
    """(ready messages, consumers) of a.test's queue, from the broker itself (the management API lags)."""

    async def declare() -> tuple[int, int]:
        async with await aio_pika.connect(settings.amqp_url) as connection:
            channel = await connection.channel()
            queue = await channel.declare_queue(Names(settings.prefix).domain_queue("a.test"), passive=True)
            result = queue.declaration_result
            return result.message_count or 0, result.consumer_count or 0

    return _run(declare())


async def _robots_unavailable(settings: Settings, url: str, why: str) -> None:
    """The fleet's cached robots.txt of `url`'s origin: unavailable, for `why`."""
    redis = Redis.from_url(settings.redis_url)
    try:
        key = Names(settings.prefix).robots_key(origin_of(url))
        await redis.set(key, json.dumps({"unavailable": why}), ex=600)
    finally:
        await redis.aclose()


async def _dead_letter(settings: Settings, url: str, domain: str) -> None:
    """One letter in the dead queue: `url` of `domain`, whose connection failed (no HTTP status)."""
    names = Names(settings.prefix)
    async with await aio_pika.connect(settings.amqp_url) as connection:
        channel = await connection.channel(publisher_confirms=True)
        await exchanges.declare(channel, exchanges.topology(load_config(settings.config_path), names))
        headers = {HEADER_REASON: "transient", HEADER_DOMAIN: domain, HEADER_ERROR: "connection refused"}
        message = aio_pika.Message(json.dumps({"v": 1, "url": url}).encode(), headers=headers)
        await channel.default_exchange.publish(message, routing_key=names.dead)


async def _gateway_reports(settings: Settings) -> None:
    """A crawler-gateway replica's report: e0 dead, e1 cooling for a.test, e2 healthy, a key 2.5 of 10."""
    names = Names(settings.prefix)
    proxies = ProxiesConfig.model_validate(
        {
            "exits": [
                {"id": e, "url": f"http://127.0.0.41:{i + 1}"} for i, e in enumerate(["e0", "e1", "e2"])
            ],
            "keys": [{"id": "paid", "key_env": "K", "budget": 10}],
        }
    )
    redis = Redis.from_url(settings.redis_url)
    try:
        await redis.set(names.gw_dead_key("e0"), "1", px=60_000)
        await redis.set(names.gw_cool_key("e1", "a.test"), "1", px=60_000)
        await redis.incrbyfloat(names.gw_credits_key("paid"), 2.5)
        await Reporter(redis, names, lambda: proxies, ttl=120).publish()
    finally:
        await redis.aclose()


def _only_refusals(errors: list[str]) -> bool:
    """Chromium logs a failed request (the wrong token's 401) as a console error; nothing else may."""
    return all("401" in e for e in errors)
