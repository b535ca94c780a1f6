"""Coverage alerts on the change feed: a queue bound to their routing key is told of each alert of a
crawl once, however many workers read its coverage how often; a queue bound to the domain's versions
is told of none."""

from __future__ import annotations

import asyncio
import contextlib
import json
from datetime import UTC, datetime
from pathlib import Path

import aio_pika
import pytest
import yaml
from aio_pika.abc import AbstractChannel, AbstractQueue
from redis.asyncio import Redis

from crawler import connections
from crawler.changes.alerts import ALERT_KIND, AlertFeed
from crawler.changes.feed import changes_exchange
from crawler.config import CrawlConfig, load_config
from crawler.frontier import exchanges
from crawler.frontier.crawls import CrawlState
from crawler.monitor.alerting import Alerting, AlertRaiser
from crawler.monitor.quality import current_quality
from crawler.names import COVERAGE_ALERT_KEY, Names
from crawler.quality.coverage import ITEMS, fill_kind
from crawler.sink.crawls import CrawlRecord, CrawlStore
from crawler.sink.database import Database
from crawler.sink.sql import migrate
from tests.support.wait import until

DOMAIN = "shop.test"
CRAWL = "c0ffee"


def configure(path: Path) -> CrawlConfig:
    """A shop whose price is expected on 90% of its pages, judged from 10 pages on."""
    expect = {"fields": {"price": {"present": "90%"}}, "min_sample": 10}
    domain = {"extract": {"title": "h1", "price": ".price"}, "expect": expect}
    path.write_text(yaml.safe_dump({"domains": {DOMAIN: domain}}))
    return load_config(path)


async def pages(state: CrawlState, n: int, *, priced: bool) -> None:
    """Count `n` checked pages of the shop, each with a title, with a price if `priced`, in one step
    (so that no reading sees half of them)."""
    kinds = [ITEMS, fill_kind("", "title"), *([fill_kind("", "price")] if priced else [])]
    await state.count(CRAWL, {(DOMAIN, kind): n for kind in kinds})


async def bound(channel: AbstractChannel, names: Names, key: str) -> AbstractQueue:
    queue = await channel.declare_queue(exclusive=True)
    await queue.bind(names.changes, key)
    return queue


async def waiting(channel: AbstractChannel, queue: AbstractQueue) -> int:
    """Messages in `queue`, as the broker counts them (a confirmed publish is counted)."""
    declared = await channel.declare_queue(queue.name, passive=True)
    return declared.declaration_result.message_count or 0


@pytest.mark.timeout(60)
async def test_an_alert_goes_once_to_a_queue_bound_to_its_routing_key_and_none_to_the_domains(
    tmp_path: Path, amqp_url: str, prefix: str, sqlite_url: str, redis: Redis, channel: AbstractChannel
) -> None:
    config = configure(tmp_path / "d.yaml")
    names = Names(prefix)
    migrate(sqlite_url)
    store_db = Database(sqlite_url)
    store = CrawlStore(store_db)
    state = CrawlState(redis, names)
    store.add(CrawlRecord(CRAWL, None, "running", [f"http://{DOMAIN}/"], {}, datetime.now(UTC), None, None))
    await exchanges.declare(channel, exchanges.topology(config, names))
    alerts = await bound(channel, names, COVERAGE_ALERT_KEY)
    versions = await bound(channel, names, DOMAIN)
    everything = await bound(channel, names, "#")

    await pages(state, 20, priced=True)
    async with connections.broker(amqp_url, "test alerts") as connection:
        # Two workers reading every 50 ms.
        workers = [Alerting(connection, redis, names, state, store, lambda: config) for _ in range(2)]
        tasks = [asyncio.create_task(w.run(0.05)) for w in workers]
        try:
            # The template breaks: 20 pages without a price, 50% against the 90% expected.
            await pages(state, 20, priced=False)
            message = await until(lambda: alerts.get(fail=False), within=30, what="the coverage alert")
            assert message is not None
            await message.ack()
            # More broken pages and more readings by both: the alert is raised already.
            raised = await redis.scard(names.crawl_alerted_key(CRAWL))
            await pages(state, 10, priced=False)
            async with changes_exchange(connection, config, names) as exchange:
                raiser = AlertRaiser(redis, names, AlertFeed(exchange))
                for report in await current_quality(state, store, config):
                    assert await raiser.raise_new(report) == 0
            await workers[0].last_reading()
        finally:
            for task in tasks:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
    store_db.close()

    assert raised == 1
    assert message.routing_key == COVERAGE_ALERT_KEY and message.type == ALERT_KIND
    assert message.message_id == f"{CRAWL} {DOMAIN} all price below_expected"
    assert message.delivery_mode == aio_pika.DeliveryMode.PERSISTENT
    body = json.loads(message.body)
    assert body.pop("raised_at").endswith("Z")
    assert body == {
        "kind": "coverage_alert",
        "crawl": CRAWL,
        "domain": DOMAIN,
        "alert": "below_expected",
        "pages": "all",
        "subject": "price",
        "message": f"price: on 50.0% of {DOMAIN}'s pages, below the 90.0% expected",
        "rate": 0.5,
        "before": None,
        "floor": 0.9,
    }
    assert await waiting(channel, alerts) == 0  # once, not per page nor per reading
    assert await waiting(channel, everything) == 1  # "#" is told of it too
    assert await waiting(channel, versions) == 0  # a queue of the domain's versions is not
