"""Control of a fleet: create, list, inspect, cancel, delete crawls; pause domains; stored pages and their
versions; dead letters; health."""

from __future__ import annotations

import asyncio
import math
import secrets
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from crawler.archive import Stored, read
from crawler.archive.source import ArchiveSource
from crawler.config import CrawlConfig
from crawler.errors import ArchiveError, BadURL, ConfigError, NotFound
from crawler.frontier import dead
from crawler.frontier.crawls import (
    SERIES_STEPS,
    CrawlOptions,
    CrawlState,
    Span,
    kept,
)
from crawler.frontier.urls import canonicalise
from crawler.gateway.report import GatewayStatus, gateways
from crawler.monitor.heartbeat import WorkerStatus, workers
from crawler.monitor.quality import quality
from crawler.monitor.status import status
from crawler.quality.report import QualityReport
from crawler.scheduler.running import scheduling
from crawler.service.health import DomainHealth, domain_health
from crawler.settings import Settings
from crawler.sink.crawls import OPEN, CrawlRecord, CrawlStore
from crawler.sink.crawls import CrawlState as State
from crawler.sink.domains import DomainStore
from crawler.sink.history import PageHistory, PageState, StoredVersion
from crawler.sink.sql import check_schema, migrate
from crawler.worker import wiring


@dataclass(frozen=True, slots=True)
class NewCrawl:
    """What a new crawl is: its seeds and options."""

    seeds: Sequence[str]
    label: str | None = None
    priority: int | None = None
    max_depth: int | None = None
    max_pages: int | None = None
    domains: Sequence[str] | None = None


@dataclass(frozen=True, slots=True)
class CrawlView:
    """A crawl as reported: its record and its counts per domain (ok, failed, retrying, dead, skipped,
    pending)."""

    id: str
    label: str | None
    state: State
    seeds: list[str]
    options: dict[str, Any]
    started: datetime
    finished: datetime | None
    counts: dict[str, dict[str, int]] = field(default_factory=dict)
    # Credits paid fetch backends charged for its stored pages; None if none was charged.
    credits: float | None = None


@dataclass(frozen=True, slots=True)
class RecrawlView:
    """What a recrawl did per domain: pages published now, and pages still due (published later,
    as the domain's queue makes room: by crawler-scheduler, or the next recrawl)."""

    published: dict[str, int]
    due: dict[str, int]


@dataclass(frozen=True, slots=True)
class VersionsView:
    """Versions of a page, newest first; `before` asks for the next ones (None: there are none)."""

    page: int
    versions: list[StoredVersion]
    before: int | None


@dataclass(frozen=True, slots=True)
class DomainView:
    """A configured domain: its queue depth, its rate, whether it is paused, its consumers, how it
    fares with its site, and its pages due for a refresh."""

    domain: str
    depth: int
    unacked: int | None
    rate: float  # requests per second domains.yaml allows
    pages_per_second: float
    paused: bool
    workers: int  # consumers subscribed to its queue
    health: DomainHealth = field(default_factory=DomainHealth)
    due: int = 0
    overdue_seconds: float | None = None


@dataclass(frozen=True, slots=True)
class CrawlsView:
    """A page of crawls, newest first; `before` asks for the next (None: there are none)."""

    crawls: list[CrawlView]
    before: str | None


@dataclass(frozen=True, slots=True)
class SeriesView:
    """Pages a crawl stored per domain in each `step` seconds from `start`."""

    crawl: str
    start: datetime
    step: int
    domains: dict[str, list[float]]


@dataclass(frozen=True, slots=True)
class DeadGroup:
    """Dead letters of one domain for one reason: how many, and the newest one's error and time."""

    domain: str
    reason: str
    count: int
    last_error: str
    last_time: str


@dataclass(frozen=True, slots=True)
class Freshness:
    """A domain's schedule: whether it recrawls, its pages due, how long the oldest has waited."""

    domain: str
    recrawls: bool
    due: int
    overdue_seconds: float | None


@dataclass(frozen=True, slots=True)
class FleetView:
    """The fleet: workers by heartbeat, gateway replicas by report, and freshness per domain."""

    workers: list[WorkerStatus]
    gateways: list[GatewayStatus]
    freshness: list[Freshness]


