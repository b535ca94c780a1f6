"""`crawler-scheduler`: publish the stored pages that are due, for as long as it runs.

Exit codes: 0 stopped (SIGTERM, SIGINT), 2 a bad setting or a service out of reach (one line saying
which), 130 interrupted before it began.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from crawler import connections, stopping
from crawler.config import CrawlConfig, load_config, parse_duration
from crawler.errors import ConfigError, CrawlerError
from crawler.monitor import endpoint, logs
from crawler.monitor.endpoint import METRICS_ADDR
from crawler.programs import EXIT_USAGE, Parser, loop_factory
from crawler.redact import redact
from crawler.scheduler.metrics import SchedulerMetrics
from crawler.scheduler.running import scheduling
from crawler.scheduler.scheduler import AHEAD, LEASE, Timing
from crawler.settings import Settings
from crawler.sink.database import Database
from crawler.sink.sql import migrate

log = logging.getLogger("crawler.scheduler")
RELOAD_EVERY = 1.0  # seconds between looks at domains.yaml's modification time


def _duration(value: str) -> float:
    try:
        seconds = float(parse_duration(value))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if not 0 < seconds <= 7 * 86_400:
        raise argparse.ArgumentTypeError(f"{value!r} is not a duration from 1s to 7d")
    return seconds


def _port(value: str) -> int:
    if not value.isdigit() or not 0 <= int(value) <= 65535:
        raise argparse.ArgumentTypeError(f"{value!r} is not a TCP port (0-65535)")
    return int(value)


def build_parser() -> argparse.ArgumentParser:
    """crawler-scheduler's arguments."""
    parser = Parser(
        prog="crawler-scheduler",
        description="Publish the stored pages that are due again into their domain queues.",
        version=True,
    )
    parser.add_argument(
        "--ahead",
        type=_duration,
        default=AHEAD,
        help=f"how much of each domain's rate to keep queued (default {AHEAD:g}s)",
    )
    parser.add_argument(
        "--lease",
        type=_duration,
        default=LEASE,
        help=f"how long a published page stays claimed; a lost one is published again after it "
        f"(default {LEASE:g}s)",
    )
    parser.add_argument("--metrics-port", type=_port, help="serve Prometheus metrics on this port")
    parser.add_argument(
        "--metrics-addr",
        default=METRICS_ADDR,
        help=f"address to serve metrics on (default {METRICS_ADDR}: this machine only; 0.0.0.0 for all)",
    )
    parser.add_argument("--config", help="domains.yaml (default: $CRAWLER_CONFIG or config/domains.yaml)")
    parser.add_argument("-v", "--verbose", action="store_true", help="log each pass's publishes")
    parser.add_argument("--log-format", choices=logs.FORMATS, default="text", help="text, or json")
    return parser


class _Live:
    """domains.yaml as last read: an edit is read at the next look, an invalid one refused."""

    def __init__(self, path: str, config: CrawlConfig) -> None:
        self._path = Path(path)
        self._config = config
        self._mtime = _mtime(self._path)
        self._looked = time.monotonic()

    def __call__(self) -> CrawlConfig:
        if time.monotonic() - self._looked < RELOAD_EVERY:
            return self._config
        self._looked = time.monotonic()
        mtime = _mtime(self._path)
        if mtime != self._mtime:
            self._mtime = mtime
            try:
                self._config = load_config(self._path)
                log.info("configuration reloaded")
            except ConfigError as exc:
                log.error("edit of %s refused, the running configuration stays:\n%s", self._path, exc)
        return self._config


def _mtime(path: Path) -> float | None:
    try:
        return path.stat().st_mtime
    except OSError:
        return None


async def serve(settings: Settings, config: CrawlConfig, args: argparse.Namespace) -> None:
    """Publish what is due until SIGTERM or SIGINT."""
    with Database(settings.database_url) as db:
        await _serve(db, settings, config, args)


async def _serve(db: Database, settings: Settings, config: CrawlConfig, args: argparse.Namespace) -> None:
    await asyncio.to_thread(migrate, db)
    metrics = SchedulerMetrics()
    live = _Live(settings.config_path, config)
    timing = Timing(ahead=args.ahead, lease=args.lease)
    passed = [time.monotonic()]

    def health() -> tuple[bool, str]:
        age = time.monotonic() - passed[0]
        limit = max(60.0, 10 * timing.poll)
        return age <= limit, f"last pass {age:.1f}s ago (limit {limit:g}s)"

    server = None
    if args.metrics_port is not None:
        server = endpoint.serve(metrics.registry, args.metrics_port, args.metrics_addr, health)
    try:
        async with (
            connections.broker(settings.amqp_url, "crawler-scheduler") as connection,
            scheduling(settings, live, connection, timing=timing, metrics=metrics, database=db) as scheduler,
        ):
            stop = asyncio.Event()
            where = f"; metrics on http://{args.metrics_addr}:{server.port}/metrics" if server else ""
            log.info(
                "crawler-scheduler ready: %d domain(s)%s recrawl, %gs of their rates queued ahead, "
                "leases of %gs (%s)%s",
                len(scheduler.recrawling()),
                " and the host layout's" if config.layout_recrawls else "",
                timing.ahead,
                timing.lease,
                redact(settings.amqp_url),
                where,
            )
            with stopping.handled(lambda _: stop.set(), (signal.SIGINT,)):
                await scheduler.run(stop, on_pass=lambda: passed.__setitem__(0, time.monotonic()))
    finally:
        if server is not None:
            await asyncio.to_thread(server.close)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of `crawler-scheduler`."""
    args = build_parser().parse_args(argv)
    logs.setup(args.verbose, args.log_format)
    logging.getLogger("crawler.scheduler.passes").setLevel(logging.INFO if args.verbose else logging.WARNING)
    try:
        settings = Settings.from_env()
        if args.config:
            settings = replace(settings, config_path=args.config)
        config = load_config(settings.config_path)
        with asyncio.Runner(loop_factory=loop_factory()) as runner:
            stopping.run(runner, lambda: serve(settings, config, args))
    except CrawlerError as exc:
        print(f"crawler-scheduler: error: {redact(str(exc))}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130
    return 0
