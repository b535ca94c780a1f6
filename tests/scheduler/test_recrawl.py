"""Refreshing a crawled site against the real services: conditional requests, change detection by
signature, gone pages, adaptive intervals, and the scheduler's claims."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
import yaml
from redis.asyncio import Redis

from crawler import connections
from crawler.config import CrawlConfig, load_config
from crawler.scheduler.running import scheduling
from crawler.settings import Settings
from crawler.sink import sql
from crawler.worker import wiring
from tests.support.fresh import FreshSite, Page, fresh_site, html, serving
from tests.support.services import settings_for

HOUR = 3600.0


def rows(database_url: str) -> dict[str, dict[str, Any]]:
    engine = sa.create_engine(sql.engine_url(database_url))
    try:
        with engine.connect() as conn:
            found = conn.execute(sa.select(sql.Page.__table__)).mappings().all()
            return {r["url"]: dict(r) for r in found}
    finally:
        engine.dispose()


def configure(path: Path, site: FreshSite, **recrawl: Any) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "defaults": {"retry_delays": [0.2], "rate": 200, "burst": 50},
                "resolve": {site.host: site.ip},
                "allow_private_networks": True,
                "domains": {site.host: {"extract": {"heading": "h1"}, "recrawl": recrawl}},
            }
        )
    )
    return path


async def refresh_all(settings: Settings, config: CrawlConfig) -> dict[str, int]:
    """`crawler recrawl --all`, then the workers until the queues are empty."""
    async with (
        connections.broker(settings.amqp_url, "test scheduler") as connection,
        scheduling(settings, lambda: config, connection) as scheduler,
    ):
        await scheduler.make_due(sorted(config.domains))
        published = await scheduler.publish_due(sorted(config.domains))
    await wiring.consume(settings, config, burst=True)
    return published


@pytest.mark.timeout(120)
async def test_a_second_pass_asks_conditionally_and_tells_changed_unchanged_and_gone(
    tmp_path: Path, amqp_url: str, prefix: str, sqlite_url: str, redis: Redis
) -> None:
    site = fresh_site()
    site.pages["/"] = Page(html("home", "the shop", [f"/p/{i}" for i in range(1, 5)]))
    for i in range(1, 5):
        site.pages[f"/p/{i}"] = Page(html(f"p{i}", f"product {i}"))
    site.pages["/p/4"].validators = False  # told unchanged by its signature alone
    settings = settings_for(
        amqp_url, prefix, sqlite_url, configure(tmp_path / "d.yaml", site, every="1h", min="30m")
    )
    config = load_config(settings.config_path)
    with serving(site):
        await wiring.consume(settings, config, burst=True, seeds=[site.url()])
        first = rows(sqlite_url)
        assert {r["found"] for r in first.values()} == {"new"}
        assert all(r["fetch_interval"] == HOUR and r["signature"] for r in first.values())
        site.pages["/p/1"] = Page(html("p1 new", "product 1, cheaper", ["/p/5"]))  # changed, a new link
        site.pages["/p/5"] = Page(html("p5", "product 5"))
        site.pages["/p/2"].status = 410  # gone
        site.hits.clear()
        published = await refresh_all(settings, config)
    assert published == {site.host: 5}
    second = rows(sqlite_url)
    found = {url.rsplit("/", 1)[-1] or "/": r["found"] for url, r in second.items()}
    assert found == {
        "/": "not_modified",
        "1": "changed",
        "2": "gone",
        "3": "not_modified",
        "4": "same_signature",
        "5": "new",
    }
    # Each stored page asked once, conditionally where it had validators; the new page once.
    asked = {h.path: h for h in site.hits}
    assert len(site.hits) == 6 and asked["/p/5"].if_none_match is None
    assert asked["/p/3"].if_none_match == site.pages["/p/3"].etag and asked["/p/3"].status == 304
    assert asked["/p/4"].if_none_match is None and asked["/p/4"].status == 200
    p1, p2, p3, p4 = (second[site.url(f"/p/{i}")] for i in range(1, 5))
    assert p1["title"] == "p1 new" and p1["data"] == {"heading": "p1 new"}
    assert p1["fetch_interval"] == HOUR - 0.5 * (HOUR - 1800)  # changed: halfway back to min
    assert p3["fetch_interval"] == p4["fetch_interval"] == 1.5 * HOUR  # unchanged: half as long again
    assert (p3["title"], p3["status_code"], p3["changed_at"]) == (
        "p3",
        200,
        first[site.url("/p/3")]["changed_at"],
    )
    # Gone: the new status, the last content still readable, on its schedule until drop_after.
    assert (p2["status_code"], p2["title"], p2["gone"]) == (410, "p2", 1)
    assert p2["next_fetch_at"] is not None
