from __future__ import annotations

import aio_pika

from crawler.config import parse_config
from crawler.frontier.exchanges import declare, topology
from crawler.frontier.message import persistent
from crawler.names import Names
from tests.support.services import queue_info

CONFIG = "domains: {shop.test: {}, books.test: {}}"


async def _count(channel: aio_pika.abc.AbstractChannel, name: str) -> int:
    queue = await channel.declare_queue(name, passive=True)
    return queue.declaration_result.message_count or 0


async def test_hosts_route_to_their_domain_queue_and_strangers_to_unrouted(
    amqp_url: str, prefix: str
) -> None:
    names = Names(prefix)
    config = parse_config(CONFIG)
    async with await aio_pika.connect(amqp_url) as connection:
        channel = await connection.channel(publisher_confirms=True)
        await declare(channel, topology(config, names))
        frontier = await channel.get_exchange(names.frontier)
        for host in (
            "shop.test",
            "www.shop.test",
            "a.b.shop.test",
            "books.test",
            "elsewhere.test",
            "myshop.test",
        ):
            await frontier.publish(persistent(b"{}", 1), routing_key=host)
        assert await _count(channel, names.domain_queue("shop.test")) == 3
        assert await _count(channel, names.domain_queue("books.test")) == 1
        assert await _count(channel, names.unrouted) == 2


async def test_redeclaring_is_harmless_and_a_new_domain_adds_one_queue(amqp_url: str, prefix: str) -> None:
    names = Names(prefix)
    async with await aio_pika.connect(amqp_url) as connection:
        channel = await connection.channel()
        await declare(channel, topology(parse_config(CONFIG), names))
        frontier = await channel.get_exchange(names.frontier)
        await frontier.publish(persistent(b"{}", 1), routing_key="shop.test")
        # Two processes declaring at once, then again: same arguments, nothing lost.
        other = await connection.channel()
        await declare(other, topology(parse_config(CONFIG), names))
        await declare(channel, topology(parse_config(CONFIG), names))
        assert await _count(channel, names.domain_queue("shop.test")) == 1

        bigger = parse_config("domains: {shop.test: {}, books.test: {}, games.test: {}}")
        before = {q.name for q in topology(parse_config(CONFIG), names).queues}
        after = {q.name for q in topology(bigger, names).queues}
        assert after - before == {names.domain_queue("games.test")}
        await declare(channel, topology(bigger, names))
        assert await _count(channel, names.domain_queue("shop.test")) == 1
        assert await _count(channel, names.domain_queue("games.test")) == 0


async def test_queues_are_durable_priority_queues_that_dead_letter(amqp_url: str, prefix: str) -> None:
    names = Names(prefix)
    config = parse_config(CONFIG)
    async with await aio_pika.connect(amqp_url) as connection:
        await declare(await connection.channel(), topology(config, names))
    info = queue_info(amqp_url, names.domain_queue("shop.test"))
    assert info["durable"] is True
    assert info["arguments"] == {"x-max-priority": 9, "x-dead-letter-exchange": names.dead}
    tier = queue_info(amqp_url, names.retry_queue(5))
    assert tier["arguments"] == {"x-message-ttl": 6250, "x-dead-letter-exchange": names.frontier}
