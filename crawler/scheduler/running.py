"""A scheduler with what it needs: its topology declared, a publishing channel, the sink's schedule."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime

from aio_pika.abc import AbstractRobustConnection

from crawler.config import CrawlConfig
from crawler.connections import publishing_channel
from crawler.frontier.exchanges import declare, topology
from crawler.scheduler.metrics import SchedulerMetrics
from crawler.scheduler.scheduler import DEFAULT_TIMING, Scheduler, Timing
from crawler.settings import Settings
from crawler.sink.schedule import Schedule


@asynccontextmanager
async def scheduling(
    settings: Settings,
    config: Callable[[], CrawlConfig],
    connection: AbstractRobustConnection,
    *,
    timing: Timing = DEFAULT_TIMING,
    metrics: SchedulerMetrics | None = None,
    clock: Callable[[], datetime] = lambda: datetime.now(UTC),
) -> AsyncIterator[Scheduler]:
    """A scheduler publishing on `connection` (a channel of its own, with confirms) from the sink."""
    channel = await publishing_channel(connection)
    schedule = Schedule(settings.database_url)
    try:
        await declare(channel, topology(config(), settings.names))
        exchange = await channel.get_exchange(settings.names.frontier, ensure=False)
        yield Scheduler(
            config,
            settings.names,
            schedule,
            connection,
            exchange,
            timing=timing,
            metrics=metrics,
            clock=clock,
        )
    finally:
        schedule.close()
        if not channel.is_closed:
            await channel.close()
