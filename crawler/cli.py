"""The command line: `crawler seed|crawl|status|reset|db upgrade` and `crawler-consume`.

Exit codes: 0 done, 1 an unexpected error (a traceback, passwords hidden), 2 bad input or a
service out of reach (one line on stderr saying which), 3 stopped at once by a second signal,
130 interrupted before work began.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
import time
import traceback
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from crawler import crawl
from crawler.config import CrawlConfig, load_config
from crawler.consumer import DomainStats
from crawler.errors import CrawlerError
from crawler.redact import RedactingFormatter, redact
from crawler.settings import Settings
from crawler.sink import migrate
from crawler.status import render, status

EXIT_OK = 0
EXIT_BUG = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130

log = logging.getLogger("crawler")


def _setup_logging(verbose: bool) -> None:
    handler = logging.StreamHandler(sys.stderr)
    # Redacting the formatted line covers arguments and tracebacks, whoever logs them.
    handler.setFormatter(RedactingFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.captureWarnings(True)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO if verbose else logging.WARNING)
    logging.getLogger("crawler").setLevel(logging.INFO)
    # A page's outcome line is the consumer's to log; quiet unless asked.
    logging.getLogger("crawler.consumer").setLevel(logging.INFO if verbose else logging.WARNING)


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config", help="domains.yaml to use (default: $CRAWLER_CONFIG or config/domains.yaml)"
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log every page's outcome")


def _settings_and_config(args: argparse.Namespace) -> tuple[Settings, CrawlConfig]:
    settings = Settings.from_env()
    path = args.config or settings.config_path
    return settings, load_config(path)


def _domains(value: str) -> list[str]:
    return [d for d in value.split(",") if d.strip()]


def _summary(stats: dict[str, DomainStats], seconds: float) -> str:
    lines = [f"{'domain':<24} {'ok':>7} {'failed':>7} {'retried':>7} {'dead':>5} {'invalid':>7}"]
    total = 0
    for domain, s in sorted(stats.items()):
        lines.append(f"{domain:<24} {s.ok:>7} {s.failed:>7} {s.retried:>7} {s.dead:>5} {s.invalid:>7}")
        total += s.ok + s.failed
    rate = total / seconds if seconds > 0 else 0.0
    lines.append(f"{total} pages in {seconds:.1f}s: {rate:.1f} pages/s")
    return "\n".join(lines)


def _confirm(question: str) -> bool:
    try:
        return input(f"{question} [y/N] ").strip().lower() in ("y", "yes")
    except EOFError:
        return False


def _run(coro: Callable[[], Coroutine[Any, Any, int]]) -> int:
    try:
        return asyncio.run(coro())
    except CrawlerError as exc:
        print(f"crawler: error: {redact(str(exc))}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except Exception:
        # A bug: its traceback is worth having, but not with a service password in it.
        print(redact(traceback.format_exc()), file=sys.stderr, end="")
        return EXIT_BUG


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of `crawler`."""
    parser = argparse.ArgumentParser(prog="crawler", description="A distributed web crawler on RabbitMQ.")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("seed", help="declare the topology and route seed URLs into the frontier")
    p.add_argument("urls", nargs="+", metavar="URL")
    p.add_argument("--priority", type=int, choices=range(10), metavar="0-9", help="message priority")
    _common(p)

    p = sub.add_parser("crawl", help="seed, consume every configured domain until done, print a summary")
    p.add_argument("urls", nargs="*", metavar="URL")
    p.add_argument("--prefetch", type=int, help="per-queue prefetch (default: each domain's)")
    p.add_argument("--fresh", action="store_true", help="forget what earlier crawls saw and queued first")
    _common(p)

    p = sub.add_parser("status", help="queue depths and stored pages per domain")
    p.add_argument("--json", action="store_true", help="print JSON")
    _common(p)

    p = sub.add_parser("reset", help="forget seen URLs and purge the work queues")
    p.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    _common(p)

    p = sub.add_parser("db", help="database schema")
    p.add_argument("action", choices=["upgrade"])
    _common(p)

    args = parser.parse_args(argv)
    _setup_logging(args.verbose)
    if (
        args.command == "reset"
        and not args.yes
        and not _confirm("Forget every seen URL and purge the work queues?")
    ):
        return EXIT_USAGE

    async def run() -> int:
        settings, config = _settings_and_config(args)
        if args.command == "seed":
            routed = await crawl.seed(settings, config, args.urls, args.priority)
            print(f"{len(routed.published)} seeds routed, {routed.seen} already seen")
        elif args.command == "crawl":
            if args.fresh:
                await crawl.reset(settings, config)
            started = time.monotonic()
            stats = await crawl.consume(
                settings, config, burst=True, prefetch=args.prefetch, seeds=args.urls, role="crawler crawl"
            )
            print(_summary(stats, time.monotonic() - started))
        elif args.command == "status":
            data = await status(settings, config)
            print(json.dumps(data, indent=2) if args.json else render(data))
        elif args.command == "reset":
            await crawl.reset(settings, config)
            print("seen URLs forgotten, work queues purged")
        elif args.command == "db":
            await asyncio.to_thread(migrate, settings.database_url)
            print("database schema is up to date")
        return EXIT_OK

    return _run(run)


def consume_main(argv: Sequence[str] | None = None) -> int:
    """Entry point of `crawler-consume`."""
    parser = argparse.ArgumentParser(
        prog="crawler-consume", description="Consume chosen domain queues: fetch, extract, store, route."
    )
    parser.add_argument("--domains", type=_domains, help="comma-separated domains (default: all configured)")
    parser.add_argument("--prefetch", type=int, help="per-queue prefetch (default: each domain's)")
    parser.add_argument("--burst", action="store_true", help="exit once the queues are empty")
    parser.add_argument(
        "--grace", type=float, default=30.0, help="seconds to finish in-flight work on SIGTERM"
    )
    _common(parser)
    args = parser.parse_args(argv)
    _setup_logging(args.verbose)

    async def run() -> int:
        settings, config = _settings_and_config(args)
        started = time.monotonic()
        stats = await crawl.consume(
            settings, config, args.domains, burst=args.burst, prefetch=args.prefetch, grace=args.grace
        )
        log.info("stopped\n%s", _summary(stats, time.monotonic() - started))
        return EXIT_OK

    return _run(run)
