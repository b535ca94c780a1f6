"""What the programs call to crawl: the domains and seeds checked, a crawl seeded, its queues consumed
by a worker (built in crawler.worker.builder)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass

from crawler.config import CrawlConfig
from crawler.descriptors import open_files_warning
from crawler.errors import BadURL, ConfigError
from crawler.frontier.client import frontier
from crawler.frontier.crawls import CrawlOptions
from crawler.frontier.hosts import follows
from crawler.frontier.router import Routed
from crawler.frontier.urls import canonicalise
from crawler.hosts.shown import shown
from crawler.monitor.metrics import DomainStats
from crawler.settings import Settings
from crawler.sink.database import Database, opened
from crawler.sink.sql import migrate
from crawler.worker.builder import WorkerBuilder, make_fetcher, make_fetchers, parts, visitor
from crawler.worker.consumer import Ending
from crawler.worker.tuning import DEFAULT_TUNING, Tuning
from crawler.worker.watching import Monitoring

log = logging.getLogger(__name__)

# The worker's pieces, built in crawler.worker.builder, are named here too for the tests that build
# one piece at a time.
__all__ = [
    "Consumed",
    "check_domains",
    "check_seeds",
    "consume",
    "make_fetcher",
    "make_fetchers",
    "parts",
    "seed",
    "visitor",
]


@dataclass(frozen=True, slots=True)
class Consumed:
    """What consume() did: its outcomes per domain, and how it ended."""

    stats: dict[str, DomainStats]
    ending: Ending


def check_domains(config: CrawlConfig, domains: Sequence[str] | None, *, queued: bool = False) -> list[str]:
    """The chosen domains (all with a queue of their own if none); ConfigError for an unknown one,
    or with `queued` for one the host layout serves (it has no queue to consume, pause or move)."""
    if not domains:
        if not config.domains and not config.host_layout:
            raise ConfigError("domains.yaml lists no domains: add one under `domains:`")
        return sorted(config.domains)
    chosen = [d.strip().lower() for d in domains if d.strip()]
    if not chosen:
        raise ConfigError(
            f"no domain named in {shown(repr(d) for d in domains)} "
            f"(configured: {shown(sorted(config.domains))})"
        )
    shared = [d for d in chosen if d in config.layout_domains]
    if shared and queued:
        raise ConfigError(
            f"{shown(shared)}: listed in the domains file past frontier.max_domain_queues, so "
            "served by the host layout's shared queues, not one of their own (a worker on every "
            "domain consumes them): leave them out, or raise max_domain_queues to queue each"
        )
    unknown = [d for d in chosen if d not in config.domains and d not in config.layout_domains]
    if unknown:
        raise ConfigError(
            f"not configured in domains.yaml: {shown(unknown)} (configured: {shown(sorted(config.domains))})"
        )
    return chosen


def check_seeds(config: CrawlConfig, urls: Sequence[str]) -> list[str]:
    """Canonical seeds; BadURL naming the first seed that cannot be crawled. A seed on a host of no
    listed domain is taken if discovery would follow a link to it (its caps aside)."""
    seeds = []
    for url in urls:
        canon = canonicalise(url, tracking=config.dropped_params)
        host = canon.split("/")[2].rsplit(":", 1)[0]
        if config.discovered(host):
            if not follows(config, host):
                raise BadURL(f"{url}: its host is out of the scope of `discover:` in domains.yaml")
        elif config.domain_of(host) is None and not config.follow_other_domains:
            raise BadURL(
                f"{url}: its host is in no domain of domains.yaml "
                f"(configured: {shown(sorted(config.domains)) or 'none'})"
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
    database: Database | None = None,
) -> Consumed:
    """Consume the chosen domains' queues (after routing `seeds`) until stopped or drained.

    With `config_path`, edits of that file (or SIGHUP) reconfigure the running consumer. In burst
    mode, `more()` says work is still to come from outside the queues: not drained while it does,
    and `crawl` (the one this process began) is marked finished once drained, interrupted if not.
    Every part uses `database`, the process's (None: one of its own, closed at the end).
    """
    chosen = check_domains(config, domains, queued=True)
    canonical_seeds = check_seeds(config, seeds)
    too_few = open_files_warning()
    if too_few is not None:
        log.warning("%s", too_few)
    builder = WorkerBuilder(
        settings,
        config,
        chosen if domains else None,
        role,
        monitoring or Monitoring(),
        tuning,
        burst=burst,
        prefetch=prefetch,
        grace=grace,
        config_path=config_path,
        more=more,
    )
    async with AsyncExitStack() as stack:
        db = stack.enter_context(opened(database or settings.database_url))
        await asyncio.to_thread(migrate, db)
        worker = await builder.build(stack, db)
        if canonical_seeds:
            await worker.frontier.seed(config, canonical_seeds, None)
        await worker.consumer.run()
        ending = worker.consumer.ending()
        if burst and crawl is not None and worker.parts.crawls is not None:
            # Drained, its work is over whatever its counts say; stopped or halted, it is not.
            await worker.parts.crawls.end(
                crawl, "interrupted" if ending.stopped or ending.halted else "finished"
            )
        return Consumed(worker.consumer.summary(), ending)
