from __future__ import annotations

import json
from collections.abc import AsyncIterator

import aio_pika
import pytest
from redis.asyncio import Redis

from crawler.config import CrawlConfig, parse_config
from crawler.dedup import SeenStore
from crawler.exchanges import declare, topology
from crawler.names import Names
from crawler.quota import PageQuota
from crawler.router import PublishFailed, Router
from crawler.urls import fingerprint

CONFIG = """
defaults: {max_depth: 2}
domains:
  shop.test: {priority: 7}
  books.test: {max_depth: 1}
"""


@pytest.fixture
async def channel(amqp_url: str) -> AsyncIterator[aio_pika.abc.AbstractChannel]:
    async with await aio_pika.connect(amqp_url) as connection:
        yield await connection.channel(publisher_confirms=True)


async def _router(
    channel: aio_pika.abc.AbstractChannel, redis: Redis, names: Names, config: CrawlConfig
) -> Router:
    await declare(channel, topology(config, names))
    exchange = await channel.get_exchange(names.frontier)
    return Router(config, exchange, SeenStore(redis, names), PageQuota(redis, names))


async def _drain(
    channel: aio_pika.abc.AbstractChannel, name: str
) -> list[aio_pika.abc.AbstractIncomingMessage]:
    queue = await channel.get_queue(name)
    out = []
    while (message := await queue.get(fail=False)) is not None:
        await message.ack()
        out.append(message)
    return out


async def test_route_canonicalises_scopes_dedups_and_publishes(
    channel: aio_pika.abc.AbstractChannel, redis: Redis, prefix: str
) -> None:
    names, config = Names(prefix), parse_config(CONFIG)
    router = await _router(channel, redis, names, config)
    links = [
        "/a",
        "/a#top",
        "/a?utm_source=x",
        "http://WWW.SHOP.TEST/b",
        "http://books.test/c",
        "http://elsewhere.test/d",
        "mailto:x@shop.test",
        "http://[bad",
    ]
    routed = await router.route(links, depth=1, claimant=b"p1", base="http://shop.test/")
    assert sorted(routed.published) == ["http://books.test/c", "http://shop.test/a", "http://www.shop.test/b"]
    assert (routed.out_of_scope, routed.invalid) == (1, 2)

    shop = await _drain(channel, names.domain_queue("shop.test"))
    bodies = sorted(json.loads(m.body)["url"] for m in shop)
    assert bodies == ["http://shop.test/a", "http://www.shop.test/b"]
    assert {m.priority for m in shop} == {7}  # the domain's priority at depth 1
    assert {m.delivery_mode for m in shop} == {aio_pika.DeliveryMode.PERSISTENT}
    assert {m.routing_key for m in shop} == {"shop.test", "www.shop.test"}
    assert [json.loads(m.body)["depth"] for m in shop] == [1, 1]

    again = await router.route(["http://shop.test/a"], depth=1, claimant=b"p2")
    assert again.published == [] and again.seen == 1


async def test_depth_limit_is_per_domain(
    channel: aio_pika.abc.AbstractChannel, redis: Redis, prefix: str
) -> None:
    names, config = Names(prefix), parse_config(CONFIG)
    router = await _router(channel, redis, names, config)
    routed = await router.route(["http://shop.test/deep", "http://books.test/deep"], depth=2, claimant=b"p")
    assert routed.published == ["http://shop.test/deep"]
    assert routed.too_deep == 1


async def test_redelivered_page_may_publish_its_unconfirmed_links_again(
    channel: aio_pika.abc.AbstractChannel, redis: Redis, prefix: str
) -> None:
    names, config = Names(prefix), parse_config(CONFIG)
    seen = SeenStore(redis, names)
    # The page claimed its link, then died before the publish was confirmed.
    assert await seen.claim([fingerprint("http://shop.test/x")], b"page") == [True]
    router = await _router(channel, redis, names, config)
    assert (await router.route(["http://shop.test/x"], depth=1, claimant=b"other")).published == []
    assert (await router.route(["http://shop.test/x"], depth=1, claimant=b"page")).published == [
        "http://shop.test/x"
    ]
    # Once confirmed, not even its claimant publishes it again.
    assert (await router.route(["http://shop.test/x"], depth=1, claimant=b"page")).published == []


async def test_unconfirmed_publishes_release_their_urls(amqp_url: str, redis: Redis, prefix: str) -> None:
    names, config = Names(prefix), parse_config(CONFIG)
    async with await aio_pika.connect(amqp_url) as connection:
        channel = await connection.channel(publisher_confirms=True)
        router = await _router(channel, redis, names, config)
        await channel.close()
        with pytest.raises(PublishFailed):
            await router.route(["http://shop.test/lost"], depth=1, claimant=b"p")
        channel = await connection.channel(publisher_confirms=True)
        router = await _router(channel, redis, names, config)
        routed = await router.route(["http://shop.test/lost"], depth=1, claimant=b"q")
        assert routed.published == ["http://shop.test/lost"]


async def test_a_pages_links_are_confirmed_concurrently(
    channel: aio_pika.abc.AbstractChannel, redis: Redis, prefix: str
) -> None:
    names, config = Names(prefix), parse_config(CONFIG)
    router = await _router(channel, redis, names, config)
    links = [f"/p/{i}" for i in range(300)]
    routed = await router.route(links, depth=1, claimant=b"p", base="http://shop.test/")
    assert len(routed.published) == 300
    assert len(await _drain(channel, names.domain_queue("shop.test"))) == 300


def test_priority_for_ranks_seeds_then_rules_then_shallow_links() -> None:
    from crawler.router import priority_for

    text = """
domains:
  s.test:
    priority: 4
    priorities: [{match: '^/product/', priority: 9}, {match: sale, priority: 6}]
"""
    rules = parse_config(text).rules["s.test"]
    assert priority_for("http://s.test/", 0, rules) == 9  # a seed
    assert priority_for("http://s.test/product/1", 1, rules) == 8  # below the seeds whatever a rule says
    assert priority_for("http://s.test/x?sale=1", 1, rules) == 6
    assert priority_for("http://s.test/about", 1, rules) == 4
    assert priority_for("http://s.test/about", 2, rules) == 3  # deeper, lower
    assert priority_for("http://s.test/about", 9, rules) == 1  # at most three levels lower
