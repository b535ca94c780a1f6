"""Coverage alerts raised on the change feed: one worker of the fleet at a time reads the current
crawls' coverage now and then, and publishes each alert not published yet; a crawl's set in Redis
makes each go out once."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager

from aio_pika.abc import AbstractConnection, AbstractExchange
from redis.asyncio import Redis

from crawler.changes.alerts import AlertFeed, alert_id
from crawler.changes.feed import changes_exchange
from crawler.config import CrawlConfig
from crawler.frontier.crawls import CrawlState
from crawler.monitor.quality import current_quality
from crawler.names import Names
from crawler.quality.compare import Alert, DomainQuality
from crawler.quality.report import QualityReport
from crawler.sink.crawls import CrawlStore
from crawler.stopping import still_cancelled

log = logging.getLogger(__name__)

ALERT_EVERY = 5.0  # seconds between readings of the current crawls' coverage
LAST_READING = 3.0  # seconds a stopping worker gives its last reading at most
LEASE_SHARE = 0.9  # of ALERT_EVERY a reading's lease lasts: the next interval's first asker takes it


class AlertRaiser:
    """Publishes each coverage alert of a crawl once, however many processes read its coverage how
    often: the one that adds the alert to the crawl's set in Redis publishes it."""

    def __init__(self, redis: Redis, names: Names, feed: AlertFeed) -> None:
        self._redis = redis
        self._names = names
        self._feed = feed

    async def raise_new(self, report: QualityReport) -> int:
        """Publish the alerts of `report` not published yet; how many. FeedError if the broker does
        not confirm them: they leave the set again, for the next reading to publish."""
        if report.crawl is None or not report.alerts:
            return 0
        crawl = report.crawl
        found: list[tuple[DomainQuality, Alert]] = [(d, a) for d in report.domains for a in d.alerts]
        key = self._names.crawl_alerted_key(crawl)
        async with self._redis.pipeline(transaction=False) as pipe:
            for _, alert in found:
                pipe.sadd(key, alert_id(crawl, alert))
            added = await pipe.execute()
        new = [pair for pair, first in zip(found, added, strict=True) if first]
        if not new:
            return 0
        try:
            await self._feed.announce(crawl, new)
        except BaseException:
            await self._redis.srem(key, *(alert_id(crawl, a) for _, a in new))
            raise
        for _, alert in new:
            log.warning("crawl %s: %s (on the change feed)", crawl, alert.message)
        return len(new)


class Alerting:
    """A worker's readings of the current crawls' coverage, each publishing the new alerts; of the
    fleet, only the worker that takes an interval's lease reads in it (the readings were 5.6 % of a
    worker's CPU at 2,500 domains: bench/README.md)."""

    def __init__(
        self,
        connection: AbstractConnection,
        redis: Redis,
        names: Names,
        state: CrawlState,
        store: CrawlStore,
        config: Callable[[], CrawlConfig],
    ) -> None:
        self._connection = connection
        self._redis = redis
        self._names = names
        self._state = state
        self._store = store
        self._config = config

    async def run(self, every: float = ALERT_EVERY) -> None:
        """Read every `every` seconds until cancelled; a reading or a channel lost is tried again."""
        while True:
            try:
                async with self._channel() as exchange:
                    raiser = AlertRaiser(self._redis, self._names, AlertFeed(exchange))
                    while True:
                        if await self._leased(every):
                            await self._read(raiser)
                        await asyncio.sleep(every)
            except Exception as exc:
                still_cancelled()
                log.warning("coverage alerts not raised: %r", exc)
            await asyncio.sleep(every)

    async def _leased(self, every: float) -> bool:
        """Whether this worker reads in this interval: the first of the fleet to ask. The lease
        lapses a little before the interval ends, so a worker stopped meanwhile holds no one up."""
        lease = max(1, int(every * 1000 * LEASE_SHARE))
        return bool(await self._redis.set(self._names.alerting_key, 1, nx=True, px=lease))

    async def last_reading(self, within: float = LAST_READING) -> None:
        """Read once more as the worker stops: a crawl it drained may have alerted since the last."""
        if self._connection.is_closed:
            return
        try:
            async with (
                asyncio.timeout(within),
                self._channel() as exchange,
            ):
                await self._read(AlertRaiser(self._redis, self._names, AlertFeed(exchange)))
        except Exception as exc:
            log.warning("coverage alerts not raised as the worker stopped: %r", exc)

    def _channel(self) -> AbstractAsyncContextManager[AbstractExchange]:
        # The exchange alone: the worker's consumer declared the rest.
        return changes_exchange(self._connection, self._config(), self._names, alone=True)

    async def _read(self, raiser: AlertRaiser) -> None:
        for report in await current_quality(self._state, self._store, self._config()):
            await raiser.raise_new(report)
