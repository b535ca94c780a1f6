"""The frontier client: a crawl's broker and dedup store, and the queue operations programs make on them."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from typing import TypeAlias

from aio_pika.abc import AbstractExchange, AbstractRobustChannel, AbstractRobustConnection
from redis.asyncio import Redis

from crawler import connections
from crawler.config import CrawlConfig, FrontierConfig
from crawler.dedup.store import SeenStore
from crawler.fetch.robots import origin_of
from crawler.frontier.crawls import CrawlOptions, CrawlState
from crawler.frontier.drain import Drain, DrainPacing
from crawler.frontier.exchanges import declare, topology, work_queues
from crawler.frontier.parking import Parking
from crawler.frontier.publisher import Publisher
from crawler.frontier.quota import PageQuota
from crawler.frontier.recovery import Recovery
from crawler.frontier.router import PublishFailed, Routed, Router
from crawler.frontier.scope import Scope
from crawler.frontier.settling import AckObserver, Settling
from crawler.frontier.sitemaps import find_task, new_round
from crawler.frontier.subscriptions import Handler, SubscriptionPacing, Subscriptions
from crawler.frontier.urls import host_of
from crawler.names import CLOSE_WAIT, Names
from crawler.settings import Settings
from crawler.sink.crawls import CrawlStore
from crawler.sink.database import Database, opened
from crawler.sink.sql import migrate

log = logging.getLogger(__name__)

Connection: TypeAlias = AbstractRobustConnection
"""A connection to the broker that reconnects by itself (crawler.connections.broker opens one)."""

SEED_CLAIMANT = b"seed"
NO_OPTIONS = CrawlOptions()


@dataclass(frozen=True, slots=True)
class Publishing:
    """A channel with confirms on which the crawl's topology was declared: what a program publishes on."""

    channel: AbstractRobustChannel
    names: Names
    declared_in: float  # seconds the declaration took

    async def exchange(self, name: str) -> AbstractExchange:
        """A declared exchange of the topology, by name."""
        return await self.channel.get_exchange(name, ensure=False)

    async def router(
        self, config: CrawlConfig, seen: SeenStore, quota: PageQuota, *, scope: Scope | None = None
    ) -> Router:
        """A router into the frontier exchange over this channel."""
        return Router(config, await self.exchange(self.names.frontier), seen, quota, scope=scope)

    async def parking(self, label: str) -> Parking:
        """Retries and dead letters published over this channel, signed by consumer `label`."""
        return Parking(await self.exchange(self.names.retry), await self.exchange(self.names.dead), label)

    async def redeclare(self, config: CrawlConfig) -> None:
        """Declare what an edited configuration adds (new domains' queues)."""
        await declare(self.channel, topology(config, self.names))


async def declare_topology(connection: Connection, config: CrawlConfig, names: Names) -> None:
    """Declare every exchange and queue of the crawl, on a channel of `connection` closed after."""
    channel = await connection.channel()
    try:
        await declare(channel, topology(config, names))
    finally:
        await channel.close()


@asynccontextmanager
async def publishing(connection: Connection, config: CrawlConfig, names: Names) -> AsyncIterator[Publishing]:
    """Declare the topology on a new channel with confirms over `connection`; closed on exit."""
    channel = await connections.publishing_channel(connection)
    try:
        started = time.monotonic()
        await declare(channel, topology(config, names))
        yield Publishing(channel, names, time.monotonic() - started)
    finally:
        await _close(channel)


async def _close(channel: AbstractRobustChannel) -> None:
    if channel.is_closed:
        return
    # A blocked connection's channel would wait for its close-ok as long as the alarm lasts.
    try:
        await asyncio.wait_for(channel.close(), CLOSE_WAIT)
    except TimeoutError:
        log.warning(
            "the publishing channel did not close within %.0fs (RabbitMQ blocks publishing?): "
            "closing its connection instead",
            CLOSE_WAIT,
        )


