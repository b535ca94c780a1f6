"""Data quality in a real crawl (RabbitMQ, Redis, the database): a shop whose product template loses
its price mid-crawl. Its pages are stored all the same, the failing ones with their failures; the
crawl's coverage table shows the drop against the last finished crawl, the coverage gauge falls under
its floor while the crawl runs (what CrawlerFieldCoverageLow alerts on), the workers put each alert on
the change feed once, `crawler status` says so, `crawler export --invalid` lists the pages, and a
fixed rule re-parsed restores it, fetching nothing."""

from __future__ import annotations

import asyncio
import contextlib
import json
from pathlib import Path
from typing import Any

import aio_pika
import pytest
import yaml
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from redis.asyncio import Redis

from crawler import cli
from crawler.config import load_config
from crawler.frontier.crawls import CrawlState
from crawler.monitor.metrics import Metrics
from crawler.monitor.quality import export_coverage
from crawler.names import COVERAGE_ALERT_KEY
from crawler.service import Control, NewCrawl
from crawler.settings import Settings
from crawler.sink.crawls import CrawlStore
from crawler.sink.database import Database
from crawler.worker import wiring
from demo.site import Site, page, serve
from tests.support.crawls import rows
from tests.support.services import env_for, settings_for
from tests.support.sites import shops, switches
from tests.support.wait import until

PRODUCTS = 40
GOOD = 12  # requests the second crawl gets with the old template


def configure(path: Path, site: Site, price: str = ".price") -> Path:
    """The shop's domains.yaml: the price extracted and expected on product pages, archived."""
    expect = {
        "fields": {"price": {"range": "> 0"}},
        "min_sample": 10,
        "pages": [
            {
                "name": "product",
                "match": "^/product/",
                "fields": {"price": {"present": "90%"}},
                # A page without a price fails this one: stored all the same, with the failure.
                "schema": {"properties": {"price": {"type": "number"}}, "required": ["price"]},
            }
        ],
    }
    domain = {
        "extract": {"title": "h1", "price": {"css": price, "type": "price"}},
        "expect": expect,
        "archive": True,
        "rate": 20,
        "burst": 1,
    }
    config = {
        "defaults": {"retry_delays": [0.2], "sitemaps": False, "obey_robots": False},
        "resolve": {site.host: site.ip},
        "allow_private_networks": True,
        "domains": {site.host: domain},
    }
    path.write_text(yaml.safe_dump(config))
    return path


async def crawl(settings: Settings, path: Path, site: Site) -> str:
    """One crawl of the shop, to its end; its id."""
    config = load_config(path)
    async with Control.open(settings, config, "test") as control:
        crawl_id = (await control.crawls.create(NewCrawl([site.url()]))).id
    await wiring.consume(settings, config, burst=True, crawl=crawl_id)
    return crawl_id


def gauges(metrics: Metrics) -> dict[tuple[str, str, str, str], float]:
    """The coverage gauges' samples: (name, domain, pages, field) -> value."""
    text = generate_latest(metrics.registry).decode()
    return {
        (s.name, s.labels["domain"], s.labels["pages"], s.labels["field"]): s.value
        for family in text_string_to_metric_families(text)
        if family.name.startswith("crawler_field_coverage")
        for s in family.samples
    }


def low(metrics: Metrics, host: str) -> bool:
    """CrawlerFieldCoverageLow's condition: the product pages' price coverage under its floor."""
    found = gauges(metrics)
    now = found.get(("crawler_field_coverage", host, "product", "price"))
    floor = found.get(("crawler_field_coverage_floor", host, "product", "price"))
    return now is not None and floor is not None and now < floor


async def alert_queue(settings: Settings) -> str:
    """A queue bound to the change feed's coverage alerts; its name."""
    name = f"{settings.prefix}.test-alerts"
    async with await aio_pika.connect(settings.amqp_url) as connection:
        channel = await connection.channel()
        queue = await channel.declare_queue(name, durable=True)
        await queue.bind(settings.names.changes, COVERAGE_ALERT_KEY)
    return name


async def alerts_in(settings: Settings, name: str) -> list[tuple[str | None, dict[str, Any]]]:
    """The messages waiting in queue `name`: (message_id, body)."""
    out = []
    async with await aio_pika.connect(settings.amqp_url) as connection:
        queue = await (await connection.channel()).declare_queue(name, durable=True)
        while (message := await queue.get(fail=False)) is not None:
            out.append((message.message_id, json.loads(message.body)))
            await message.ack()
    return out


