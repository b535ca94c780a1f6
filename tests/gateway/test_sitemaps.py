"""Sitemaps read through crawler-gateway: a file up to the sitemaps.org cap passes through it as it
comes, within the one limit both programs read."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from crawler.config import Rules, load_config
from crawler.fetch.api import STREAM_MOST_BODY
from crawler.sink.database import Database
from crawler.sink.sitemaps import SitemapStore
from crawler.worker import wiring
from crawler.worker.sitemaps.fetching import rules_for_sitemaps
from tests.support.crawls import stored
from tests.support.exits import KEY, ForwardProxy, Start
from tests.support.fresh import Page, fresh_site, html, serving
from tests.support.services import settings_for


def test_the_gateway_serves_every_byte_a_worker_asks_of_a_sitemap() -> None:
    assert rules_for_sitemaps(Rules()).max_body_bytes <= STREAM_MOST_BODY


@pytest.mark.timeout(120)
async def test_a_12_mb_sitemap_is_read_through_the_gateway(
    tmp_path: Path, amqp_url: str, prefix: str, sqlite_url: str, proxies: list[ForwardProxy], gateway: Start
) -> None:
    site = fresh_site("a.test", "127.0.0.21")
    site.pages["/"] = Page(html("home", "home"))
    listed = [f"/only/{i}" for i in range(3)]
    for path in listed:
        site.pages[path] = Page(html(path, path))
    # 12 MB, more than the gateway holds whole: entries no crawl can use, then those it can.
    unusable = ("<url><loc>ftp://a.test/" + "x" * 1000 + "</loc></url>") * 12_000
    entries = "".join(f"<url><loc>{site.url(p)}</loc></url>" for p in listed)
    site.pages["/sitemap.xml"] = Page(
        '<?xml version="1.0"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
        f"{unusable}{entries}</urlset>",
        content_type="application/xml",
    )
    base = await gateway(proxies)
    config_path = tmp_path / "d.yaml"
    config_path.write_text(
        yaml.safe_dump(
            {
                "defaults": {"retry_delays": [0.2], "rate": 100, "burst": 10, "fetch": "api"},
                "resolve": {site.host: site.ip},
                "domains": {site.host: {}},
            }
        )
    )
    settings = replace(
        settings_for(amqp_url, prefix, sqlite_url, config_path),
        fetch_api_url=f"{base}/fetch",
        fetch_api_key=KEY,
    )
    with serving(site):
        await wiring.consume(settings, load_config(config_path), burst=True, seeds=[site.url()])
    store_db = Database(sqlite_url)
    store = SitemapStore(store_db)
    try:
        read = store.files(site.host)
    finally:
        store_db.close()
    assert [(f.outcome, f.counts["discovered"]) for f in read] == [("read", 3)], read
    assert {url for url, _, _ in stored(sqlite_url)} == {site.url(), *(site.url(p) for p in listed)}