@dataclass(frozen=True, slots=True)
class Frontier:
    """The broker and dedup store of one crawl, and the queue operations made on them."""

    connection: Connection
    redis: Redis
    seen: SeenStore
    recovery: Recovery  # rebuilds the dedup store from the sink if Redis loses it
    names: Names

    @property
    def quota(self) -> PageQuota:
        """The pages each domain of a crawl has taken, against its limit."""
        return PageQuota(self.redis, self.names)

    async def declare(self, config: CrawlConfig) -> None:
        """Declare every exchange and queue of the crawl."""
        await declare_topology(self.connection, config, self.names)

    @asynccontextmanager
    async def publishing(self, config: CrawlConfig) -> AsyncIterator[Publishing]:
        """The topology declared on a channel with confirms of this frontier's connection."""
        async with publishing(self.connection, config, self.names) as p:
            yield p

    @asynccontextmanager
    async def router(self, config: CrawlConfig) -> AsyncIterator[Router]:
        """A router into the declared frontier, publishing with confirms."""
        async with self.publishing(config) as p:
            yield await p.router(config, self.seen, self.quota)

    def subscriptions(
        self,
        frontier: FrontierConfig,
        handler: Handler,
        prefetch_of: Callable[[str], int],
        *,
        connect: Callable[[], Awaitable[Connection]] | None,
        label: str,
        pacing: SubscriptionPacing,
    ) -> Subscriptions:
        """Consume: domain queues subscribed on this connection (and on more that `connect` opens)."""
        return Subscriptions(
            self.names, frontier, self.connection, connect, handler, prefetch_of, label=label, tuning=pacing
        )

    def settling(self, crawls: CrawlState | None, metrics: AckObserver | None = None) -> Settling:
        """Settle: deliveries acked once their links' claims are confirmed and their counts written."""
        return Settling(self.seen, crawls, metrics)

    def drain(
        self, queues: Callable[[], Sequence[str]], tiers: Callable[[], int], pacing: DrainPacing
    ) -> Drain:
        """Is-empty: burst mode's check that the work queues hold nothing, asked of the broker."""
        return Drain(self.connection, queues, tiers, pacing)

    async def count(self, crawl: str | None, counts: dict[tuple[str, str], int]) -> None:
        """Add `counts` to crawl `crawl`'s counts (none for the default crawl)."""
        if crawl is not None and counts:
            await CrawlState(self.redis, self.names).count(crawl, counts)

    async def seed(
        self,
        config: CrawlConfig,
        seeds: Sequence[str],
        priority: int | None,
        crawl: str | None = None,
        options: CrawlOptions | None = None,
    ) -> Routed:
        """Declare the topology and route canonical seeds, counted in their crawl's counts if they
        have one; their origins' sitemaps are read in the domains that read them."""
        options = options or NO_OPTIONS
        async with self.publishing(config) as p:
            router = await p.router(config, self.seen, self.quota)
            routed = await route_within(
                router,
                seeds,
                depth=0,
                claimant=SEED_CLAIMANT,
                crawl=crawl,
                options=options,
                priority=priority,
            )
            state = CrawlState(self.redis, self.names) if crawl is not None else None
            exchange = await p.exchange(self.names.frontier)
            tasks = await _find_sitemaps(exchange, config, seeds, crawl, options, state)
        counts = routed.counts()
        counts.update({(d, "sitemaps_queued"): n for d, n in tasks.items()})
        await self.count(crawl, counts)
        return routed

    async def reset(self, config: CrawlConfig, database: Database) -> None:
        """Forget what was seen and purge the work queues, so the next seeds start a fresh crawl; the
        crawls still running are marked interrupted first, with their counts (which go with the rest)."""
        records = CrawlStore(database)
        crawls = CrawlState(self.redis, self.names, records=records)
        for record in await asyncio.to_thread(records.list, "running"):
            await crawls.end(record.id, "interrupted")
        await self.declare(config)
        channel = await self.connection.channel()
        try:
            for name in work_queues(config, self.names, sorted(config.domains)):
                queue = await channel.get_queue(name, ensure=False)
                await queue.purge()
        finally:
            await channel.close()
        for pattern in self.names.progress_patterns:
            # The compact dedup store alone has a key per ~256 URLs: scan and delete in big steps.
            keys = [key async for key in self.redis.scan_iter(match=pattern, count=1000)]
            for i in range(0, len(keys), 1000):
                await self.redis.delete(*keys[i : i + 1000])
        # The default crawl's store, empty on purpose: its pages stored before are not rebuilt into it.
        await self.seen.forgotten()


