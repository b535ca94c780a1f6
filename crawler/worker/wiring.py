"""A crawl's moving parts wired together: seed it, consume it, reset it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass

from redis.asyncio import Redis

from crawler import connections
from crawler.archive import Archive
from crawler.config import CrawlConfig
from crawler.dns import HostResolver
from crawler.errors import BadURL, ConfigError
from crawler.fetch.aio import AiohttpFetcher
from crawler.fetch.api import ApiEndpoint, ApiFetcher, RoutingFetcher
from crawler.fetch.fetcher import BoundedFetcher, Fetcher, HttpFetcher, request_headers
from crawler.fetch.ratelimit import RateLimiter
from crawler.fetch.robots import Robots
from crawler.frontier.client import Connection, Frontier, frontier
from crawler.frontier.crawls import CrawlOptions, CrawlState
from crawler.frontier.quota import PageQuota
from crawler.frontier.router import Routed
from crawler.frontier.urls import canonicalise, host_of
from crawler.monitor.metrics import DomainStats, Metrics
from crawler.names import Names
from crawler.settings import Settings
from crawler.sink.crawls import CrawlStore
from crawler.sink.domains import DomainStore
from crawler.sink.groupcommit import GroupCommit
from crawler.sink.schedule import Schedule
from crawler.sink.sitemaps import SitemapStore
from crawler.sink.sql import Sink, migrate
from crawler.webhooks import delivering
from crawler.worker.addresses import Addresses, host_resolver
from crawler.worker.admission import Admission
from crawler.worker.archiving import Archiving, ArchivingFetcher, archive_for
from crawler.worker.backoffs import KeptBackoffs
from crawler.worker.consumer import Consumer, Ending, Parts
from crawler.worker.content import Contents, contents
from crawler.worker.cost import Cost
from crawler.worker.live import LiveConfig
from crawler.worker.page import Visitor
from crawler.worker.tuning import DEFAULT_TUNING, Tuning
from crawler.worker.watching import Monitoring, monitored


@dataclass(frozen=True, slots=True)
class Consumed:
    """What consume() did: its outcomes per domain, and how it ended."""

    stats: dict[str, DomainStats]
    ending: Ending


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
    database_url: str | None = None,
    archive: Archive | None = None,
    content: Contents | None = None,
    resolver: HostResolver | None = None,
) -> Parts:
    """A consumer's parts, each made once: the live configuration, the page visit, dedup, quota, cost
    and writes; with `database_url`, what sitemap tasks read and write in the sink; with `archive`,
    where the answers of domains with `archive: true` are written; with `content`, what makes the
    content of domains with `content:` on; with `resolver`, the fleet's DNS cache `per_ip:` reads."""
    live = LiveConfig(config)
    archiving = None
    if archive is not None:

        def domain_of(url: str) -> str:
            host = host_of(url)
            return live.config.domain_of(host) or host

        archiving = Archiving(archive, request_headers(config), metrics, domain_of)
    cost = Cost(f.redis, names, metrics, backend)
    quota = PageQuota(f.redis, names)
    # Pauses and back-offs kept where a Redis loss cannot reach them.
    domain_state = DomainStore(database_url) if database_url else None
    records = CrawlStore(database_url) if database_url else None
    backoffs = KeptBackoffs(domain_state) if domain_state else None
    addresses = Addresses(resolver, lambda: live.config) if resolver is not None else None
    visit = visitor(live, f.redis, names, fetcher, archiving, backoffs, content, addresses)
    admission = Admission(
        f.redis,
        names,
        visit.limiter,
        visit.robots,
        live.rules,
        lambda d: live.config.discovered(d),
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
        SitemapStore(database_url) if database_url else None,
        Schedule(database_url) if database_url else None,
        domain_state,
        backoffs,
        records,
    )


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


def check_domains(config: CrawlConfig, domains: Sequence[str] | None) -> list[str]:
    """The chosen domains (all configured ones if none); ConfigError for an unknown one."""
    if not domains:
        if not config.domains:
            raise ConfigError("domains.yaml lists no domains: add one under `domains:`")
        return sorted(config.domains)
    chosen = [d.strip().lower() for d in domains if d.strip()]
    if not chosen:
        raise ConfigError(
            f"no domain named in {list(domains)!r} (configured: {', '.join(sorted(config.domains))})"
        )
    unknown = [d for d in chosen if d not in config.domains]
    if unknown:
        raise ConfigError(
            f"not configured in domains.yaml: {', '.join(unknown)} "
            f"(configured: {', '.join(sorted(config.domains))})"
        )
    return chosen


def check_seeds(config: CrawlConfig, urls: Sequence[str]) -> list[str]:
    """Canonical seeds; BadURL naming the first seed that cannot be crawled."""
    seeds = []
    for url in urls:
        canon = canonicalise(url, tracking=config.dropped_params)
        host = canon.split("/")[2].rsplit(":", 1)[0]
        if config.domain_of(host) is None and not config.follow_other_domains:
            raise BadURL(
                f"{url}: its host is in no domain of domains.yaml "
                f"(configured: {', '.join(sorted(config.domains)) or 'none'})"
            )
        seeds.append(canon)
    return seeds


