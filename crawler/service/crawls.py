"""Crawls: create one (its seeds routed), list, show, its series and quality, cancel, delete."""

from __future__ import annotations

import asyncio
import math
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from crawler.config import CrawlConfig
from crawler.errors import BadURL, NotFound
from crawler.frontier.client import Frontier
from crawler.frontier.crawls import SERIES_STEPS, CrawlOptions, CrawlState, Span, kept
from crawler.monitor.quality import current_quality, quality
from crawler.quality.report import QualityReport
from crawler.settings import Settings
from crawler.sink.crawls import OPEN, CrawlRecord, CrawlStore
from crawler.sink.crawls import CrawlStatus as State
from crawler.worker import wiring

SERIES_POINTS = 120  # most points of a crawl's pages-over-time series


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


@dataclass(frozen=True, slots=True)
class Crawls:
    """The fleet's crawls: their records in the database, their state and counts in Redis."""

    settings: Settings
    config: CrawlConfig
    frontier: Frontier
    store: CrawlStore
    state: CrawlState

    async def create(self, new: NewCrawl) -> CrawlView:
        """Record a crawl, make its options known to the workers, route its seeds; its view."""
        seeds, domains = check_crawl(self.config, new)
        options = CrawlOptions(domains, new.max_depth, new.max_pages, new.priority)
        crawl = secrets.token_hex(8)
        record = CrawlRecord(
            crawl, new.label, "running", seeds, _options(options), datetime.now(UTC), None, None
        )
        # The record first: a crawl that routed anything is never one the database does not know.
        await asyncio.to_thread(self.store.add, record)
        await self.state.publish(crawl, options)
        await self.frontier.seed(self.config, seeds, new.priority, crawl, options)
        return await self.get(crawl)

    async def listed(self, state: State | None = None) -> list[CrawlView]:
        """Every crawl (newest first), or those in `state`."""
        records = await asyncio.to_thread(self.store.list, None)
        views = [await self._view(r) for r in records]
        return [v for v in views if state is None or v.state == state]

    async def page(
        self, state: State | None = None, limit: int = 20, before: str | None = None
    ) -> CrawlsView:
        """Up to `limit` crawls listed after the crawl `before`, newest first, or those in `state`."""
        records = await asyncio.to_thread(self.store.list, state, limit + 1, before)
        more = len(records) > limit
        records = records[:limit]
        credits = await asyncio.to_thread(self.store.credits, [r.id for r in records])
        views = [await self._view(r, credits.get(r.id)) for r in records]
        return CrawlsView(views, records[-1].id if more else None)

    async def get(self, crawl: str) -> CrawlView:
        """One crawl with its counts; NotFound if there is none."""
        record = await self._record(crawl)
        credits = await asyncio.to_thread(self.store.credits, [crawl])
        return await self._view(record, credits.get(crawl))

    async def quality(self, crawl: str | None = None, domain: str | None = None) -> QualityReport:
        """A crawl's coverage table (the newest crawl's if `crawl` is None), of `domain` alone if given,
        beside each domain's last finished crawl; NotFound if there is no such crawl."""
        if crawl is None:
            newest = await asyncio.to_thread(self.store.list, None, 1)
            if not newest:
                raise NotFound("no crawl yet: start one with `crawler seed` or `crawler crawl`")
            record = newest[0]
        else:
            record = await self._record(crawl)
        return await quality(self.state, self.store, self.config, record, domain)

    async def current_quality(self) -> list[QualityReport]:
        """The coverage tables whose alerts are current: the running crawls', and the newest crawl's
        if it has ended."""
        return await current_quality(self.state, self.store, self.config)

    async def series(self, crawl: str) -> SeriesView:
        """The pages a crawl stored per domain over its life so far, in at most SERIES_POINTS steps
        (none finer than its series keeps)."""
        record = await self._record(crawl)
        end = record.finished_at or datetime.now(UTC)
        span = max(1.0, (end - record.created_at).total_seconds())
        step = max(SERIES_STEPS[0][1], math.ceil(span / SERIES_POINTS))
        points = max(1, math.ceil(span / step))
        found = spread(await self.state.series(crawl), record.created_at.timestamp(), step, points)
        return SeriesView(crawl, record.created_at, step, found)

    async def cancel(self, crawl: str) -> CrawlView:
        """Cancel a running crawl fleet-wide; once this returns no consumer starts a fetch of it."""
        record = await self._record(crawl)
        if record.state in OPEN:
            # Redis first: workers check it before each fetch. From here its counts are frozen.
            await self.state.cancel(crawl)
            counts = kept(await self.state.counts(crawl))
            await asyncio.to_thread(self.store.end, crawl, "cancelled", counts)
        return await self.get(crawl)

    async def delete(self, crawl: str, purge: bool = False) -> None:
        """Forget a crawl (cancelled first if running); its pages stay unless `purge`."""
        record = await self._record(crawl)
        # Its id stays in the cancelled set: messages still queued are acked unfetched.
        await self.state.cancel(crawl)
        if record.state in OPEN:
            await asyncio.to_thread(self.store.end, crawl, "cancelled", {})
        await asyncio.to_thread(self.store.delete, crawl, purge)
        await self.state.forget(crawl)

    async def _record(self, crawl: str) -> CrawlRecord:
        record = await asyncio.to_thread(self.store.get, crawl)
        if record is None:
            raise NotFound(f"no crawl {crawl!r}: list them with `crawler crawls list` or GET /v1/crawls")
        return record

    async def _view(self, record: CrawlRecord, credits: float | None = None) -> CrawlView:
        # A view decides nothing: the worker whose count ends a crawl marks it finished, at that moment.
        counts = await self.state.shown(record)
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
