"""A worker built from the effective configuration: its fetchers, its parts, its consumer and what runs
alongside, each opened once and closed with the stack it was built in."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field

from redis.asyncio import Redis

from crawler import connections
from crawler.archive import Archive
from crawler.config import CrawlConfig
from crawler.dns import HostResolver
from crawler.fetch.aio import AiohttpFetcher
from crawler.fetch.api import ApiEndpoint, ApiFetcher, RoutingFetcher
from crawler.fetch.fetcher import BoundedFetcher, Fetcher, HttpFetcher, request_headers
from crawler.fetch.ratelimit import RateLimiter
from crawler.fetch.robots import Robots
from crawler.frontier.client import Connection, Frontier, frontier
from crawler.frontier.crawls import CrawlState
from crawler.frontier.quota import PageQuota
from crawler.frontier.urls import host_of
from crawler.monitor.metrics import Metrics
from crawler.names import Names
from crawler.settings import Settings
from crawler.sink.crawls import CrawlStore
from crawler.sink.database import Database
from crawler.sink.domains import DomainStore
from crawler.sink.groupcommit import GroupCommit
from crawler.sink.schedule import Schedule
from crawler.sink.sitemaps import SitemapStore
from crawler.sink.sql import Sink
from crawler.webhooks import delivering
from crawler.worker.addresses import Addresses, host_resolver
from crawler.worker.admission import Admission
from crawler.worker.archiving import Archiving, ArchivingFetcher, archive_for
from crawler.worker.backoffs import KeptBackoffs
from crawler.worker.consumer import Consumer, Parts
from crawler.worker.content import Contents, contents
from crawler.worker.cost import Cost
from crawler.worker.live import LiveConfig
from crawler.worker.page import Visitor
from crawler.worker.tuning import DEFAULT_TUNING, Tuning
from crawler.worker.watching import Monitoring, monitored


def make_fetcher(config: CrawlConfig, resolver: HostResolver | None = None) -> BoundedFetcher:
    """The fetch transport domains.yaml chose; with `resolver`, names are resolved through it."""
    make = AiohttpFetcher if config.fetcher == "aiohttp" else HttpFetcher
    return make(config, resolver=resolver)


def make_fetchers(
    config: CrawlConfig, settings: Settings, resolver: HostResolver | None = None
) -> tuple[Fetcher, str]:
    """The worker's fetcher (direct, plus the fetch service if any domain uses `fetch: api` or
    settings name one) and the name its credits count under."""
    wanted = config.defaults.uses_api or any(r.uses_api for r in config.rules.values())
    endpoint = (
        ApiEndpoint.checked(settings.fetch_api_url, settings.fetch_api_key)
        if wanted or settings.fetch_api_url
        else None
    )
    direct = make_fetcher(config, resolver)
    if endpoint is None:
        return direct, "gateway"
    api = ApiFetcher(config, endpoint)
    return RoutingFetcher(direct, api), api.backend


def parts(
    f: Frontier,
    names: Names,
    config: CrawlConfig,
    sink: Sink,
    fetcher: Fetcher,
    metrics: Metrics,
    backend: str = "gateway",
    database: Database | None = None,
    archive: Archive | None = None,
    content: Contents | None = None,
    resolver: HostResolver | None = None,
) -> Parts:
    """A consumer's parts, each made once: the live configuration, the page visit, dedup, quota, cost
    and writes; with `database` (the sink's), what sitemap tasks, kept back-offs and crawl records
    read and write in it; with `archive`, where domains with `archive: true` write their answers;
    with `content`, what makes content; with `resolver`, the fleet's DNS cache `per_ip:` reads."""
    live = LiveConfig(config)
    archiving = _archiving(live, archive, metrics) if archive is not None else None
    cost = Cost(f.redis, names, metrics, backend)
    quota = PageQuota(f.redis, names)
    # Pauses and back-offs kept where a Redis loss cannot reach them.
    domain_state = DomainStore(database) if database else None
    records = CrawlStore(database) if database else None
    backoffs = KeptBackoffs(domain_state) if domain_state else None
    addresses = Addresses(resolver, lambda: live.config) if resolver is not None else None
    visit = visitor(live, f.redis, names, fetcher, archiving, backoffs, content, addresses)
    admission = Admission(
        f.redis,
        names,
        visit.limiter,
        visit.robots,
        live.rules,
        lambda d: live.config.in_layout(d),
        addresses,
    )
    return Parts(
        live,
        visit,
        f.seen,
        quota,
        cost,
        GroupCommit(sink),
        CrawlState(f.redis, names, domain_state, records),
        f.recovery,
        admission,
        f.redis,
        SitemapStore(database) if database else None,
        Schedule(database) if database else None,
        domain_state,
        backoffs,
        records,
    )


def _archiving(live: LiveConfig, archive: Archive, metrics: Metrics) -> Archiving:
    """Where answers are archived, each under its domain as the live configuration names it."""

    def domain_of(url: str) -> str:
        host = host_of(url)
        return live.config.domain_of(host) or host

    return Archiving(archive, request_headers(live.config), metrics, domain_of)


def visitor(
    live: LiveConfig,
    redis: Redis,
    names: Names,
    fetcher: Fetcher,
    archiving: Archiving | None = None,
    backoffs: KeptBackoffs | None = None,
    content: Contents | None = None,
    addresses: Addresses | None = None,
) -> Visitor:
    """One page's visit: robots.txt and the rate limiter shared through Redis, over `fetcher`; with
    `archiving`, the answers of domains with `archive: true` are archived; with `backoffs`, each
    domain's back-off is kept in the database too, and a bucket Redis lost comes back with it; with
    `content`, pages of domains with `content:` on get their content; with `addresses`, each request
    takes a token of its address's `per_ip:` budget too."""
    robots_fetcher = fetcher if archiving is None else ArchivingFetcher(fetcher, archiving)
    return Visitor(
        fetcher,
        RateLimiter(redis, names, kept=backoffs.get) if backoffs else RateLimiter(redis, names),
        Robots(redis, names, robots_fetcher, live.config.user_agent),
        live.scope,
        live.rules,
        live.config.max_retry_after,
        archiving,
        backoffs,
        content,
        addresses,
    )


@dataclass(frozen=True, slots=True)
class Worker:
    """A built worker: its frontier, its consumer and the parts that consumer works with."""

    frontier: Frontier
    consumer: Consumer
    parts: Parts


@dataclass(frozen=True, slots=True)
class WorkerBuilder:
    """What a worker is built from: the settings, the effective configuration, its domains (None:
    every configured one) and how its consumer runs (see wiring.consume)."""

    settings: Settings
    config: CrawlConfig
    domains: Sequence[str] | None
    role: str
    monitoring: Monitoring = field(default_factory=Monitoring)
    tuning: Tuning = DEFAULT_TUNING
    burst: bool = False
    prefetch: int | None = None
    grace: float = 30.0
    config_path: str | None = None
    more: Callable[[], bool] = lambda: False

    async def build(self, stack: AsyncExitStack, db: Database) -> Worker:
        """Open the worker's connections, stores and services in `stack` over the process's database
        `db`, check what must hold before its first page, and start what runs alongside it
        (monitoring, webhooks)."""
        f = await stack.enter_async_context(frontier(self.settings, self.role, self.config, db))
        publishing = await self._publishing(stack)
        made = await self._parts(stack, f, db)
        consumer = self._consumer(stack, f, made, publishing)
        await consumer.seen.check()  # a fleet whose processes disagree on dedup would crawl twice
        if made.backoffs is not None:
            await made.backoffs.read()  # before the first token: Redis may have lost the back-offs
        await stack.enter_async_context(monitored(self.monitoring, consumer, f.redis, role=self.role))
        await self._webhooks(stack, f, made.live, publishing)
        return Worker(f, consumer, made)

    @property
    def _label(self) -> str:
        return connections.process_label(self.role)

    async def _publishing(self, stack: AsyncExitStack) -> Connection:
        """The connection links, retries and dead letters go out on."""
        # Its own connection: RabbitMQ throttles a connection that publishes faster than its queues
        # take, and on a shared one that would hold up deliveries and acks too.
        role = f"{self.role} publisher"
        blocking = connections.Blocking(connections.process_label(role))
        self.monitoring.metrics.follow_blocking(blocking)
        return await stack.enter_async_context(connections.broker(self.settings.amqp_url, role, blocking))

    async def _fetcher(self, stack: AsyncExitStack, resolver: HostResolver | None) -> tuple[Fetcher, str]:
        """The worker's fetcher and the name its credits count under (make_fetchers), the renders
        domains.yaml asks of the fetch service checked."""
        fetcher, backend = make_fetchers(self.config, self.settings, resolver)
        stack.push_async_callback(fetcher.aclose)
        if isinstance(fetcher, RoutingFetcher) and fetcher.api is not None:
            await fetcher.api.check_renders(self.config)
        return fetcher, backend

    async def _parts(self, stack: AsyncExitStack, f: Frontier, db: Database) -> Parts:
        """The consumer's parts, over the sink, fetcher, archive and content they use, all closed
        with `stack`."""
        settings, config, metrics = self.settings, self.config, self.monitoring.metrics
        sink = Sink(db)
        resolver = host_resolver(config, f.redis, settings.names)
        fetcher, backend = await self._fetcher(stack, resolver)
        # Opens no file until an archived domain's first answer: domains.yaml may turn it on later.
        archive = await stack.enter_async_context(archive_for(settings, config, metrics))
        if any(rules.archive for rules in config.rules.values()):
            archive.check()  # before any page is taken: each would fail and be retried
        content = await stack.enter_async_context(
            contents(config, f.redis, settings.names, metrics, self.tuning.content_processes)
        )
        return parts(
            f, settings.names, config, sink, fetcher, metrics, backend, db, archive, content, resolver
        )

    def _consumer(self, stack: AsyncExitStack, f: Frontier, made: Parts, publishing: Connection) -> Consumer:
        """The consumer of the worker's domains, more connections opened in `stack` as it needs them."""

        async def connect() -> Connection:
            # More domains than one connection's channels: another connection, closed with the rest.
            return await stack.enter_async_context(connections.broker(self.settings.amqp_url, self.role))

        return Consumer(
            made,
            f,
            self.domains,
            label=self._label,
            prefetch=self.prefetch,
            burst=self.burst,
            grace=self.grace,
            config_path=self.config_path,
            metrics=self.monitoring.metrics,
            publishing=publishing,
            connect=connect,
            tuning=self.tuning,
            more=self.more,
        )

    async def _webhooks(
        self, stack: AsyncExitStack, f: Frontier, live: LiveConfig, publishing: Connection
    ) -> None:
        """Deliver webhooks alongside, on a channel of their own (the crawl never waits on them), if
        domains.yaml names any."""
        if not self.config.webhooks:
            return
        await stack.enter_async_context(
            delivering(
                lambda: live.config,
                self.settings.names,
                f.connection,
                self.monitoring.metrics,
                self._label,
                publishing=publishing,
            )
        )
