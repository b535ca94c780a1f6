"""`crawler-consume`: a worker consuming chosen domain queues until stopped (or drained, `--burst`)."""

from __future__ import annotations

import argparse
import logging
import time
from collections.abc import Sequence
from dataclasses import replace

from crawler.cli.arguments import MONITORING, PREFETCH, add, arg, common, domains, seconds
from crawler.cli.consuming import ack_delays, crawl_ended, monitoring, summary
from crawler.cli.running import EXIT_OK, configured
from crawler.config import CrawlConfig
from crawler.monitor import logs
from crawler.programs import Parser
from crawler.settings import Settings
from crawler.worker import wiring

log = logging.getLogger("crawler")

ARGUMENTS = (
    arg("--domains", type=domains, help="comma-separated domains (default: all configured)"),
    PREFETCH,
    arg("--burst", action="store_true", help="exit once the queues are empty"),
    arg("--grace", type=seconds, default=30.0, help="seconds to finish in-flight work on SIGTERM"),
    *MONITORING,
    *common(consumes=True),
)


def build_consume_parser() -> argparse.ArgumentParser:
    """`crawler-consume`'s arguments."""
    parser = Parser(
        prog="crawler-consume",
        description="Consume chosen domain queues: fetch, extract, store, route.",
        version=True,
    )
    add(parser, ARGUMENTS)
    return parser


def consume_main(argv: Sequence[str] | None = None) -> int:
    """Entry point of `crawler-consume`."""
    args = build_consume_parser().parse_args(argv)
    logs.setup(args.verbose, args.log_format, trace=args.trace)

    async def work(settings: Settings, config: CrawlConfig) -> int:
        started = time.monotonic()
        watching = monitoring(args)
        consumed = await wiring.consume(
            settings,
            config,
            args.domains,
            burst=args.burst,
            prefetch=args.prefetch,
            grace=args.grace,
            config_path=settings.config_path,
            monitoring=watching,
        )
        stats = summary(consumed.stats, time.monotonic() - started)
        log.info("stopped\n%s\n%s", stats, ack_delays(watching.metrics))
        # A worker stopped by a signal ends as it always did (0); one that cannot fetch does not.
        return crawl_ended(replace(consumed.ending, stopped=False), None) if args.burst else EXIT_OK

    return configured(args, work, drains=True)
