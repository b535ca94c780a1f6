from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from importlib.metadata import version

import aio_pika
import pytest
from aio_pika.abc import AbstractChannel, AbstractExchange
from aio_pika.exceptions import DeliveryError

from crawler.errors import CrawlerError
from crawler.frontier.message import persistent
from crawler.frontier.publisher import NotConfirmed, Outgoing, Publisher, fast_path_problem
from tests.support.services import drain

FORCED = "the public path, forced by the test"


def _public(channel: object) -> str | None:
    return FORCED


@pytest.fixture(params=["fast", "public"])
def check(request: pytest.FixtureRequest) -> Callable[[object], str | None] | None:
    """Every publisher test runs on the fast path and on the public path it falls back to."""
    return None if request.param == "fast" else _public


async def _exchange_and_queue(
    channel: AbstractChannel, arguments: dict[str, object] | None = None
) -> tuple[AbstractExchange, str]:
    exchange = await channel.declare_exchange("x", aio_pika.ExchangeType.TOPIC, durable=True)
    queue = await channel.declare_queue("q", durable=True, arguments=arguments)
    await queue.bind(exchange, "#")
    return exchange, queue.name


async def test_a_batch_arrives_as_aio_pika_would_have_sent_it(
    channel: AbstractChannel, check: Callable[[object], str | None] | None
) -> None:
    exchange, name = await _exchange_and_queue(channel)
    big = json.dumps({"v": 1, "url": "http://a.test/" + "x" * 300_000}).encode()  # several body frames
    batch = [
        Outgoing("a.test", b'{"v":1,"url":"http://a.test/"}', 9),
        Outgoing("www.b.test", big, 0),
        Outgoing("a.test", b'{"v":1,"url":"http://a.test/2"}', 4),
    ]
    assert await Publisher(exchange, check=check).publish(batch) == [None, None, None]

    got = await drain(channel, name)
    assert [(m.routing_key, m.body, m.priority) for m in got] == [
        (o.routing_key, o.body, o.priority) for o in batch
    ]
    expected = persistent(b"", 0)
    for m in got:
        assert m.delivery_mode == aio_pika.DeliveryMode.PERSISTENT
        assert (m.content_type, m.headers) == (expected.content_type, expected.headers)


async def test_batches_interleave_with_aio_pika_publishes_on_one_channel(
    channel: AbstractChannel, check: Callable[[object], str | None] | None
) -> None:
    # Both number their messages on the channel; a tag counted twice or skipped would never confirm.
    exchange, name = await _exchange_and_queue(channel)
    publisher = Publisher(exchange, check=check)

    async def batch(n: int) -> list[BaseException | None]:
        return await publisher.publish([Outgoing("a.test", f"b{n}-{i}".encode(), 1) for i in range(25)])

    async def single(n: int) -> None:
        await exchange.publish(persistent(f"s{n}".encode(), 1), routing_key="a.test")

    outcomes = await asyncio.gather(*(batch(n) for n in range(20)), *(single(n) for n in range(100)))
    assert all(o == [None] * 25 for o in outcomes[:20])
    assert len(await drain(channel, name)) == 20 * 25 + 100


async def test_publishes_the_broker_refuses_fail_one_by_one(
    channel: AbstractChannel, check: Callable[[object], str | None] | None
) -> None:
    exchange, _ = await _exchange_and_queue(channel, {"x-max-length": 2, "x-overflow": "reject-publish"})
    outcomes = await Publisher(exchange, check=check).publish(
        [Outgoing("a.test", b"%d" % i, 0) for i in range(5)]
    )
    assert outcomes[:2] == [None, None]
    assert all(isinstance(o, DeliveryError) for o in outcomes[2:])