Schema = Literal["upgrade", "check", "none"]
SERIES_POINTS = 120  # most points of a crawl's pages-over-time series
STATUS_FRESH = 1.0  # seconds a read of the fleet's status serves every caller


def check_crawl(config: CrawlConfig, new: NewCrawl) -> tuple[list[str], tuple[str, ...] | None]:
    """Canonical seeds and chosen domains of a new crawl; BadURL or ConfigError saying what is wrong.

    Needs no service: callers may check before they connect.
    """
    if not new.seeds:
        raise BadURL("a crawl needs at least one seed URL")
    domains = tuple(wiring.check_domains(config, new.domains)) if new.domains else None
    seeds = wiring.check_seeds(config, new.seeds)
    if domains is not None:
        outside = [s for s in seeds if config.domain_of(s.split("/")[2].rsplit(":", 1)[0]) not in domains]
        if outside:
            raise BadURL(f"{outside[0]}: not in the crawl's domains ({', '.join(domains)})")
    return seeds, domains


class Control:
    """The verbs over one fleet's services; open it with `Control.open`."""

    def __init__(
        self,
        settings: Settings,
        config: CrawlConfig,
        f: wiring.Frontier,
        store: CrawlStore,
        history: PageHistory,
        domains: DomainStore | None = None,
    ) -> None:
        self.settings = settings
        self.config = config
        self._f = f
        self._store = store
        self._history = history
        # Pauses kept in the database too: a paused domain stays paused across a Redis loss.
        self._state = CrawlState(f.redis, settings.names, domains)
        self._status_read: tuple[float, asyncio.Task[dict[str, Any]]] | None = None

    @classmethod
    @asynccontextmanager
    async def open(
        cls, settings: Settings, config: CrawlConfig, role: str, schema: Schema = "upgrade"
    ) -> AsyncIterator[Control]:
        """Connect to RabbitMQ, Redis and the database, and declare the topology. The database's
        `schema` is upgraded, or checked to be the newest (a command that reads creates none), or left
        alone ("none": the verbs used read no table, the dead letters' say)."""
        if schema != "none":
            await asyncio.to_thread(migrate if schema == "upgrade" else check_schema, settings.database_url)
        async with AsyncExitStack() as stack:
            f = await stack.enter_async_context(wiring.frontier(settings, role, config))
            store = CrawlStore(settings.database_url)
            stack.callback(store.close)
            history = PageHistory(settings.database_url)
            stack.callback(history.close)
            domains = DomainStore(settings.database_url)
            stack.callback(domains.close)
            await wiring.declare_topology(f, settings, config)
            yield cls(settings, config, f, store, history, domains)

    # Crawls

    async def create_crawl(self, new: NewCrawl) -> CrawlView:
        """Record a crawl, make its options known to the workers, route its seeds; its view."""
        seeds, domains = check_crawl(self.config, new)
        options = CrawlOptions(domains, new.max_depth, new.max_pages, new.priority)
        crawl = secrets.token_hex(8)
        record = CrawlRecord(
            crawl, new.label, "running", seeds, _options(options), datetime.now(UTC), None, None
        )
        # The record first: a crawl that routed anything is never one the database does not know.
        await asyncio.to_thread(self._store.add, record)
        await self._state.publish(crawl, options)
        await wiring.seed_into(self._f, self.settings, self.config, seeds, new.priority, crawl, options)
        return await self.get_crawl(crawl)

    async def list_crawls(self, state: State | None = None) -> list[CrawlView]:
        """Every crawl (newest first), or those in `state`."""
        records = await asyncio.to_thread(self._store.list, None)
        views = [await self._view(r) for r in records]
        return [v for v in views if state is None or v.state == state]

    async def crawls_page(
        self, state: State | None = None, limit: int = 20, before: str | None = None
    ) -> CrawlsView:
        """Up to `limit` crawls listed after the crawl `before`, newest first, or those in `state`."""
        records = await asyncio.to_thread(self._store.list, state, limit + 1, before)
        more = len(records) > limit
        records = records[:limit]
        credits = await asyncio.to_thread(self._store.credits, [r.id for r in records])
        views = [await self._view(r, credits.get(r.id)) for r in records]
        return CrawlsView(views, records[-1].id if more else None)

    async def get_crawl(self, crawl: str) -> CrawlView:
        """One crawl with its counts; NotFound if there is none."""
        record = await self._record(crawl)
        credits = await asyncio.to_thread(self._store.credits, [crawl])
        return await self._view(record, credits.get(crawl))

    async def quality(self, crawl: str | None = None, domain: str | None = None) -> QualityReport:
        """A crawl's coverage table (the newest crawl's if `crawl` is None), of `domain` alone if given,
        beside each domain's last finished crawl; NotFound if there is no such crawl."""
        if crawl is None:
            newest = await asyncio.to_thread(self._store.list, None, 1)
            if not newest:
                raise NotFound("no crawl yet: start one with `crawler seed` or `crawler crawl`")
            record = newest[0]
        else:
            record = await self._record(crawl)
        return await quality(self._state, self._store, self.config, record, domain)

    async def crawl_series(self, crawl: str) -> SeriesView:
        """The pages a crawl stored per domain over its life so far, in at most SERIES_POINTS steps
        (none finer than its series keeps)."""
        record = await self._record(crawl)
        end = record.finished_at or datetime.now(UTC)
        span = max(1.0, (end - record.created_at).total_seconds())
        step = max(SERIES_STEPS[0][1], math.ceil(span / SERIES_POINTS))
        points = max(1, math.ceil(span / step))
        found = spread(await self._state.series(crawl), record.created_at.timestamp(), step, points)
        return SeriesView(crawl, record.created_at, step, found)

    async def cancel_crawl(self, crawl: str) -> CrawlView:
        """Cancel a running crawl fleet-wide; once this returns no consumer starts a fetch of it."""
        record = await self._record(crawl)
        if record.state in OPEN:
            # Redis first: workers check it before each fetch. From here its counts are frozen.
            await self._state.cancel(crawl)
            counts = kept(await self._state.counts(crawl))
            await asyncio.to_thread(self._store.end, crawl, "cancelled", counts)
        return await self.get_crawl(crawl)

    async def delete_crawl(self, crawl: str, purge: bool = False) -> None:
        """Forget a crawl (cancelled first if running); its pages stay unless `purge`."""
        record = await self._record(crawl)
        # Its id stays in the cancelled set: messages still queued are acked unfetched.
        await self._state.cancel(crawl)
        if record.state in OPEN:
            await asyncio.to_thread(self._store.end, crawl, "cancelled", {})
        await asyncio.to_thread(self._store.delete, crawl, purge)
        await self._state.forget(crawl)

    async def _record(self, crawl: str) -> CrawlRecord:
        record = await asyncio.to_thread(self._store.get, crawl)
        if record is None:
            raise NotFound(f"no crawl {crawl!r}: list them with `crawler crawls list` or GET /v1/crawls")
        return record

    async def _view(self, record: CrawlRecord, credits: float | None = None) -> CrawlView:
        # A view decides nothing: the worker whose count ends a crawl marks it finished, at that moment.
        counts = await self._state.shown(record)
        return CrawlView(
            record.id,
            record.label,
            record.state,
            record.seeds,
            record.options,
            record.created_at,
            record.finished_at,
            counts,
            credits,
        )

    # Domains

    async def domains(self) -> list[DomainView]:
        """Every configured domain's queue, rate, pause and consumers."""
        data, paused, health = await asyncio.gather(
            self._status(),
            self._state.paused(),
            domain_health(self._f.redis, self.settings.names, self.config, sorted(self.config.domains)),
        )
        return [
            DomainView(
                d["domain"],
                d["queue"]["ready"],
                d["queue"]["unacked"],
                self.config.rules_for(d["domain"]).rate,
                d["pages_per_second"],
                d["domain"] in paused,
                d["queue"]["consumers"],
                health.get(d["domain"], DomainHealth()),
                d["freshness"]["due"],
                d["freshness"]["overdue_seconds"],
            )
            for d in data["domains"]
        ]

    async def _status(self) -> dict[str, Any]:
        """The fleet's status, read at most once per STATUS_FRESH seconds: every console open on this
        API polls it, and each read asks the management API, the database and Redis."""
        now = time.monotonic()
        if self._status_read is None or now - self._status_read[0] > STATUS_FRESH:
            read = asyncio.ensure_future(status(self.settings, self.config, self._f.connection))
            self._status_read = (now, read)
        _, read = self._status_read
        try:
            return await asyncio.shield(read)
        except Exception:
            self._status_read = None  # a failed read is not kept: the next caller asks again
            raise

    async def fleet(self) -> FleetView:
        """Workers by their heartbeats, gateway replicas by their reports, freshness per domain."""
        names = self.settings.names
        found, replicas, data = await asyncio.gather(
            workers(self._f.redis, names),
            gateways(self._f.redis, names),
            self._status(),
        )
        fresh = [
            Freshness(
                d["domain"],
                self.config.rules_for(d["domain"]).recrawls,
                d["freshness"]["due"],
                d["freshness"]["overdue_seconds"],
            )
            for d in data["domains"]
        ]
        return FleetView(found, replicas, fresh)

    async def pause(self, domain: str) -> str:
        """Pause a configured domain fleet-wide: consumers leave its queue alone until resumed."""
        (chosen,) = self._domain(domain)
        await self._state.pause(chosen)
        return chosen

    async def resume(self, domain: str) -> str:
        """Resume a paused domain fleet-wide."""
        (chosen,) = self._domain(domain)
        await self._state.resume(chosen)
        return chosen

    def _domain(self, domain: str) -> list[str]:
        try:
            return wiring.check_domains(self.config, [domain])
        except ConfigError as exc:
            raise NotFound(str(exc)) from None

    # Recrawls

    async def recrawl(self, domains: Sequence[str] | None = None, every: bool = False) -> RecrawlView:
        """Publish the stored pages due in `domains` (default: those that recrawl), each domain within
        what it can fetch in the next minutes; with `every`, each stored page of them is made due
        first, recrawled or not (default: every configured domain)."""
        if domains:
            chosen = wiring.check_domains(self.config, domains)
        else:
            chosen = sorted(d for d, r in self.config.rules.items() if every or r.recrawls)
        async with scheduling(self.settings, lambda: self.config, self._f.connection) as scheduler:
            if every:
                await scheduler.make_due(chosen)
            await scheduler.read_sitemaps(chosen, every=True)  # ahead of the pages, in their queues
            published = await scheduler.publish_due(chosen)
            left = await scheduler.backlog(chosen)
        return RecrawlView(
            {d: published.get(d, 0) for d in chosen}, {d: left[d].due if d in left else 0 for d in chosen}
        )

    async def read_sitemaps(self, domain: str) -> int:
        """Begin a round of reading `domain`'s sitemaps at each of its origins now; how many."""
        chosen = self._domain(domain)
        async with scheduling(self.settings, lambda: self.config, self._f.connection) as scheduler:
            return await scheduler.read_sitemaps(chosen, every=True)

    # Stored pages

    async def page(self, url: str) -> PageState:
        """The stored page at `url`, canonicalised as the crawler stores it; BadURL, NotFound."""
        canon = canonicalise(url, tracking=self.config.dropped_params)
        found = await asyncio.to_thread(self._history.page, canon)
        if found is None:
            raise NotFound(f"no page is stored for {canon}")
        return found

    async def page_archived(self, page: int) -> Stored:
        """Page `page`'s latest answer as the archive holds it (a ranged GET for a record in object
        storage); NotFound if there is no such page, or no record of it."""
        stored, archived = await asyncio.to_thread(self._history.archived, page)
        if not stored:
            raise NotFound(f"no page {page}: GET /v1/pages?url=URL gives a page's id")
        if archived is None:
            raise NotFound(f"page {page} has no archived answer: its domain does not set `archive: true`")
        try:
            return await asyncio.to_thread(read, ArchiveSource.of(self.settings), archived)
        except ArchiveError as exc:
            raise NotFound(f"page {page}'s archived answer cannot be read: {exc}") from None

    async def page_versions(self, page: int, before: int | None = None, limit: int = 100) -> VersionsView:
        """Up to `limit` versions of page `page` numbered below `before`, newest first; NotFound."""
        # One more than asked says whether there is a next page.
        found = await asyncio.to_thread(self._history.versions, page, before, limit + 1)
        if found is None:
            raise NotFound(f"no page {page}: GET /v1/pages?url=URL gives a page's id")
        more = len(found) > limit
        return VersionsView(page, found[:limit], found[limit - 1].version if more else None)

    # Dead letters

    async def dead_letters(
        self, domain: str | None = None, reason: str | None = None, limit: int | None = None
    ) -> list[dead.DeadLetter]:
        """The dead letters that match, oldest first; the queue is left as it was."""
        return await dead.list_dead(
            self._f.connection, self.settings.names, dead.matcher(domain, reason), limit
        )

    async def dead_page(
        self, domain: str | None, reason: str | None, limit: int, after: int = 0
    ) -> dead.DeadPage:
        """A page of the dead letters that match, from position `after`; the queue is left as it was."""
        return await dead.page_dead(
            self._f.connection, self.settings.names, dead.matcher(domain, reason), limit, after
        )

    async def dead_groups(self) -> list[DeadGroup]:
        """Every dead letter counted by domain and reason, most first; the queue is left as it was."""
        letters = await self.dead_letters()
        groups: dict[tuple[str, str], list[dead.DeadLetter]] = {}
        for letter in letters:
            groups.setdefault((letter.domain, letter.reason), []).append(letter)
        out = [
            DeadGroup(domain, reason, len(found), found[-1].error, found[-1].time)
            for (domain, reason), found in groups.items()
        ]
        return sorted(out, key=lambda g: (-g.count, g.domain, g.reason))

    async def replay_dead(self, domain: str | None = None, reason: str | None = None) -> int:
        """Put matching dead letters back into their queues, attempts reset; how many."""
        return await dead.replay(self._f.connection, self.settings.names, dead.matcher(domain, reason))

    async def purge_dead(self, domain: str | None = None, reason: str | None = None) -> int:
        """Delete matching dead letters for good; how many."""
        return await dead.purge(self._f.connection, self.settings.names, dead.matcher(domain, reason))

    # Health

    async def readiness(self) -> dict[str, str]:
        """Each service: "ok", or what is wrong with it."""

        async def broker() -> str:
            channel = await asyncio.wait_for(self._f.connection.channel(), 5)
            await channel.close()
            return "ok"

        async def redis() -> str:
            await asyncio.wait_for(self._f.redis.ping(), 5)
            return "ok"

        async def database() -> str:
            await asyncio.wait_for(asyncio.to_thread(self._store.ping), 5)
            return "ok"

        names = ("rabbitmq", "redis", "database")
        results = await asyncio.gather(broker(), redis(), database(), return_exceptions=True)
        return {
            n: r if isinstance(r, str) else f"unreachable ({type(r).__name__})"
            for n, r in zip(names, results, strict=True)
        }

    async def worker_count(self) -> int:
        """Workers with a live heartbeat."""
        return sum(1 for w in await workers(self._f.redis, self.settings.names) if w.state == "live")


def spread(spans: Sequence[Span], start: float, step: int, points: int) -> dict[str, list[float]]:
    """Pages per domain in each of `points` steps of `step` seconds from `start`, from a crawl's
    series: the part of a span outside those steps is cut (its pages were stored within them), and
    its pages are shared among the steps the rest overlaps, by how much of it each holds."""
    found: dict[str, list[float]] = {}
    for s in spans:
        into = found.setdefault(s.domain, [0.0] * points)
        low, high = max(s.start, start), min(s.start + s.seconds, start + points * step)
        if high <= low:  # clocks apart: the nearest step takes them
            into[min(points - 1, max(0, int((low - start) // step)))] += s.pages
            continue
        for i in range(int((low - start) // step), min(points, math.ceil((high - start) / step))):
            overlap = min(high, start + (i + 1) * step) - max(low, start + i * step)
            into[i] += s.pages * max(0.0, overlap) / (high - low)
    return {d: [round(n, 2) for n in values] for d, values in sorted(found.items())}


def _options(options: CrawlOptions) -> dict[str, Any]:
    return {
        "domains": list(options.domains) if options.domains is not None else None,
        "max_depth": options.max_depth,
        "max_pages": options.max_pages,
        "priority": options.priority,
    }
