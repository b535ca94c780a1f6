"""The coverage alerts' readings: one worker of the fleet reads in an interval, whoever it is."""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass

import pytest
from aio_pika.abc import AbstractExchange, AbstractRobustConnection
from redis.asyncio import Redis

from crawler import connections
from crawler.config import CrawlConfig, parse_config
from crawler.frontier import exchanges
from crawler.frontier.crawls import CrawlState
from crawler.monitor.alerting import LEASE_SHARE, Alerting, AlertRaiser
from crawler.names import Names
from crawler.sink.crawls import CrawlStore
from crawler.sink.database import Database
from crawler.sink.sql import migrate
from crawler.worker.background import background
from tests.support.wait import until

EVERY = 0.1


@dataclass(frozen=True, slots=True)
class Fleet:
    """What each worker's coverage alerts read from: one crawl configuration and the shared stores."""

    config: CrawlConfig
    names: Names
    state: CrawlState
    store: CrawlStore

    def alerting(self, cls: type[Alerting], connection: AbstractRobustConnection, redis: Redis) -> Alerting:
        """A worker's alerting, of class `cls`."""
        return cls(connection, redis, self.names, self.state, self.store, lambda: self.config)


@pytest.fixture
def fleet(prefix: str, sqlite_url: str, redis: Redis) -> Iterator[Fleet]:
    names = Names(prefix)
    migrate(sqlite_url)
    database = Database(sqlite_url)
    try:
        yield Fleet(
            parse_config("domains: {shop.test: {}}"), names, CrawlState(redis, names), CrawlStore(database)
        )
    finally:
        database.close()


@pytest.mark.timeout(60)
async def test_of_three_workers_one_reads_the_coverage_each_interval(
    amqp_url: str, redis: Redis, fleet: Fleet
) -> None:
    readings: Counter[int] = Counter()

    class Counted(Alerting):
        async def _read(self, raiser: AlertRaiser) -> None:
            readings[id(self)] += 1

    loop = asyncio.get_running_loop()
    async with connections.broker(amqp_url, "test alerting") as connection:
        channel = await connection.channel()
        await exchanges.declare(channel, exchanges.topology(fleet.config, fleet.names))
        workers = [fleet.alerting(Counted, connection, redis) for _ in range(3)]
        began = loop.time()
        async with background(*(w.run(EVERY) for w in workers)):
            await until(lambda: readings.total() >= 20, within=30, what="20 readings")
            took = loop.time() - began
            total = readings.total()
    # Each reading holds the lease LEASE_SHARE of an interval: however the three are scheduled, no
    # more readings than that allows (each worker reading every interval would make three times as many).
    assert total <= took / (EVERY * LEASE_SHARE) + 1, (total, took)


@pytest.mark.timeout(30)
async def test_a_stop_that_lands_as_its_channel_opens_ends_the_readings(
    amqp_url: str, redis: Redis, fleet: Fleet
) -> None:
    opening = asyncio.Event()

    class OpeningSlowly(Alerting):
        @contextlib.asynccontextmanager
        async def _channel(self) -> AsyncIterator[AbstractExchange]:
            opening.set()
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                # As aio-pika may: the cancellation comes out of the channel's opening as its failure.
                raise RuntimeError("the channel closed as it opened") from None
            yield  # type: ignore[misc]  # pragma: no cover - never opens

    async with connections.broker(amqp_url, "test alerting") as connection:
        task = asyncio.create_task(fleet.alerting(OpeningSlowly, connection, redis).run(every=60))
        await asyncio.wait_for(opening.wait(), 10)
        task.cancel()
        # Not a reading minute later, and not for ever: the stop holds.
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, 10)
