"""The time from a crawl's first broken page to its coverage alert on the change feed, at ~500 pages/s.

python -m bench.alerting [--rate 500] [--good 5000] [--runs 5] [--workers 2] [--every 5]

Each run is a crawl of one domain whose price is expected on 95% of its pages: `good` pages with a
price, then pages without one (the template changed), each counted as a worker counts a stored page
(the same atomic count script, one call per page, paced at `rate` pages/s) until a queue bound to
the coverage alerts' routing key receives the alert. `workers` processes' readers (crawler.monitor.
alerting, every `every` s, the workers' default, each from a random phase) read the coverage as the
workers do. Fetching and
extraction are left out: they come before the count, and add nothing to the wait. Fresh services:
a RabbitMQ vhost, a Redis key prefix and a PostgreSQL database (bench/services.py).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import random
import statistics
import tempfile
import time
from collections.abc import Coroutine
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml
from aio_pika.abc import AbstractIncomingMessage
from redis.asyncio import Redis

from bench import services
from crawler import connections
from crawler.config import CrawlConfig, load_config
from crawler.frontier import exchanges
from crawler.frontier.crawls import CrawlState
from crawler.monitor.alerting import ALERT_EVERY, Alerting
from crawler.names import COVERAGE_ALERT_KEY, Names
from crawler.quality.coverage import ITEMS, fill_kind
from crawler.sink.crawls import CrawlRecord, CrawlStore
from crawler.sink.database import Database
from crawler.sink.sql import migrate

DOMAIN = "127.0.0.31"
EXPECTED = 0.95  # the price's expected fill rate


def configure(path: Path) -> CrawlConfig:
    """The bench site's domain, its price expected on 95% of its pages."""
    domain = {
        "extract": {"title": "h1", "price": ".price"},
        "expect": {"fields": {"price": {"present": f"{EXPECTED:.0%}"}}},
    }
    path.write_text(yaml.safe_dump({"domains": {DOMAIN: domain}}))
    return load_config(path)


def broken_needed(good: int) -> int:
    """Pages without a price, after `good` with one, that bring the crawl's rate under EXPECTED."""
    return math.floor(good * (1 - EXPECTED) / EXPECTED + 1e-9) + 1


async def page(state: CrawlState, crawl: str, *, priced: bool) -> None:
    """One stored page's counts: its outcome, a link routed, its quality counts."""
    kinds = ["ok", "routed", ITEMS, fill_kind("", "title"), *([fill_kind("", "price")] if priced else [])]
    await state.count(crawl, {(DOMAIN, kind): 1 for kind in kinds})


async def one_run(
    amqp_url: str,
    redis: Redis,
    names: Names,
    store: CrawlStore,
    config: CrawlConfig,
    args: argparse.Namespace,
) -> tuple[float, int]:
    """Seconds from the first broken page counted to the alert received, and broken pages counted by then."""
    crawl = services.unique("bench")
    store.add(CrawlRecord(crawl, None, "running", [f"http://{DOMAIN}/"], {}, datetime.now(UTC), None, None))
    state = CrawlState(redis, names)
    await state.count(crawl, {(DOMAIN, "routed"): 1})  # its seed: open until the bench stops
    received = asyncio.Event()
    at: list[float] = []

    async def on_alert(message: AbstractIncomingMessage) -> None:
        if message.message_id is not None and message.message_id.startswith(f"{crawl} "):
            at.append(time.monotonic())
            received.set()
        await message.ack()

    async with connections.broker(amqp_url, "bench alerting") as connection:
        channel = await connection.channel()
        await exchanges.declare(channel, exchanges.topology(config, names))
        queue = await channel.declare_queue(exclusive=True)
        await queue.bind(names.changes, COVERAGE_ALERT_KEY)
        await queue.consume(on_alert)
        readers = [
            Alerting(connection, redis, names, state, store, lambda: config) for _ in range(args.workers)
        ]
        # Workers started at any time: each reads at its own phase, none in step with the break.
        tasks = [
            asyncio.create_task(_later(random.uniform(0, args.every), r.run(args.every))) for r in readers
        ]
        try:
            started, counted, broken_at = time.monotonic(), 0, 0.0
            while not received.is_set():
                priced = counted < args.good
                await page(state, crawl, priced=priced)
                counted += 1
                if counted == args.good + 1:
                    broken_at = time.monotonic()
                # Paced: page n is counted no sooner than n / rate s after the first.
                ahead = started + counted / args.rate - time.monotonic()
                if ahead > 0:
                    await asyncio.sleep(ahead)
            pace = counted / (time.monotonic() - started)
        finally:
            for task in tasks:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
    await asyncio.to_thread(store.end, crawl, "cancelled", {})  # the next run's readings skip it
    broken = counted - args.good
    wait = at[0] - broken_at
    print(f"  {crawl}: alert {wait:5.2f} s after the first broken page ({broken} broken), {pace:.0f} pages/s")
    return wait, broken


async def _later(delay: float, work: Coroutine[Any, Any, None]) -> None:
    await asyncio.sleep(delay)
    await work


async def measure(args: argparse.Namespace) -> list[float]:
    waits = []
    with (
        services.vhost() as amqp_url,
        services.key_prefix("bench-alerting-") as prefix,
        services.database() as database_url,
        tempfile.TemporaryDirectory() as work,
    ):
        config = configure(Path(work) / "domains.yaml")
        await asyncio.to_thread(migrate, database_url)
        store_db = Database(database_url)
        store = CrawlStore(store_db)
        redis = Redis.from_url(services.REDIS_URL)
        try:
            for _ in range(args.runs):
                wait, _ = await one_run(amqp_url, redis, Names(prefix), store, config, args)
                waits.append(wait)
        finally:
            await redis.aclose()
            store_db.close()
    return waits


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.alerting")
    parser.add_argument("--rate", type=float, default=500.0, help="pages counted per second")
    parser.add_argument("--good", type=int, default=5000, help="pages with a price before the break")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--workers", type=int, default=2, help="workers reading the coverage")
    parser.add_argument(
        "--every", type=float, default=ALERT_EVERY, help="seconds between a worker's readings"
    )
    args = parser.parse_args()
    needed = broken_needed(args.good)
    print(
        f"{args.good} good pages then broken ones at {args.rate:g} pages/s, {args.workers} workers reading "
        f"every {args.every:g} s; the crawl's rate falls under {EXPECTED:.0%} at the {needed}th broken page "
        f"({needed / args.rate:.2f} s)"
    )
    waits = asyncio.run(measure(args))
    print(
        f"first broken page to alert: median {statistics.median(waits):.2f} s, "
        f"min {min(waits):.2f}, max {max(waits):.2f} over {len(waits)} runs"
    )


if __name__ == "__main__":
    main()
