"""Three passes over a changing site: exactly the versions expected, none lost or doubled by a consumer
SIGKILLed mid-pass, and a queue bound to the change feed told of each new version."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import signal
from collections import defaultdict
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aio_pika
import pytest
import sqlalchemy as sa
import yaml

from crawler import connections
from crawler.changes.feed import MAX_BODY_BYTES
from crawler.changes.feed import body as feed_body
from crawler.config import CrawlConfig, load_config
from crawler.frontier import exchanges
from crawler.names import Names
from crawler.scheduler.running import scheduling
from crawler.settings import Settings
from crawler.sink.sql import engine_url
from crawler.sink.tables import Page as PageRow
from crawler.sink.tables import PageVersion
from crawler.sink.versions import Version
from crawler.worker import wiring
from tests.support.crawls import consumer, finish
from tests.support.fresh import FreshSite, Page, fresh_site, html, serving
from tests.support.services import settings_for
from tests.support.wait import until

PRODUCTS = 24
PLAIN = ("url", "domain", "crawl", "version", "fetched_at", "kind")  # every body's fields
HISTORY_DOC = Path(__file__).resolve().parents[2] / "docs" / "history.md"


def configure(path: Path, site: FreshSite) -> Path:
    domain = {"extract": {"heading": "h1", "text": "p.text"}, "recrawl": {"every": "1h"}, "history": {}}
    path.write_text(
        yaml.safe_dump(
            {
                # Slow enough that the second pass is still going when its consumer is killed.
                "defaults": {"retry_delays": [0.2], "rate": 25, "burst": 2},
                "resolve": {site.host: site.ip},
                "allow_private_networks": True,
                "domains": {site.host: domain},
            }
        )
    )
    return path


def versions(database_url: str) -> dict[str, list[tuple[int, str]]]:
    engine = sa.create_engine(engine_url(database_url))
    try:
        with engine.connect() as conn:
            v = PageVersion
            rows = conn.execute(
                sa.select(PageRow.url, v.version, v.kind).join(v, v.page_id == PageRow.id).order_by(v.version)
            )
            out: dict[str, list[tuple[int, str]]] = defaultdict(list)
            for url, number, kind in rows:
                out[url.rsplit("/", 1)[-1] or "/"].append((number, kind))
            return dict(out)
    finally:
        engine.dispose()


async def make_all_due(settings: Settings, config: CrawlConfig) -> None:
    async with (
        connections.broker(settings.amqp_url, "test scheduler") as connection,
        scheduling(settings, lambda: config, connection) as scheduler,
    ):
        await scheduler.make_due(sorted(config.domains))
        await scheduler.publish_due(sorted(config.domains))


@pytest.mark.timeout(240)
async def test_three_passes_make_exactly_the_versions_and_the_feed_tells_each(
    tmp_path: Path, amqp_url: str, prefix: str, pg_url: str
) -> None:
    site = fresh_site()
    site.pages["/"] = Page(html("home", "the shop", [f"/p/{i}" for i in range(1, PRODUCTS + 1)]))
    for i in range(1, PRODUCTS + 1):
        site.pages[f"/p/{i}"] = Page(html(f"p{i}", f"product {i}"))
    site.pages["/p/2"].validators = False  # its nonce changes on every answer, what a reader sees never
    settings = settings_for(amqp_url, prefix, pg_url, configure(tmp_path / "d.yaml", site))
    config = load_config(settings.config_path)
    feed: dict[str, list[aio_pika.abc.AbstractIncomingMessage]] = defaultdict(list)
    connection = await aio_pika.connect(amqp_url)
    try:
        with serving(site):
            await wiring.consume(settings, config, burst=True, seeds=[site.url()])
            # A subscriber binds its own queue to the feed, after the first pass.
            channel = await connection.channel()
            queue = await channel.declare_queue("test-feed", auto_delete=True)
            await queue.bind(Names(prefix).changes, "#." + site.host)

            site.pages["/p/1"] = Page(html("p1 new", "product 1, cheaper"))
            site.pages["/p/3"].status = 410
            site.pages["/p/4"] = Page(html("p4", "product 4, back in stock"))
            await make_all_due(settings, config)
            site.hits.clear()
            victim = consumer(settings, "--prefetch", "8")
            await until(lambda: len(site.hits) >= PRODUCTS // 2, what="half the second pass", within=60)
            victim.send_signal(signal.SIGKILL)
            await asyncio.to_thread(victim.communicate, timeout=30)
            assert len(site.hits) < PRODUCTS + 1  # it died mid-pass
            await asyncio.to_thread(finish, consumer(settings, "--burst"), timeout=120)

            site.pages["/p/1"] = Page(html("p1 newer", "product 1, cheaper still"))
            site.pages["/p/3"].status = 200  # back, as it was
            await make_all_due(settings, config)
            await wiring.consume(settings, config, burst=True)

        async def told() -> bool:
            while (message := await queue.get(fail=False, no_ack=True)) is not None:
                feed[message.message_id or ""].append(message)
            return len(feed) >= 5

        await until(told, what="five versions on the feed", within=30)
    finally:
        await connection.close()

    found = versions(pg_url)
    assert found.pop("1") == [(1, "new"), (2, "changed"), (3, "changed")]
    assert found.pop("3") == [(1, "new"), (2, "gone"), (3, "back")]
    assert found.pop("4") == [(1, "new"), (2, "changed")]
    assert found == {
        page: [(1, "new")] for page in ["/", *(str(i) for i in range(2, PRODUCTS + 1) if i not in (3, 4))]
    }

    bodies: dict[tuple[str, int], dict[str, Any]] = {}
    for copies in feed.values():  # a copy of a version (a redelivered page's) is the same message
        first = copies[0]
        assert {c.body for c in copies} == {first.body}
        assert (first.routing_key, first.content_type, first.delivery_mode) == (
            site.host, "application/json", aio_pika.DeliveryMode.PERSISTENT,
        )  # fmt: skip
        body = json.loads(first.body)
        bodies[body["url"].rsplit("/", 1)[-1], body["version"]] = body
    assert sorted(bodies) == [("1", 2), ("1", 3), ("3", 2), ("3", 3), ("4", 2)]
    assert {k: b["kind"] for k, b in bodies.items()} == {
        ("1", 2): "changed", ("1", 3): "changed", ("3", 2): "gone", ("3", 3): "back", ("4", 2): "changed",
    }  # fmt: skip
    assert bodies["1", 2]["changes"] == {
        "title": {"old": "p1", "new": "p1 new"},
        "heading": {"old": "p1", "new": "p1 new"},
        "text": {"old": "product 1", "new": "product 1, cheaper"},
    }
    assert bodies["4", 2]["changes"] == {"text": {"old": "product 4", "new": "product 4, back in stock"}}
    assert all(b["domain"] == site.host and b["fetched_at"].endswith("Z") for b in bodies.values())
    # Content off: no content fields (tests/worker/test_content.py has them with content on).
    assert all(set(b) <= {*PLAIN, "changes"} for b in bodies.values())


def test_a_body_too_large_for_the_feed_leaves_out_its_markdown_and_text() -> None:
    made = {"markdown": "# Lamp", "text": "Lamp", "lang": "en", "simhash": "00000000000000ff"}
    version = Version(7, "http://a.test/p/7", "a.test", None, 1, datetime(2026, 12, 6, tzinfo=UTC), "new")
    assert json.loads(feed_body(version)).keys() == set(PLAIN)
    assert json.loads(feed_body(replace(version, content=made))) == json.loads(feed_body(version)) | made
    huge = made | {"text": "Lamp " * (MAX_BODY_BYTES // 5)}
    told = feed_body(replace(version, content=huge))
    assert len(told) <= MAX_BODY_BYTES
    assert json.loads(told) == json.loads(feed_body(version)) | made | {
        "markdown": None, "text": None, "content_too_large": True,
    }  # fmt: skip


async def test_the_documented_subscriber_follows_the_feed_of_the_crawlers_own_vhost(
    amqp_url: str, prefix: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (block,) = re.findall(r"```python\n(.*?)```", HISTORY_DOC.read_text(), re.S)
    # As a person runs it: in an environment set for the crawler (here the test's vhost and prefix).
    monkeypatch.setenv("CRAWLER_AMQP_URL", amqp_url)
    monkeypatch.setenv("CRAWLER_PREFIX", prefix)
    example: dict[str, Any] = {"__name__": "follow"}
    exec(compile(block, "docs/history.md", "exec"), example)
    names = Names(prefix)
    changes = exchanges.Exchange(names.changes, aio_pika.ExchangeType.TOPIC)
    async with await aio_pika.connect(amqp_url) as connection:
        channel = await connection.channel(publisher_confirms=True)
        await exchanges.declare(channel, exchanges.Topology((changes,), ()))
        following = asyncio.create_task(example["follow"]())
        try:
            await until(lambda: _consumers(amqp_url, "shop-prices"), what="the example following its queue")
            feed = await channel.get_exchange(names.changes)
            for domain, version in (("other.example", 1), ("shop.example", 2)):
                body = {"url": f"https://{domain}/p/7", "domain": domain, "version": version}
                message = aio_pika.Message(json.dumps(body).encode(), message_id=f"7:{version}")
                await feed.publish(message, routing_key=domain)
            printed = ""

            def told() -> bool:
                nonlocal printed
                printed += capsys.readouterr().out
                return "7:2 " in printed

            await until(told, what="the version printed")
        finally:
            following.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await following
        queue = await channel.declare_queue("shop-prices", durable=True, passive=True)
        assert queue.declaration_result.message_count == 0  # acked once printed
    assert "7:1 " not in printed  # another domain's version, not bound


async def _consumers(amqp_url: str, queue: str) -> int:
    """How many consume `queue` in the vhost of `amqp_url` (0 while it does not exist): the example
    binds its queue before it consumes."""
    async with await aio_pika.connect(amqp_url) as connection:
        channel = await connection.channel()
        try:
            declared = await channel.declare_queue(queue, durable=True, passive=True)
        except aio_pika.exceptions.ChannelNotFoundEntity:
            return 0
        return declared.declaration_result.consumer_count or 0
