from __future__ import annotations

import asyncio
import json

import aio_pika
import aiormq
import pytest
from redis.asyncio import Redis

from crawler.config import CrawlConfig, parse_config
from crawler.dedup.store import SeenStore
from crawler.frontier.exchanges import declare, topology
from crawler.frontier.hosts import shard_of
from crawler.frontier.quota import PageQuota
from crawler.frontier.router import PublishFailed, Router
from crawler.frontier.urls import fingerprint
from crawler.names import Names
from tests.support.services import drain
from tests.support.wait import until

CONFIG = """
defaults: {max_depth: 2}
domains:
  shop.test: {priority: 7}
  books.test: {max_depth: 1}
"""


async def _router(
    channel: aio_pika.abc.AbstractChannel, redis: Redis, names: Names, config: CrawlConfig
) -> Router:
    await declare(channel, topology(config, names))
    exchange = await channel.get_exchange(names.frontier)
    return Router(config, exchange, SeenStore(redis, names), PageQuota(redis, names))


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

    shop = await drain(channel, names.domain_queue("shop.test"))
    bodies = sorted(json.loads(m.body)["url"] for m in shop)
    assert bodies == ["http://shop.test/a", "http://www.shop.test/b"]
    assert {m.priority for m in shop} == {7}  # the domain's priority at depth 1
    assert {m.delivery_mode for m in shop} == {aio_pika.DeliveryMode.PERSISTENT}
    assert {m.routing_key for m in shop} == {"shop.test.^", "www.shop.test.^"}  # first band: 7 >= 6
    assert [json.loads(m.body)["depth"] for m in shop] == [1, 1]

    again = await router.route(["http://shop.test/a"], depth=1, claimant=b"p2")
    assert again.published == [] and again.seen == 1


async def test_a_host_too_long_for_a_routing_key_is_invalid_not_a_failed_publish(
    channel: aio_pika.abc.AbstractChannel, redis: Redis, prefix: str
) -> None:
    names, config = Names(prefix), parse_config(CONFIG)
    router = await _router(channel, redis, names, config)
    long = "http://" + "a" * 250 + ".shop.test/x"  # in scope, but no AMQP routing key holds its host
    routed = await router.route([long, "http://shop.test/y"], depth=1, claimant=b"p")
    assert routed.published == ["http://shop.test/y"] and routed.invalid == 1


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


async def test_publishes_the_broker_refuses_release_their_claims_and_raise(
    channel: aio_pika.abc.AbstractChannel, redis: Redis, prefix: str
) -> None:
    names, config = Names(prefix), parse_config(CONFIG)
    router = await _router(channel, redis, names, config)
    # A second queue for shop.test that takes nothing: the broker nacks what is routed to it.
    full = await channel.declare_queue(
        f"{prefix}.full", arguments={"x-max-length": 0, "x-overflow": "reject-publish"}
    )
    await full.bind(names.frontier, "#.shop.test")
    await full.bind(names.frontier, "#.shop.test.^")  # shop.test's links are first-band (priority 7)
    links = ["http://books.test/ok", "http://shop.test/a", "http://shop.test/b"]
    with pytest.raises(PublishFailed, match="2 of 3 publishes were not confirmed"):
        await router.route(links, depth=1, claimant=b"p")
    seen = SeenStore(redis, names)
    # The confirmed one is done for everybody; the refused ones are free for another page to route.
    assert await seen.claim([fingerprint(u) for u in links], b"q") == [False, True, True]
    await seen.release([fingerprint(u) for u in links[1:]])
    await full.unbind(names.frontier, "#.shop.test")
    await full.unbind(names.frontier, "#.shop.test.^")
    routed = await router.route(links, depth=1, claimant=b"q")
    assert sorted(routed.published) == links[1:] and routed.seen == 1


