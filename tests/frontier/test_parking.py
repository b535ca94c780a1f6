"""Retry and dead copies against the real RabbitMQ: a copy the broker returns (no queue bound) or does
not confirm (a full queue refusing publishes) is no copy, so its original is not acked: it waits in
another tier, or goes back to its queue and is tried again."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import aio_pika
import pytest

from crawler import names as hdr
from crawler.config import load_config
from crawler.names import Names, delay_label
from crawler.sink.sql import migrate
from demo.site import Reply, serve
from tests.support.crawls import consumer, rows, seed, stopped
from tests.support.services import consumers, queue_depth, settings_for
from tests.support.sites import shops, write_config
from tests.support.wait import until


async def break_copies(amqp_url: str, exchange: str, bound: dict[str, dict[str, str]], how: str) -> None:
    """Unbind `bound` (queue -> binding arguments) from `exchange`, so a copy published there is
    returned; with `how` "refused", bind a full queue that refuses every publish instead (a nack)."""
    async with await aio_pika.connect(amqp_url) as connection:
        channel = await connection.channel()
        for name, arguments in bound.items():
            queue = await channel.get_queue(name)
            await queue.unbind(exchange, "", arguments=arguments)
        if how == "refused":
            full = await channel.declare_queue(
                f"{exchange}.full", arguments={"x-max-length": 0, "x-overflow": "reject-publish"}
            )
            await full.bind(exchange, "", arguments={"x-match": "all"})


@pytest.mark.parametrize("how", ["returned", "refused"])
async def test_a_retry_copy_that_is_returned_or_refused_leaves_its_page_in_its_queue(
    tmp_path: Path, amqp_url: str, prefix: str, sqlite_url: str, how: str
) -> None:
    site = shops(products=1, hosts=["a.test"])[0]
    broken = threading.Event()

    def busy(count: int) -> Reply:
        broken.wait(30)  # the first answer waits until the retry tiers take no copy
        return Reply(503, b"busy")

    site.routes["/"] = busy
    config_path = write_config(tmp_path / "d.yaml", [site], retry_delays=[0.2, 0.4], rate=50, burst=50)
    settings = settings_for(amqp_url, prefix, sqlite_url, config_path)
    names = Names(prefix)
    tiers = {
        names.retry_queue(t): {"x-match": "all", hdr.HEADER_RETRY_TIER: delay_label(t)}
        for t in load_config(config_path).retry_tiers
    }
    migrate(sqlite_url)
    with serve(site):
        await seed(settings, site.url())
        worker = consumer(settings)
        try:
            await until(lambda: site.hits("/") >= 1, within=30, what="the home page's first fetch")
            await break_copies(amqp_url, names.retry, tiers, how)
            broken.set()
            # No copy is taken: each try is returned to its queue, fetched again, and so on.
            await until(lambda: site.hits("/") >= 3 or worker.poll() is not None, within=30)
            assert worker.poll() is None
        finally:
            ((code, err),) = await asyncio.to_thread(stopped, [worker])
        assert code == 0, err
    assert site.hits("/") >= 3
    assert await queue_depth(amqp_url, names.domain_queue("a.test")) == 1  # kept, for the next try
    assert site.url() not in rows(sqlite_url)


@pytest.mark.parametrize("how", ["returned", "refused"])
async def test_a_dead_copy_that_is_returned_or_refused_leaves_its_message_in_a_retry_tier(
    tmp_path: Path, amqp_url: str, prefix: str, sqlite_url: str, how: str
) -> None:
    site = shops(products=1, hosts=["a.test"])[0]
    config_path = write_config(tmp_path / "d.yaml", [site], retry_delays=[30])
    settings = settings_for(amqp_url, prefix, sqlite_url, config_path)
    names = Names(prefix)
    migrate(sqlite_url)
    with serve(site):
        await seed(settings, site.url())
        worker = consumer(settings)
        try:
            # Broken once the worker has declared its topology and consumes.
            await until(
                lambda: consumers(amqp_url, names.domain_queue("a.test")), within=30, what="consuming"
            )
            await break_copies(amqp_url, names.dead, {names.dead: {}}, how)
            async with await aio_pika.connect(amqp_url) as connection:
                channel = await connection.channel()
                garbage = aio_pika.Message(
                    b"not a crawl message", delivery_mode=aio_pika.DeliveryMode.PERSISTENT
                )
                await channel.default_exchange.publish(garbage, routing_key=names.domain_queue("a.test"))
            # Invalid, so set aside for a person; its dead copy is not taken, so it waits a tier.
            tier = names.retry_queue(30)
            await until(lambda: queue_depth(amqp_url, tier), within=30, what="the message in its retry tier")
        finally:
            ((code, err),) = await asyncio.to_thread(stopped, [worker])
        assert code == 0, err
    assert await queue_depth(amqp_url, names.dead) == 0