async def cli_out(args: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """What `crawler ARGS` prints, run as a command runs (its own event loop: in a thread)."""
    assert await asyncio.to_thread(cli.main, args) == 0
    return capsys.readouterr().out


@pytest.mark.timeout(120)
async def test_a_template_change_mid_crawl_shows_alerts_and_a_fixed_rule_reparsed_restores_it(
    tmp_path: Path,
    amqp_url: str,
    prefix: str,
    sqlite_url: str,
    redis: Redis,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    (site,) = shops(PRODUCTS, ["a.test"])
    host = site.host
    path = configure(tmp_path / "d.yaml", site)
    settings = settings_for(amqp_url, prefix, sqlite_url, path)
    for key, value in env_for(settings).items():
        monkeypatch.setenv(key, value)
    with serve(site):
        first = await crawl(settings, path, site)
        alerts = await alert_queue(settings)
        # The new template: the price in a `.cost` the rule does not read, from the 12th request on.
        new = {
            f"/product/{i}": page(f"{host} product {i}", ["/"], extra=f'<p class="cost">{i}.99 EUR</p>')
            for i in range(1, PRODUCTS + 1)
        }
        switches(site, len(site.requests) + GOOD, new)
        # The gauges read while the second crawl runs, as a worker serving /metrics reads them.
        metrics = Metrics(process=False)
        store_db = Database(settings.database_url)
        store = CrawlStore(store_db)
        state = CrawlState(redis, settings.names)
        config = load_config(path)
        async with Control.open(settings, config, "test") as control:
            second = (await control.crawls.create(NewCrawl([site.url()]))).id
            exporter = asyncio.create_task(
                export_coverage(metrics.coverage, state, store, lambda: config, lambda: [host], 0.05)
            )
            running = asyncio.create_task(wiring.consume(settings, config, burst=True, crawl=second))
            try:
                await until(
                    lambda: low(metrics, host), within=60, what="product/price coverage under its floor"
                )
                await running
            finally:
                exporter.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await exporter
                store_db.close()
        assert not running.exception()
        fetched = len(site.requests)

        # The workers put each alert on the change feed once, read as they ran or as they stopped.
        told = await alerts_in(settings, alerts)
        assert len({i for i, _ in told}) == len(told), told
        assert {(b["crawl"], b["alert"], b["pages"], b["subject"]) for _, b in told} >= {
            (second, "below_expected", "product", "price"),
            (second, "dropped", "product", "price"),
        }, told

        table = await cli_out(["quality", "--crawl", second], capsys)
        assert f"crawl {second} (finished)" in table and f"last crawl: {first}" in table, table
        report: dict[str, Any] = json.loads(await cli_out(["quality", "--crawl", second, "--json"], capsys))
        (shop,) = report["domains"]
        rows_by = {(r["pages"], r["field"]): r for r in shop["fields"]}
        price = rows_by["product", "price"]
        assert price["before"]["rate"] == 1.0 and price["now"]["rate"] < 0.5, price
        assert set(price["alerts"]) == {"below_expected", "dropped"}, price
        assert rows_by["all", "title"]["alerts"] == [] and rows_by["all", "title"]["now"]["rate"] == 1.0
        assert {(a["kind"], a["pages"]) for a in shop["alerts"]} >= {("below_expected", "product")}
        assert "ALERT below expected, dropped" in table

        # Stored, never dropped nor retried: each page once, the broken ones as ok with their failures.
        stored = rows(settings.database_url)
        assert len(stored) == PRODUCTS + 2 and all(a == 1 for _, _, a in stored.values())
        invalid = [json.loads(line) for line in (await cli_out(["export", "--invalid"], capsys)).splitlines()]
        assert invalid and len(invalid) == shop["invalid"]
        assert all(p["error"] is None and p["status_code"] == 200 for p in invalid)
        assert {f["name"] for p in invalid for f in p["expectations"]} == {"product/schema"}
        assert invalid[0]["expectations"][0]["reason"].startswith("schema at $")

        status = await cli_out(["status"], capsys)
        assert f"! crawl {second}: product/price: on " in status and "below the 90.0% expected" in status

        # The rule fixed, the crawl's archived pages re-parsed: coverage back, not one request more.
        configure(path, site, price=".price, .cost")
        reparsed = await cli_out(["reparse", "--crawl", second, "--workers", "1"], capsys)
        assert len(site.requests) == fetched
    # Its report: the crawl's coverage before the re-parse beside after it.
    assert f"crawl {second} (finished): 0 alerts" in reparsed and f"before: {second}" in reparsed, reparsed
    product_price = next(
        line.split() for line in reparsed.splitlines() if line.split()[:2] == ["product", "price"]
    )
    assert product_price[3] == "100.0%" and float(product_price[2].rstrip("%")) < 50, reparsed
    fixed = json.loads(await cli_out(["quality", "--crawl", second, "--json"], capsys))
    (shop,) = fixed["domains"]
    price = next(r for r in shop["fields"] if (r["pages"], r["field"]) == ("product", "price"))
    assert price["now"]["rate"] == 1.0 and price["alerts"] == [] and shop["invalid"] == 0, price
    assert await cli_out(["export", "--invalid"], capsys) == ""