async def test_a_channel_the_broker_closes_fails_every_unconfirmed_publish(
    channel: AbstractChannel, check: Callable[[object], str | None] | None
) -> None:
    missing = await channel.get_exchange("no-such-exchange", ensure=False)  # the broker answers 404
    outcomes = await Publisher(missing, check=check).publish(
        [Outgoing("a.test", b"1", 0), Outgoing("a.test", b"2", 0)]
    )
    assert len(outcomes) == 2
    assert all(isinstance(o, NotConfirmed) for o in outcomes)


async def test_a_closed_channel_sends_nothing(
    amqp_url: str, check: Callable[[object], str | None] | None
) -> None:
    async with await aio_pika.connect(amqp_url) as connection:
        channel = await connection.channel(publisher_confirms=True)
        exchange, _ = await _exchange_and_queue(channel)
        await channel.close()
        with pytest.raises(aio_pika.exceptions.ChannelInvalidStateError):
            await Publisher(exchange, check=check).publish([Outgoing("a.test", b"1", 0)])


async def test_a_channel_without_confirms_is_refused(
    amqp_url: str, check: Callable[[object], str | None] | None
) -> None:
    async with await aio_pika.connect(amqp_url) as connection:
        channel = await connection.channel(publisher_confirms=False)
        exchange, name = await _exchange_and_queue(channel)
        with pytest.raises(CrawlerError, match="publisher_confirms=True"):
            await Publisher(exchange, check=check).publish([Outgoing("a.test", b"1", 0)])
        assert await drain(channel, name) == []


async def test_a_robust_channel_reopened_after_an_error_publishes_again(
    amqp_url: str, check: Callable[[object], str | None] | None
) -> None:
    # After the broker closes the channel, aio-pika opens a new aiormq channel under the same object.
    async with await aio_pika.connect_robust(amqp_url) as connection:
        channel = await connection.channel(publisher_confirms=True)
        exchange, name = await _exchange_and_queue(channel)
        publisher = Publisher(exchange, check=check)
        assert await publisher.publish([Outgoing("a.test", b"1", 0)]) == [None]
        before = await channel.get_underlay_channel()
        reopened = asyncio.Event()
        channel.reopen_callbacks.add(lambda *_: reopened.set())
        with pytest.raises(aio_pika.exceptions.ChannelNotFoundEntity):
            await channel.declare_queue("no-such-queue", passive=True)
        await reopened.wait()
        assert await channel.get_underlay_channel() is not before
        assert await publisher.publish([Outgoing("a.test", b"2", 0)]) == [None]
        assert [m.body for m in await drain(channel, name)] == [b"1", b"2"]


async def test_aiormqs_private_channel_state_has_the_shape_the_fast_path_uses(
    channel: AbstractChannel,
) -> None:
    problem = fast_path_problem(await channel.get_underlay_channel())
    assert problem is None, (
        f"aiormq {version('aiormq')} changed the private channel state crawler.publisher's fast path "
        f"writes to: {problem}. Publishers now fall back to aio-pika's public exchange.publish (correct, "
        "but slower); adapt the fast path and fast_path_problem in crawler/publisher.py to this aiormq"
    )
    assert fast_path_problem(object()) is not None


async def test_the_fallback_is_logged_once_with_its_reason(
    channel: AbstractChannel, caplog: pytest.LogCaptureFixture
) -> None:
    exchange, name = await _exchange_and_queue(channel)
    reason = f"{FORCED}, once"
    with caplog.at_level(logging.WARNING, logger="crawler.publisher"):
        for _ in range(2):  # two publishers, one warning
            publisher = Publisher(exchange, check=lambda _: reason)
            batch = [Outgoing("a.test", b"1", 0), Outgoing("a.test", b"2", 0)]
            assert await publisher.publish(batch) == [None, None]
    assert [r.getMessage() for r in caplog.records if reason in r.getMessage()] == [
        "batch publishing's fast path is off, publishing one message at a time through aio-pika instead "
        f"(slower): {reason}"
    ]
    assert len(await drain(channel, name)) == 4
