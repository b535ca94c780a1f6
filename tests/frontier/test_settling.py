"""Deliveries ended in groups against the real RabbitMQ and Redis: each acked at once after its group's
confirms and counts, a run at a channel's head as one `multiple` ack, never past a delivery still in
flight or settled otherwise."""

from __future__ import annotations

import asyncio

import aio_pika
import pytest
from aio_pika.abc import AbstractChannel, AbstractIncomingMessage, AbstractQueue
from redis.asyncio import Redis

from crawler.dedup.store import DONE, SeenStore
from crawler.frontier.crawls import CrawlState
from crawler.frontier.settling import Settling
from crawler.monitor import readings
from crawler.monitor.metrics import Metrics
from crawler.names import Names
from tests.support.wait import until


async def deliveries(
    amqp_url: str, bodies: list[bytes]
) -> tuple[aio_pika.abc.AbstractConnection, AbstractChannel, AbstractQueue, list[AbstractIncomingMessage]]:
    """A queue holding `bodies`, each delivered (unacked) on one channel, in order."""
    connection = await aio_pika.connect(amqp_url)
    channel = await connection.channel()
    await channel.set_qos(prefetch_count=len(bodies) + 5)
    queue = await channel.declare_queue("work", durable=True)
    for body in bodies:
        await channel.default_exchange.publish(aio_pika.Message(body), routing_key="work")
    got: list[AbstractIncomingMessage] = []

    async def on_message(message: AbstractIncomingMessage) -> None:
        got.append(message)

    await queue.consume(on_message)
    await until(lambda: len(got) == len(bodies))
    return connection, channel, queue, got


async def left_after_close(amqp_url: str, connection: aio_pika.abc.AbstractConnection) -> list[bytes]:
    """Close the consuming connection (unacked deliveries go back); the bodies left in the queue."""
    await connection.close()
    async with await aio_pika.connect(amqp_url) as again:
        channel = await again.channel()
        queue = await channel.declare_queue("work", durable=True)
        left = []
        while (message := await queue.get(fail=False)) is not None:
            left.append(message.body)
            await message.ack()
        return sorted(left)


def acks_sent(message: AbstractIncomingMessage) -> list[tuple[int, bool]]:
    """Every basic.ack sent from now on the channel `message` came on, as (tag, multiple), in order;
    each still goes to the broker."""
    channel = message.channel
    sent: list[tuple[int, bool]] = []
    real = channel.basic_ack

    async def basic_ack(delivery_tag: int, multiple: bool = False, wait: bool = True) -> None:
        sent.append((delivery_tag, multiple))
        await real(delivery_tag, multiple=multiple, wait=wait)

    channel.basic_ack = basic_ack  # type: ignore[method-assign]
    return sent


async def test_a_delivery_is_acked_at_once_behind_one_still_in_flight(
    amqp_url: str, redis: Redis, prefix: str
) -> None:
    names = Names(prefix)
    settling = Settling(SeenStore(redis, names), None)
    connection, _, _, got = await deliveries(amqp_url, [b"1", b"2", b"3", b"4"])
    sent = acks_sent(got[0])
    for message in got:
        settling.delivered(message)
    await settling.ack(got[1])
    await settling.ack(got[2])
    # 1 is still in flight: 2 and 3 are acked each on its own, and no ack covers 1.
    assert sent == [(2, False), (3, False)]
    assert await left_after_close(amqp_url, connection) == [b"1", b"4"]


async def test_deliveries_ending_together_at_the_head_go_as_one_multiple_ack(
    amqp_url: str, redis: Redis, prefix: str
) -> None:
    metrics = Metrics()
    settling = Settling(SeenStore(redis, Names(prefix)), None, metrics)
    connection, _, _, got = await deliveries(amqp_url, [b"1", b"2", b"3", b"4", b"5"])
    sent = acks_sent(got[0])
    for message in got:
        settling.delivered(message)
    await settling.ack(got[3])  # behind 1, 2 and 3: on its own
    await asyncio.gather(*(settling.ack(m) for m in got[:3]))
    assert sent == [(4, False), (3, True)]
    assert readings.ack_frames(metrics) == (2, 1)  # the frames written, as the worker's metrics count them
    assert await left_after_close(amqp_url, connection) == [b"5"]


async def test_a_nacked_delivery_is_never_covered_by_a_multiple_ack(
    amqp_url: str, redis: Redis, prefix: str
) -> None:
    settling = Settling(SeenStore(redis, Names(prefix)), None)
    connection, channel, _, got = await deliveries(amqp_url, [b"1", b"2", b"3", b"4"])
    sent = acks_sent(got[0])
    for message in got:
        settling.delivered(message)
    await got[0].nack(requeue=True)  # e.g. too late to fetch: back to the queue
    await settling.ack(got[1])  # 1's handler has not finished: 2 goes on its own
    await settling.finished(got[0])
    await asyncio.gather(settling.ack(got[2]), settling.ack(got[3]))  # now the head: one ack for both
    await settling.finished(got[1])  # finished after its ack: nothing more happens
    assert sent == [(2, False), (4, True)]
    # An ack of a tag already settled would have closed the channel (PRECONDITION_FAILED).
    assert not channel.is_closed
    # 1 went back to the queue (and was delivered again on this channel, unacked).
    assert await left_after_close(amqp_url, connection) == [b"1"]


async def test_a_delivery_left_unsettled_goes_back_instead_of_blocking(
    amqp_url: str, redis: Redis, prefix: str
) -> None:
    settling = Settling(SeenStore(redis, Names(prefix)), None)
    connection, _, _, got = await deliveries(amqp_url, [b"1", b"2"])
    sent = acks_sent(got[0])
    for message in got:
        settling.delivered(message)
    await settling.ack(got[1])
    await settling.finished(got[0])  # its handler ended without settling it: nacked
    assert sent == [(2, False)] and got[0].processed
    assert await left_after_close(amqp_url, connection) == [b"1"]


