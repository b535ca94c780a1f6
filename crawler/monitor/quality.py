"""A crawl's coverage table read from where it is kept: a running crawl's counts in Redis, an ended
one's row; compared with each domain's last finished crawl before it (docs/quality.md). What
`crawler quality`, `GET /v1/crawls/{id}/quality`, `crawler status` and the coverage gauges show."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from datetime import UTC, datetime

from crawler.config import CrawlConfig
from crawler.frontier.crawls import CrawlState
from crawler.quality.compare import Thresholds, baselines, compare
from crawler.quality.coverage import coverage_of
from crawler.quality.metrics import CoverageMetrics
from crawler.quality.report import QualityReport
from crawler.sink.crawls import OPEN, CrawlRecord, CrawlStore
from crawler.stopping import still_cancelled

log = logging.getLogger(__name__)

BASELINES = 200  # finished crawls looked through for each domain's last one
COVERAGE_EVERY = 15.0  # seconds between readings of the running crawls' coverage for the gauges
CURRENT = 20  # running crawls whose alerts are shown and raised


def thresholds(config: CrawlConfig, domain: str) -> Thresholds:
    """What the domain's coverage is held to: its `expect:` section and its `extract` fields."""
    rules = config.rules_for(domain if domain in config.domains else None)
    return Thresholds.of(rules.expect, rules.extract)


async def quality(
    state: CrawlState, store: CrawlStore, config: CrawlConfig, crawl: CrawlRecord, domain: str | None = None
) -> QualityReport:
    """`crawl`'s coverage table (of `domain` alone, if given), each domain beside its last finished
    crawl that ended before this one did (a running one: before now)."""
    running = crawl.state in OPEN
    counts = await state.counts(crawl.id) if running else (crawl.counts or {})
    found = coverage_of(counts)
    if domain is not None:
        found = {d: c for d, c in found.items() if d == domain}
    ended = await asyncio.to_thread(store.list, "finished", BASELINES)
    until = crawl.finished_at or datetime.now(UTC)
    earlier = [r for r in ended if r.finished_at is not None and r.finished_at < until]
    bases = baselines(earlier, found, besides=crawl.id)
    rows = []
    for d in sorted(found):
        base, before = bases.get(d, (None, None))
        rows.append(
            compare(
                d,
                found[d],
                thresholds(config, d),
                before,
                finished=crawl.state == "finished",
                baseline=base.id if base is not None else None,
            )
        )
    return QualityReport(crawl.id, tuple(rows), finished=not running)


async def running_quality(state: CrawlState, store: CrawlStore, config: CrawlConfig) -> list[QualityReport]:
    """The coverage tables of the crawls running now, newest first."""
    crawls = await asyncio.to_thread(store.list, "running", BASELINES)
    return [await quality(state, store, config, c) for c in crawls]


async def current_quality(state: CrawlState, store: CrawlStore, config: CrawlConfig) -> list[QualityReport]:
    """The coverage tables whose alerts are current: the running crawls', newest first, and the newest
    crawl's if it has ended (`crawler status`, the console and the change feed show their alerts)."""
    crawls = await asyncio.to_thread(store.list, "running", CURRENT)
    newest = await asyncio.to_thread(store.list, None, 1)
    if newest and newest[0].state != "running":
        crawls.append(newest[0])
    return [await quality(state, store, config, crawl) for crawl in crawls]


async def export_coverage(
    gauges: CoverageMetrics,
    state: CrawlState,
    store: CrawlStore,
    config: Callable[[], CrawlConfig],
    domains: Callable[[], Sequence[str]],
    every: float = COVERAGE_EVERY,
) -> None:
    """Set `crawler_field_coverage` and its floor from the running crawls' coverage of `domains`
    every `every` seconds, until cancelled; a domain no running crawl checks has no series."""
    while True:
        try:
            shown: set[str] = set()
            for report in await running_quality(state, store, config()):
                for d in report.domains:
                    if d.domain in domains() and d.domain not in shown:  # the newest crawl's
                        gauges.show(d)
                        shown.add(d.domain)
            for name in domains():
                if name not in shown:
                    gauges.forget(name)
        except Exception as exc:  # a reading lost (Redis, the database) is tried again next time
            still_cancelled()
            log.warning("field coverage not read: %r", exc)
        await asyncio.sleep(every)
