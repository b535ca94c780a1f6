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
) -> AsyncIterator[Scheduler]:
    """A scheduler publishing on `connection` (a channel of its own, with confirms) from the sink."""
    schedule = Schedule(settings.database_url)
    try:
        async with publishing(connection, config(), settings.names) as p:
            yield Scheduler(
                config,
                settings.names,
                schedule,
                connection,
                Publisher(await p.exchange(settings.names.frontier)),
                timing=timing,
                metrics=metrics,
                clock=clock,
            )
    finally:
        schedule.close()
