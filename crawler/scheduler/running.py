"""A scheduler with what it needs: its topology declared, a publishing channel, the sink's schedule."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime

from crawler.config import CrawlConfig
from crawler.frontier.client import Connection, publishing
from crawler.frontier.publisher import Publisher
from crawler.scheduler.metrics import SchedulerMetrics
from crawler.scheduler.scheduler import DEFAULT_TIMING, Scheduler, Timing
from crawler.settings import Settings
from crawler.sink.database import Database, opened
from crawler.sink.schedule import Schedule


@asynccontextmanager
async def scheduling(
    settings: Settings,
    config: Callable[[], CrawlConfig],
    connection: Connection,
    *,
    timing: Timing = DEFAULT_TIMING,
    metrics: SchedulerMetrics | None = None,
    clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    database: Database | None = None,
) -> AsyncIterator[Scheduler]:
    """A scheduler publishing on `connection` (a channel of its own, with confirms) from the sink in
    `database`, the process's (None: one of its own, closed with it)."""
    with opened(database or settings.database_url) as db:
        async with publishing(connection, config(), settings.names) as p:
            yield Scheduler(
                config,
                settings.names,
                Schedule(db),
                connection,
                Publisher(await p.exchange(settings.names.frontier)),
                timing=timing,
                metrics=metrics,
                clock=clock,
            )