@asynccontextmanager
async def frontier(
    settings: Settings, role: str, config: CrawlConfig | None = None, database: Database | None = None
) -> AsyncIterator[Frontier]:
    """Connect to RabbitMQ and Redis; the dedup store is laid out as `config` says (default: plain).

    A dedup store Redis lost is rebuilt from the pages in `database` (the process's; None: one of
    its own, closed with it).
    """
    async with AsyncExitStack() as stack:
        connection = await stack.enter_async_context(connections.broker(settings.amqp_url, role))
        redis = await stack.enter_async_context(connections.redis(settings.redis_url))
        dedup = config.dedup if config is not None else None
        db = stack.enter_context(opened(database or settings.database_url))
        discovered = config.discovered if config is not None else lambda domain: False
        recovery = Recovery(redis, settings.names, db, discovered=discovered)
        seen = SeenStore(redis, settings.names, dedup, recovery)
        yield Frontier(connection, redis, seen, recovery, settings.names)


@asynccontextmanager
async def routing(settings: Settings, config: CrawlConfig, role: str) -> AsyncIterator[Router]:
    """A router into the frontier, publishing with confirms, for a program that finds URLs itself."""
    async with frontier(settings, role, config) as f, f.router(config) as router:
        yield router


async def reset(settings: Settings, config: CrawlConfig, database: Database | None = None) -> None:
    """Reset the crawl (Frontier.reset) over a connection of its own, the schema migrated first;
    `database`: the process's (None: one of its own)."""
    with opened(database or settings.database_url) as db:
        await asyncio.to_thread(migrate, db)
        async with frontier(settings, "crawler reset", database=db) as f:
            await f.reset(config, db)


async def route_within(
    router: Router,
    urls: Sequence[str],
    *,
    depth: int,
    claimant: bytes,
    crawl: str | None,
    options: CrawlOptions = NO_OPTIONS,
    priority: int | None = None,
    via: tuple[str, ...] = (),
    confirm: bool = True,
) -> Routed:
    """Route URLs into crawl `crawl` within its options' limits (its domains, its depth); the rest as
    Router.route takes them."""
    return await router.route(
        urls,
        depth=depth,
        claimant=claimant,
        priority=priority,
        via=via,
        crawl=crawl,
        domains=options.domains,
        max_depth=options.max_depth,
        confirm=confirm,
    )


async def _find_sitemaps(
    exchange: AbstractExchange,
    config: CrawlConfig,
    seeds: Sequence[str],
    crawl: str | None,
    options: CrawlOptions,
    state: CrawlState | None,
) -> Counter[str]:
    """Begin a round of reading the sitemaps of the seeds' origins, in the domains that read them;
    the find tasks published, per domain (opened first in the crawl's counts, with `state`)."""
    origins: dict[str, str] = {}
    for seed in seeds:
        domain = config.domain_of(host_of(seed))
        if domain is None or (options.domains is not None and domain not in options.domains):
            continue
        if config.rules_for(domain).sitemaps is not False:
            origins.setdefault(origin_of(seed), domain)
    if not origins:
        return Counter()
    round_ = new_round()
    if state is not None and crawl is not None:
        await state.open(crawl, len(origins))
    outcomes = await Publisher(exchange).publish([find_task(config, o, round_, crawl) for o in origins])
    failed = [o for o, outcome in zip(origins, outcomes, strict=True) if outcome is not None]
    if failed and state is not None and crawl is not None:
        await state.open(crawl, -len(failed))
    if failed:
        raise PublishFailed(f"{len(failed)} of {len(origins)} sitemap tasks were not confirmed")
    return Counter(origins.values())