async def test_confirms_and_counts_are_written_before_the_ack(
    amqp_url: str, redis: Redis, prefix: str
) -> None:
    names = Names(prefix)
    seen = SeenStore(redis, names)
    crawls = CrawlState(redis, names)
    settling = Settling(seen, crawls)
    connection, _, _, got = await deliveries(amqp_url, [b"1", b"2", b"3"])
    for message in got:
        settling.delivered(message)
    stores = {crawl: seen.for_crawl(crawl) for crawl in ("c1", "c2")}
    assert await stores["c1"].claim([b"fp-a....", b"fp-b...."], b"page-1") == [True, True]
    assert await stores["c2"].claim([b"fp-c...."], b"page-3") == [True]
    await asyncio.gather(
        settling.ack(
            got[0], "c1", {("a.test", "ok"): 1, ("a.test", "routed"): 2}, [b"fp-a....", b"fp-b...."]
        ),
        settling.ack(got[1], "c1", {("a.test", "skipped"): 1}),
        settling.ack(got[2], "c2", {("b.test", "ok"): 1, ("b.test", "routed"): 1}, [b"fp-c...."]),
    )
    plain = names.for_crawl("c1").seen_key
    assert await redis.hmget(plain, [b"fp-a....", b"fp-b...."]) == [DONE, DONE]
    assert await redis.hget(names.for_crawl("c2").seen_key, b"fp-c....") == DONE
    counts = await crawls.counts("c1")
    assert (counts["a.test"]["ok"], counts["a.test"]["routed"], counts["a.test"]["skipped"]) == (1, 2, 1)
    assert (await crawls.counts("c2"))["b.test"]["routed"] == 1
    assert await left_after_close(amqp_url, connection) == []


async def test_a_failed_write_acks_nothing_and_says_so(amqp_url: str, redis: Redis, prefix: str) -> None:
    names = Names(prefix)
    settling = Settling(SeenStore(redis, names), CrawlState(redis, names))
    connection, _, _, got = await deliveries(amqp_url, [b"1"])
    sent = acks_sent(got[0])
    settling.delivered(got[0])
    await redis.set(names.crawl_counts_key("c1"), "not a hash")  # HINCRBY on it fails
    try:
        await settling.ack(got[0], "c1", {("a.test", "ok"): 1})
    except Exception as exc:
        assert "WRONGTYPE" in str(exc)
    else:
        raise AssertionError("the failed count was not reported")
    assert sent == []
    assert await left_after_close(amqp_url, connection) == [b"1"]


def frames_sent(message: AbstractIncomingMessage) -> list[tuple[str, int, bool]]:
    """Every basic.ack and basic.nack sent from now on the channel `message` came on, as (method, tag,
    multiple), in order; each still goes to the broker."""
    channel = message.channel
    sent: list[tuple[str, int, bool]] = []
    ack, nack = channel.basic_ack, channel.basic_nack

    async def basic_ack(delivery_tag: int, multiple: bool = False, wait: bool = True) -> None:
        sent.append(("ack", delivery_tag, multiple))
        await ack(delivery_tag, multiple=multiple, wait=wait)

    async def basic_nack(
        delivery_tag: int, multiple: bool = False, requeue: bool = True, wait: bool = True
    ) -> None:
        sent.append(("nack", delivery_tag, multiple))
        await nack(delivery_tag, multiple=multiple, requeue=requeue, wait=wait)

    channel.basic_ack = basic_ack  # type: ignore[method-assign]
    channel.basic_nack = basic_nack  # type: ignore[method-assign]
    return sent


def covered_unsettled(sent: list[tuple[str, int, bool]], seen: set[int]) -> list[int]:
    """Tags a `multiple` ack covered that were not seen, or not yet acked or nacked on their own."""
    settled: set[int] = set()
    wrong: list[int] = []
    for method, tag, multiple in sent:
        if multiple:
            wrong += [t for t in range(1, tag) if t not in settled and (t not in seen or method == "nack")]
            settled.update(range(1, tag + 1))
        settled.add(tag)
    return wrong


@pytest.mark.parametrize(
    ("bodies", "seen"),
    [
        ([b"1", b"2", b"3", b"4"], [1, 3, 4]),  # 2 dropped between two the pipeline saw
        ([b"1", b"2", b"3"], [3]),  # 1 and 2 dropped before the first, as around a channel's restore
    ],
)
async def test_a_delivery_the_worker_never_saw_is_returned_and_never_covered_by_a_multiple_ack(
    amqp_url: str, redis: Redis, prefix: str, bodies: list[bytes], seen: list[int]
) -> None:
    settling = Settling(SeenStore(redis, Names(prefix)), None)
    connection, channel, _, got = await deliveries(amqp_url, bodies)
    sent = frames_sent(got[0])
    # The client library dropped the others before the pipeline saw them.
    for tag in seen:
        settling.delivered(got[tag - 1])
    await asyncio.gather(*(settling.ack(got[tag - 1]) for tag in seen))
    assert covered_unsettled(sent, set(seen)) == []
    dropped = [tag for tag in range(1, len(bodies) + 1) if tag not in seen]
    assert [(method, tag) for method, tag, _ in sent if method == "nack"] == [("nack", t) for t in dropped]
    # They went back to their queue at once and came again (to the test's own consumer), not acked.
    await until(lambda: len(got) == len(bodies) + len(dropped))
    assert all(m.redelivered for m in got[len(bodies) :])
    assert not channel.is_closed
    assert await left_after_close(amqp_url, connection) == [bodies[t - 1] for t in dropped]