async def seed(
    settings: Settings,
    config: CrawlConfig,
    urls: Sequence[str],
    priority: int | None = None,
    crawl: str | None = None,
    options: CrawlOptions | None = None,
) -> Routed:
    """Declare the topology and route the seed URLs (of crawl `crawl`; None: the default crawl)."""
    seeds = check_seeds(config, urls)
    async with frontier(settings, "crawler seed", config) as f:
        return await f.seed(config, seeds, priority, crawl, options)


async def consume(
    settings: Settings,
    config: CrawlConfig,
    domains: Sequence[str] | None = None,
    *,
    burst: bool = False,
    prefetch: int | None = None,
    grace: float = 30.0,
    seeds: Sequence[str] = (),
    role: str = "crawler-consume",
    config_path: str | None = None,
    monitoring: Monitoring | None = None,
    tuning: Tuning = DEFAULT_TUNING,
    more: Callable[[], bool] = lambda: False,
    crawl: str | None = None,
) -> Consumed:
    """Consume the chosen domains' queues (after routing `seeds`) until stopped or drained.

    With `config_path`, edits of that file (or SIGHUP) reconfigure the running consumer. In burst
    mode, `more()` says work is still to come from outside the queues: not drained while it does,
    and `crawl` (the one this process began) is marked finished once drained, interrupted if not.
    """
    monitoring = monitoring or Monitoring()
    chosen = check_domains(config, domains)
    canonical_seeds = check_seeds(config, seeds)
    await asyncio.to_thread(migrate, settings.database_url)
    async with AsyncExitStack() as stack:
        f = await stack.enter_async_context(frontier(settings, role, config))
        # Publishing on its own connection: RabbitMQ throttles a connection that publishes faster
        # than its queues take, and on a shared one that would hold up deliveries and acks too.
        blocking = connections.Blocking(connections.process_label(f"{role} publisher"))
        monitoring.metrics.follow_blocking(blocking)
        publishing = await stack.enter_async_context(
            connections.broker(settings.amqp_url, f"{role} publisher", blocking)
        )
        sink = Sink(settings.database_url)
        stack.callback(sink.close)
        resolver = host_resolver(config, f.redis, settings.names)
        fetcher, backend = make_fetchers(config, settings, resolver)
        stack.push_async_callback(fetcher.aclose)
        if isinstance(fetcher, RoutingFetcher) and fetcher.api is not None:
            await fetcher.api.check_renders(config)

        async def connect() -> Connection:
            # More domains than one connection's channels: another connection, closed with the rest.
            return await stack.enter_async_context(connections.broker(settings.amqp_url, role))

        # Opens no file until an archived domain's first answer: domains.yaml may turn it on later.
        archive = await stack.enter_async_context(archive_for(settings, config, monitoring.metrics))
        if any(rules.archive for rules in config.rules.values()):
            archive.check()  # before any page is taken: each would fail and be retried
        content = await stack.enter_async_context(
            contents(config, f.redis, settings.names, monitoring.metrics, tuning.content_processes)
        )
        made = parts(
            f,
            settings.names,
            config,
            sink,
            fetcher,
            monitoring.metrics,
            backend,
            settings.database_url,
            archive,
            content,
            resolver,
        )
        for closing in (made.sitemap_store, made.schedule, made.domain_state, made.crawl_records):
            if closing is not None:
                stack.callback(closing.close)
        consumer = Consumer(
            made,
            f,
            chosen if domains else None,
            label=connections.process_label(role),
            prefetch=prefetch,
            burst=burst,
            grace=grace,
            config_path=config_path,
            metrics=monitoring.metrics,
            publishing=publishing,
            connect=connect,
            tuning=tuning,
            more=more,
        )
        await consumer.seen.check()  # a fleet whose processes disagree on dedup would crawl twice
        if made.backoffs is not None:
            await made.backoffs.read()  # before the first token: Redis may have lost the back-offs
        await stack.enter_async_context(monitored(monitoring, consumer, f.redis, role=role))
        if config.webhooks:  # alongside, on a channel of their own: the crawl never waits on them
            label = connections.process_label(role)
            live = made.live
            await stack.enter_async_context(
                delivering(
                    lambda: live.config,
                    settings.names,
                    f.connection,
                    monitoring.metrics,
                    label,
                    publishing=publishing,
                )
            )
        if canonical_seeds:
            await f.seed(config, canonical_seeds, None)
        await consumer.run()
        ending = consumer.ending()
        if burst and crawl is not None and made.crawls is not None:
            # Drained, its work is over whatever its counts say; stopped or halted, it is not.
            await made.crawls.end(crawl, "interrupted" if ending.stopped or ending.halted else "finished")
        return Consumed(consumer.summary(), ending)
