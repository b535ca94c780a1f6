"""The queue sampler against a real vhost: the queues it watches, and the depths it reports."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aio_pika
import pytest
from aio_pika import Message

from crawler.config import load_config
from crawler.monitor.metrics import Metrics
from crawler.monitor.sampler import QueueSampler, sampled_queues
from crawler.names import Names
from demo.site import Site, page
from tests.support.sites import IPS, write_config


def site() -> Site:
    return Site("a.test", IPS["a.test"], 8080, {"/": page("home", [])})  # never served: only named


def test_a_worker_samples_its_domains_and_the_shared_queues(tmp_path: Path) -> None:
    config = load_config(write_config(tmp_path / "d.yaml", [site()], retry_delays=[1, 5]))
    names = Names("p")
    queues = {(q.name, q.kind, q.domain) for q in sampled_queues(config, names, ["a.test"])}
    assert queues == {
        (names.domain_queue("a.test"), "domain", "a.test"),
        (names.retry_queue(1), "retry", ""),
        (names.retry_queue(5), "retry", ""),
        (names.dead, "dead", ""),
        (names.unrouted, "unrouted", ""),
    }


async def test_queue_depths_reach_the_metrics(tmp_path: Path, amqp_url: str, prefix: str) -> None:
    config = load_config(write_config(tmp_path / "d.yaml", [site()]))
    names = Names(prefix)
    metrics = Metrics(process=False)
    queue = names.domain_queue("a.test")
    labels = {"queue": queue, "kind": "domain", "domain": "a.test"}
    connection = await aio_pika.connect_robust(amqp_url)
    try:
        sampler = QueueSampler(connection, names, lambda: config, lambda: ["a.test"], metrics)
        await sampler.sample()  # declares the topology it samples
        assert metrics.registry.get_sample_value("crawler_queue_messages_ready", labels) == 0
        channel = await connection.channel(publisher_confirms=True)
        for n in range(3):
            await channel.default_exchange.publish(Message(str(n).encode()), routing_key=queue)
        await channel.close()
        await sampler.sample()
        assert metrics.registry.get_sample_value("crawler_queue_messages_ready", labels) == 3
        assert metrics.registry.get_sample_value("crawler_queue_consumers", labels) == 0
        # The domain queues summed (one here; the shared queues are not counted).
        assert metrics.registry.get_sample_value("crawler_frontier_messages_ready") == 3
    finally:
        await sampler._close()
        await connection.close()


@pytest.mark.timeout(30)
async def test_a_stop_that_lands_as_a_sample_opens_its_channel_ends_the_sampler(
    tmp_path: Path, amqp_url: str, prefix: str
) -> None:
    config = load_config(write_config(tmp_path / "d.yaml", [site()]))
    opening = asyncio.Event()

    class OpeningSlowly(QueueSampler):
        async def sample(self) -> None:
            opening.set()
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                # As aio-pika may: the cancellation comes out of the channel's opening as its failure.
                raise RuntimeError("the channel closed as it opened") from None

    connection = await aio_pika.connect_robust(amqp_url)
    try:
        sampler = OpeningSlowly(
            connection, Names(prefix), lambda: config, lambda: ["a.test"], Metrics(process=False)
        )
        task = asyncio.create_task(sampler.run())
        await asyncio.wait_for(opening.wait(), 10)
        task.cancel()
        # Not sampling again a few seconds later, and not for ever: the worker's stop holds.
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, 10)
    finally:
        await connection.close()
