"""The coverage alerts' readings: one worker of the fleet reads in an interval, whoever it is."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path

import pytest
from redis.asyncio import Redis

from crawler import connections
from crawler.config import parse_config
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


@pytest.mark.timeout(60)
async def test_of_three_workers_one_reads_the_coverage_each_interval(
    tmp_path: Path, amqp_url: str, prefix: str, sqlite_url: str, redis: Redis
) -> None:
    config, names = parse_config("domains: {shop.test: {}}"), Names(prefix)
    migrate(sqlite_url)
    database = Database(sqlite_url)
    readings: Counter[int] = Counter()

    class Counted(Alerting):
        async def _read(self, raiser: AlertRaiser) -> None:
            readings[id(self)] += 1

    loop = asyncio.get_running_loop()
    async with connections.broker(amqp_url, "test alerting") as connection:
        channel = await connection.channel()
        await exchanges.declare(channel, exchanges.topology(config, names))
        state, store = CrawlState(redis, names), CrawlStore(database)
        workers = [Counted(connection, redis, names, state, store, lambda: config) for _ in range(3)]
        began = loop.time()
        async with background(*(w.run(EVERY) for w in workers)):
            await until(lambda: readings.total() >= 20, within=30, what="20 readings")
            took = loop.time() - began
            total = readings.total()
    database.close()
    # Each reading holds the lease LEASE_SHARE of an interval: however the three are scheduled, no
    # more readings than that allows (each worker reading every interval would make three times as many).
    assert total <= took / (EVERY * LEASE_SHARE) + 1, (total, took)