async def test_a_route_cancelled_in_its_publish_releases_its_claims(
    channel: aio_pika.abc.AbstractChannel, redis: Redis, prefix: str
) -> None:
    names, config = Names(prefix), parse_config(CONFIG)
    router = await _router(channel, redis, names, config)
    links = ["http://shop.test/a", "http://books.test/b"]
    fingerprints = [fingerprint(u) for u in links]
    underlay = await channel.get_underlay_channel()
    assert isinstance(underlay, aiormq.Channel)
    async with underlay.lock:  # another publish holds the channel: this one waits its turn
        routing = asyncio.create_task(router.route(links, depth=1, claimant=b"p"))
        await until(lambda: redis.hmget(names.seen_key, fingerprints), all, what="the links claimed")
        routing.cancel()  # as when a worker's channel closes under its deliveries
        with pytest.raises(asyncio.CancelledError):
            await routing
    # Never published, so free for another page to route (or this one, delivered again).
    assert await SeenStore(redis, names).claim(fingerprints, b"q") == [True, True]
    assert await drain(channel, names.domain_queue("shop.test")) == []


async def test_the_router_publishes_again_once_its_robust_channel_is_reopened(
    amqp_url: str, redis: Redis, prefix: str
) -> None:
    names, config = Names(prefix), parse_config(CONFIG)
    async with await aio_pika.connect_robust(amqp_url) as connection:
        channel = await connection.channel(publisher_confirms=True)
        router = await _router(channel, redis, names, config)
        reopened = asyncio.Event()
        channel.reopen_callbacks.add(lambda *_: reopened.set())
        with pytest.raises(aio_pika.exceptions.ChannelNotFoundEntity):
            await channel.declare_queue("no-such-queue", passive=True)
        await reopened.wait()
        routed = await router.route(["http://shop.test/after"], depth=1, claimant=b"p")
        assert routed.published == ["http://shop.test/after"]
        assert len(await drain(channel, names.domain_queue("shop.test"))) == 1


async def test_a_pages_links_are_confirmed_concurrently(
    channel: aio_pika.abc.AbstractChannel, redis: Redis, prefix: str
) -> None:
    names, config = Names(prefix), parse_config(CONFIG)
    router = await _router(channel, redis, names, config)
    links = [f"/p/{i}" for i in range(300)]
    routed = await router.route(links, depth=1, claimant=b"p", base="http://shop.test/")
    assert len(routed.published) == 300
    assert len(await drain(channel, names.domain_queue("shop.test"))) == 300


def test_priority_for_ranks_seeds_then_rules_then_shallow_links() -> None:
    from crawler.frontier.router import priority_for

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


async def test_links_to_discovered_hosts_go_to_their_shard_breadth_first_within_scope_and_caps(
    channel: aio_pika.abc.AbstractChannel, redis: Redis, prefix: str
) -> None:
    names = Names(prefix)
    config = parse_config(
        CONFIG + "discover: {follow: all, allow: ['.test'], deny: ['no.test'], shards: 2, max_hosts: 2,"
        " host: {max_depth: 2}}\n"
    )
    router = await _router(channel, redis, names, config)
    links = [
        "http://shop.test/a",  # listed: its domain queue, as ever
        "http://x.test/1",
        "http://y.test/1",
        "http://z.test/1",  # a third host: over max_hosts
        "http://no.test/1",  # denied
        "http://x.example/1",  # not allowed
        "http://127.0.0.1/1",  # an IP literal
    ]
    routed = await router.route(links, depth=1, claimant=b"p")
    assert sorted(routed.published) == ["http://shop.test/a", "http://x.test/1", "http://y.test/1"]
    assert (routed.out_of_scope, routed.host_caps) == (3, 1)
    assert routed.counts() == {("shop.test", "routed"): 1, ("x.test", "routed"): 1, ("y.test", "routed"): 1}
    deeper = await router.route(["http://x.test/2", "http://x.test/3"], depth=3, claimant=b"q")
    assert deeper.published == [] and deeper.too_deep == 2  # the host template's max_depth
    await router.route(["http://x.test/4"], depth=2, claimant=b"r")

    shop = await drain(channel, names.domain_queue("shop.test"))
    assert [json.loads(m.body)["url"] for m in shop] == ["http://shop.test/a"]
    found = {}
    for shard in range(2):
        for m in await drain(channel, names.host_shard(shard)):
            host, _, word = (m.routing_key or "").rpartition(".")
            assert word == f"~s{shard}" and shard_of(host, 2) == shard
            found[json.loads(m.body)["url"]] = m.priority
    # Breadth first: a lower priority a hop deeper.
    assert found == {"http://x.test/1": 8, "http://y.test/1": 8, "http://x.test/4": 7}
