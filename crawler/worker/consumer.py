"""The consumer: subscribes its domain queues and runs each delivery through the pipeline until stopped.

It only ties the parts together and owns their lifecycle: the frontier's subscriptions, settling and
drain check (crawler/frontier/), the per-delivery pipeline (pipeline.py), live configuration
(reload.py) and the signals that end the process (signals.py).
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from redis.asyncio import Redis

from crawler.changes.feed import ChangeFeed
from crawler.config import CrawlConfig
from crawler.dedup.store import SeenStore
from crawler.errors import BackendHalt
from crawler.frontier.client import Connection, Frontier, Publishing, publishing
from crawler.frontier.crawls import CrawlState
from crawler.frontier.delivery import Delivery, lost
from crawler.frontier.exchanges import work_queues
from crawler.frontier.hosts import HostShards
from crawler.frontier.publisher import Publisher
from crawler.frontier.quota import PageQuota
from crawler.frontier.recovery import Recovery
from crawler.frontier.router import Router
from crawler.frontier.sitemaps import SitemapTasks
from crawler.frontier.tracing import step
from crawler.monitor import readings
from crawler.monitor.metrics import DomainStats, Metrics
from crawler.names import DISCOVERED_LABEL
from crawler.sink.crawls import CrawlStore
from crawler.sink.domains import DomainStore
from crawler.sink.groupcommit import GroupCommit
from crawler.sink.schedule import Schedule
from crawler.sink.sitemaps import SitemapStore
from crawler.worker.admission import Admission
from crawler.worker.announce import Announcer
from crawler.worker.backoffs import KeptBackoffs
from crawler.worker.cost import Cost
from crawler.worker.held_domains import Holds
from crawler.worker.live import LiveConfig
from crawler.worker.page import Visitor
from crawler.worker.pipeline import Pipeline
from crawler.worker.reload import ConfigWatcher
from crawler.worker.signals import drain_on_signals
from crawler.worker.sitemaps import Listing, SitemapReading
from crawler.worker.tuning import DEFAULT_TUNING, Tuning

__all__ = ["Consumer", "DomainStats", "Ending", "Parts"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Parts:
    """What a consumer works with, wired once (crawler.worker.builder.parts)."""

    live: LiveConfig
    visitor: Visitor
    seen: SeenStore
    quota: PageQuota
    cost: Cost
    writes: GroupCommit
    crawls: CrawlState | None = None  # cancelled crawls and paused domains; None: neither (tests)
    recovery: Recovery | None = None  # pages queued twice after Redis was lost; None: not checked
    admission: Admission | None = None  # a page's checks in one round trip; None: one by one
    redis: Redis | None = None  # what sitemap rounds have read; None: sitemap tasks unread
    sitemap_store: SitemapStore | None = None  # sitemaps as last read; None: sitemap tasks unread
    schedule: Schedule | None = None  # to refresh pages a sitemap's lastmod moved
    domain_state: DomainStore | None = None  # pauses and back-offs beyond Redis; None: Redis alone
    backoffs: KeptBackoffs | None = None  # the back-offs kept there, as this worker read them
    crawl_records: CrawlStore | None = None  # the crawls' records, marked when a count ends one


@dataclass(frozen=True, slots=True)
class Ending:
    """How a consumer's run ended: `stopped` (by stop(): a signal, named in `signal`) rather than
    drained, and the domains the fetch service `halted` (domain -> why: a rejected key, a spent budget)."""

    stopped: bool
    halted: dict[str, str]
    signal: signal.Signals | None = None


class Consumer:
    """Consumes chosen domain queues until stopped (or, in burst mode, until the work is done)."""

    def __init__(
        self,
        parts: Parts,
        frontier: Frontier,
        domains: Sequence[str] | None,
        *,
        label: str,
        prefetch: int | None = None,
        burst: bool = False,
        grace: float = 30.0,
        config_path: str | None = None,
        metrics: Metrics | None = None,
        publishing: Connection | None = None,
        connect: Callable[[], Awaitable[Connection]] | None = None,
        tuning: Tuning = DEFAULT_TUNING,
        more: Callable[[], bool] = lambda: False,
    ) -> None:
        self.parts = parts
        self.live = parts.live
        self.frontier = frontier
        self.names = frontier.names
        self.publishing = publishing or frontier.connection  # links, retries and dead letters go out here
        # Without --domains a consumer takes every configured domain, new ones included.
        self._every_domain = domains is None
        self.domains = sorted(self.config.domains) if domains is None else list(domains)
        self.label = label
        self.prefetch = prefetch
        self.burst = burst
        self.grace = grace
        self.metrics = metrics or Metrics()
        # A series per discovered host would be a series per host of the web: they share one label.
        self.metrics.fold_domains(
            lambda domain: self.config.discovered(domain), lambda domain: domain in self.config.layout_domains
        )
        self.tuning = tuning
        self._more = more  # burst mode: work still to come from outside the queues (a recrawl)
        self.subscriptions = frontier.subscriptions(
            parts.live.config.frontier,
            self._on_message,
            self._prefetch,
            connect=connect,
            label=label,
            pacing=tuning,
        )
        # Discovered hosts' shards (`discover: follow: all`), for a consumer of every domain.
        self.hosts = HostShards(self.names, frontier.connection, self._on_message, label)
        self.watcher = ConfigWatcher(config_path, self.apply, tuning.config_poll) if config_path else None
        self._pipeline: Pipeline | None = None  # made in run(): it needs the publishing channel
        self._settling = frontier.settling(parts.crawls, self.metrics)
        self._publisher: Publishing | None = None
        self._inflight = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self._stop = asyncio.Event()
        self._stopped_by: signal.Signals | None = None
        self.holds = Holds(
            self.subscriptions,
            parts.crawls,
            lambda: self.config.budget_pause,
            self._stop.is_set,
            give_up=tuning.outage_limit if burst else None,
            shards=self.hosts,
        )

    @property
    def config(self) -> CrawlConfig:
        """The configuration in force (swapped by a live edit)."""
        return self.live.config

    @property
    def seen(self) -> SeenStore:
        """The crawl's dedup store."""
        return self.parts.seen

    def summary(self) -> dict[str, DomainStats]:
        """This consumer's outcomes per domain, from the same counts as its metrics."""
        return readings.summary(self.metrics, self.domains)

    def ending(self) -> Ending:
        """How run() ended (once it returned)."""
        return Ending(self._stop.is_set(), dict(self.holds.halted), self._stopped_by)

    async def run(self) -> None:
        """Declare the topology, consume until stopped or drained, then return what is in flight."""
        async with publishing(self.publishing, self.config, self.names) as publisher:
            self._publisher = publisher
            changes = await publisher.exchange(self.names.changes)
            parts = self.parts
            router = await publisher.router(self.config, parts.seen, parts.quota, scope=self.live.scope)
            self._pipeline = Pipeline(
                self.live,
                parts.visitor,
                parts.quota,
                parts.cost,
                router,
                parts.writes,
                await publisher.parking(self.label),
                self.metrics,
                short_retry_wait=self.tuning.short_retry_wait,
                settling=self._settling,
                crawls=parts.crawls,
                recovery=parts.recovery,
                admission=parts.admission,
                announcer=Announcer(ChangeFeed(changes), parts.writes, self.tuning.short_retry_wait),
                sitemaps=await self._sitemaps(router, publisher),
                host_prefetch=self._host_prefetch(),
            )
            reload = self.watcher.wake.set if self.watcher else lambda: None
            with drain_on_signals(self.stop, reload, self.grace):
                # A domain paused before this consumer started is not subscribed until resumed.
                await self.holds.read_pauses()
                await self.subscriptions.add(self.holds.active(self.domains), publisher.declared_in)
                await self._add_hosts()
                async with asyncio.TaskGroup() as tasks:
                    watching = tasks.create_task(self.watcher.run()) if self.watcher else None
                    pausing = (
                        tasks.create_task(self.holds.follow_pauses(lambda: self.domains))
                        if parts.crawls
                        else None
                    )
                    try:
                        await (self._until_drained() if self.burst else self._stop.wait())
                        await self._unsubscribe()
                    finally:
                        for task in (watching, pausing):
                            if task is not None:
                                task.cancel()

    async def _sitemaps(self, router: Router, publisher: Publishing) -> SitemapReading | None:
        parts = self.parts
        if parts.redis is None or parts.sitemap_store is None or parts.schedule is None:
            return None
        frontier = await publisher.exchange(self.names.frontier)
        return SitemapReading(
            self.live,
            parts.visitor,
            Listing(self.live, router, Publisher(frontier), parts.schedule),
            SitemapTasks(self.live.scope, frontier, parts.redis, self.names),
            parts.sitemap_store,
            self.metrics,
        )

    def stop(self, sig: signal.Signals | None = None) -> None:
        """Stop taking deliveries (for the signal `sig`, if one); run() returns once in-flight messages
        are done or returned."""
        self._stopped_by = self._stopped_by or sig
        self._stop.set()

    async def apply(self, config: CrawlConfig) -> None:
        """Switch to an edited configuration: priorities, rates, extraction, scope; new domains too."""
        assert self._publisher is not None, "apply() is for a running consumer"
        await self._publisher.redeclare(config)
        self.live.swap(config)
        await self.subscriptions.refresh_prefetch([d for d in self.domains if d in config.domains])
        added = sorted(set(config.domains) - set(self.domains)) if self._every_domain else []
        self.domains.extend(added)
        if added and not self._stop.is_set() and self.holds.active(added):
            await self.subscriptions.add(self.holds.active(added))
        log.info("configuration reloaded%s", f"; new domains: {', '.join(added)}" if added else "")

    async def _on_message(self, domain: str, message: Delivery) -> None:
        assert self._pipeline is not None
        self._settling.delivered(message)
        step("delivered", message)
        self._inflight += 1
        self._idle.clear()
        self.metrics.message_started(domain)
        try:
            await self._pipeline.handle(domain, message)
        except BackendHalt as exc:
            # Discovered hosts share their shards' subscription: they are held together.
            held = DISCOVERED_LABEL if self.config.in_layout(domain) else domain
            await self.holds.halt(held, message, exc)
        except asyncio.CancelledError:
            # aio-pika cancels the work on a channel's deliveries when the channel closes.
            if lost(message):
                self._pipeline.abandon(domain, message, ", which stopped the work on it")
            raise
        finally:
            await self._settling.finished(message)
            self.metrics.message_done(domain)
            self._inflight -= 1
            if self._inflight == 0:
                self._idle.set()

    def _prefetch(self, domain: str) -> int:
        """The domain queue's prefetch: as configured, unless this consumer's share is smaller, or
        more than the domain's rate can start within the broker's delivery timeout."""
        share = max(1, self.tuning.max_prefetched // max(1, len(self.domains)))
        rules, config = self.live.rules(domain), self.config
        # Held deliveries are served one rate token at a time: the last one waits prefetch / rate.
        in_time = int(rules.rate * (config.delivery_timeout - config.delivery_margin - rules.visit_seconds))
        return max(1, min(self.prefetch or rules.prefetch, share, in_time))

    async def _add_hosts(self) -> None:
        """Consume the host layout's shards, if they are in use and this consumer takes every domain;
        each shard's prefetch is the host template's (or --prefetch)."""
        config = self.config
        if not config.host_layout or not self._every_domain or self._stop.is_set():
            return
        if DISCOVERED_LABEL in self.holds.halted:
            return  # the fetch service refused them: taken up when their pause ends
        await self.hosts.add(config.discover.shards, self._host_prefetch())

    def _host_prefetch(self) -> int:
        """Each shard's prefetch: the host template's (or --prefetch)."""
        return max(1, min(self.prefetch or self.config.host_rules.prefetch, self.tuning.max_prefetched))

    async def _unsubscribe(self) -> None:
        """Stop deliveries, let in-flight ones finish (up to `grace`), then return the rest."""
        await self.subscriptions.cancel()
        await self.hosts.cancel()
        try:
            await asyncio.wait_for(self._idle.wait(), self.grace)
        except TimeoutError:
            log.warning(
                "%d messages in flight after %.0fs: returned to their queues", self._inflight, self.grace
            )
        await self.subscriptions.close()
        await self.hosts.close()

    async def _until_drained(self) -> None:
        # A domain resting after a spent budget still has work in its queue: not drained until it is
        # done. One halted for good (a rejected key) is left to the next run: its queue is not asked.
        def working(domains: Sequence[str]) -> list[str]:
            return [d for d in domains if d in self.holds.resting or d in self.holds.active([d])]

        drain = self.frontier.drain(
            lambda: work_queues(
                self.config, self.names, working(self.domains), hosts=bool(working([DISCOVERED_LABEL]))
            ),
            lambda: len(self.config.retry_tiers),
            self.tuning,
        )

        async def resume() -> None:
            await self.subscriptions.add(self.holds.active(self.domains))
            await self._add_hosts()

        await drain.wait(self._stop, self._quiet, self._unsubscribe, resume)

    def _quiet(self) -> bool:
        """Nothing in flight, nothing to come from outside, no domain resting: the queues can decide."""
        # A resting domain's queue may look empty only because another consumer holds its messages,
        # and gets the same refusal: its rest must end before this consumer may call the work done.
        return self._inflight == 0 and not self._more() and not self.holds.resting
