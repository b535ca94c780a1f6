"""The command line: `crawler seed|crawl|crawls|domains|status|reset|dead|export|db upgrade`, and
`crawler-consume`.

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
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from rich.console import Console

from crawler.config import CrawlConfig, load_config, with_dedup_mode
from crawler.errors import CrawlerError
from crawler.monitor import logs
from crawler.monitor.metrics import AckAfter, DomainStats, Metrics
from crawler.monitor.progress import PROGRESS_SAMPLE_EVERY, Progress
from crawler.monitor.status import render, status, watch
from crawler.names import HEARTBEAT_TTL
from crawler.redact import redact
from crawler.service import Control, CrawlView, NewCrawl, check_crawl
from crawler.settings import Settings
from crawler.sink.export import FORMATS, Query, export, parse_since
from crawler.sink.sql import migrate
from crawler.worker import wiring
from crawler.worker.alongside import background
from crawler.worker.watching import Monitoring

EXIT_OK = 0
EXIT_BUG = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130

log = logging.getLogger("crawler")


class _QuietReconnects(logging.Filter):
    # Passwords are the formatters' to hide (logs.formatter redacts every whole line).
    def filter(self, record: logging.LogRecord) -> bool:
        if record.name.startswith(("aiormq", "aio_pika")):
            # A dropped broker connection is expected and recovered from: one line, not a traceback.
            record.exc_info = None
            record.exc_text = None
        return True


def _setup_logging(verbose: bool, fmt: str = "text") -> None:
    handler = logs.StderrHandler()
    handler.addFilter(_QuietReconnects())
    handler.setFormatter(logs.formatter(fmt))
    logging.captureWarnings(True)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO if verbose else logging.WARNING)
    logging.getLogger("crawler").setLevel(logging.INFO)
    # aio-pika says when the broker connection drops and comes back; aiormq repeats it louder.
    logging.getLogger("aiormq").setLevel(logging.INFO if verbose else logging.CRITICAL)
    # A line per page is a lot: only when asked.
    logging.getLogger("crawler.pages").setLevel(logging.INFO if verbose else logging.WARNING)


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config", help="domains.yaml to use (default: $CRAWLER_CONFIG or config/domains.yaml)"
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log every page's outcome")
    parser.add_argument(
        "--log-format", choices=logs.FORMATS, default="text", help="text, or json: one object per line"
    )


def _port(value: str) -> int:
    port = int(value)
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{value} is not a TCP port (0-65535)")
    return port


def _positive(value: str) -> float:
    number = float(value)
    if not number > 0:
        raise argparse.ArgumentTypeError(f"{value} is not a positive number of seconds")
    return number


def _monitoring_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--metrics-port", type=_port, help="serve Prometheus metrics on this port")
    parser.add_argument(
        "--metrics-addr", default="0.0.0.0", help="address to serve metrics on (default: all)"
    )
    # For tests: a short TTL lets a killed worker show as gone quickly.
    parser.add_argument("--heartbeat-ttl", type=_positive, default=HEARTBEAT_TTL, help=argparse.SUPPRESS)


def _monitoring(args: argparse.Namespace, metrics: Metrics | None = None) -> Monitoring:
    monitoring = Monitoring(port=args.metrics_port, addr=args.metrics_addr, heartbeat_ttl=args.heartbeat_ttl)
    if metrics is not None:
        # A progress display reads these metrics: sample queue depths often enough for it.
        monitoring.metrics, monitoring.sample_every = metrics, PROGRESS_SAMPLE_EVERY
    return monitoring


def _settings_and_config(args: argparse.Namespace) -> tuple[Settings, CrawlConfig]:
    settings = Settings.from_env()
    if args.config:
        settings = replace(settings, config_path=args.config)
    return settings, with_dedup_mode(load_config(settings.config_path), settings.dedup)


def _domains(value: str) -> list[str]:
    return [d for d in value.split(",") if d.strip()]


def _summary(stats: dict[str, DomainStats], seconds: float) -> str:
    lines = [
        f"{'domain':<24} {'ok':>7} {'failed':>7} {'retried':>7} {'dead':>5} {'invalid':>7} {'skipped':>7}"
    ]
    total = 0
    for domain, s in sorted(stats.items()):
        lines.append(
            f"{domain:<24} {s.ok:>7} {s.failed:>7} {s.retried:>7} {s.dead:>5} {s.invalid:>7} {s.skipped:>7}"
        )
        total += s.ok + s.failed
    rate = total / seconds if seconds > 0 else 0.0
    lines.append(f"{total} pages in {seconds:.1f}s: {rate:.1f} pages/s")
    return "\n".join(lines)


def _ack_delays(metrics: Metrics) -> str:
    """How soon deliveries were acked once done: what a crash just before would have done again."""
    parts = []
    afters: dict[AckAfter, str] = {"commit": "their row's commit", "retry": "their retry copy"}
    for after, what in afters.items():
        count, p99 = metrics.ack_delay_quantile(0.99, after)
        if p99 is not None:
            parts.append(f"{count} after {what}, p99 {1000 * p99:.1f} ms")
    return f"acked: {'; '.join(parts) if parts else 'none'}"


async def _dead(settings: Settings, config: CrawlConfig, args: argparse.Namespace) -> None:
    async with Control.open(settings, config, "crawler dead") as control:
        if args.action == "list":
            letters = await control.dead_letters(args.domain, args.reason, args.limit)
            for letter in letters:
                if args.json:
                    print(json.dumps(asdict(letter)))
                else:
                    print(f"{letter.reason:<10} {letter.attempts:>2} {letter.url}  {letter.error}")
            if not args.json:
                print(f"{len(letters)} dead letters", file=sys.stderr)
        elif args.action == "replay":
            print(f"{await control.replay_dead(args.domain, args.reason)} dead letters replayed")
        else:
            print(f"{await control.purge_dead(args.domain, args.reason)} dead letters purged")


def _crawl_line(view: CrawlView) -> str:
    done = {k: sum(c[k] for c in view.counts.values()) for k in ("ok", "failed", "dead", "pending")}
    counts = " ".join(f"{k}={n}" for k, n in done.items())
    return f"{view.id}  {view.state:<9}  {view.started:%Y-%m-%d %H:%M:%S}  {counts}  {view.label or ''}"


async def _crawls(settings: Settings, config: CrawlConfig, args: argparse.Namespace) -> None:
    async with Control.open(settings, config, "crawler crawls") as control:
        if args.action == "list":
            for view in await control.list_crawls(args.state):
                print(json.dumps(asdict(view), default=str) if args.json else _crawl_line(view))
            return
        if not args.id:
            raise CrawlerError(f"`crawler crawls {args.action}` needs a crawl id")
        if args.action == "show":
            print(json.dumps(asdict(await control.get_crawl(args.id)), default=str, indent=2))
        elif args.action == "cancel":
            print(_crawl_line(await control.cancel_crawl(args.id)))
        else:
            await control.delete_crawl(args.id, purge=args.purge)
            print(f"crawl {args.id} deleted{' with its pages' if args.purge else ''}")


async def _domains_verb(settings: Settings, config: CrawlConfig, args: argparse.Namespace) -> None:
    async with Control.open(settings, config, "crawler domains") as control:
        if args.action == "list":
            for d in await control.domains():
                paused = "paused" if d.paused else "active"
                print(f"{d.domain:<24} {paused:<7} depth={d.depth} rate={d.rate:g}/s workers={d.workers}")
            return
        if not args.domain:
            raise CrawlerError(f"`crawler domains {args.action}` needs a domain")
        done = await (control.pause(args.domain) if args.action == "pause" else control.resume(args.domain))
        print(f"{done} {args.action}d")


async def _new_crawl(settings: Settings, config: CrawlConfig, new: NewCrawl) -> CrawlView:
    check_crawl(config, new)  # a bad seed is said before a service is needed
    async with Control.open(settings, config, "crawler seed") as control:
        return await control.create_crawl(new)


def _crawl_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--label", help="a name for the crawl, for people")
    parser.add_argument("--max-depth", type=int, help="this crawl's link depth limit (below domains.yaml's)")
    parser.add_argument("--max-pages", type=int, help="this crawl's page budget, every domain together")
    parser.add_argument("--only", type=_domains, help="comma-separated domains this crawl may visit")


def _new(args: argparse.Namespace, urls: Sequence[str], priority: int | None) -> NewCrawl:
    return NewCrawl(urls, args.label, priority, args.max_depth, args.max_pages, args.only)


def _confirmed(args: argparse.Namespace) -> bool:
    """False if the command destroys something and a person did not say yes to it."""
    if args.command == "reset":
        question = "Forget every seen URL and purge the work queues?"
    elif args.command == "dead" and args.action == "purge":
        question = f"Delete dead letters{' of ' + args.domain if args.domain else ''} for good?"
    else:
        return True
    if args.yes:
        return True
    if not sys.stdin.isatty():
        print(f"crawler: {question} Pass --yes to confirm without a terminal.", file=sys.stderr)
        return False
    return input(f"{question} [y/N] ").strip().lower() in ("y", "yes")


def _loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    # uvloop's event loop costs less CPU per message and per request; asyncio's serves without it.
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def _run(coro: Callable[[], Coroutine[Any, Any, int]]) -> int:
    try:
        with asyncio.Runner(loop_factory=_loop_factory()) as runner:
            return runner.run(coro())
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

    p = sub.add_parser("seed", help="start a crawl: route its seed URLs into the frontier, print its id")
    p.add_argument("urls", nargs="+", metavar="URL")
    p.add_argument("--priority", type=int, choices=range(10), metavar="0-9", help="message priority")
    _crawl_options(p)
    _common(p)

    p = sub.add_parser("crawl", help="seed, consume every configured domain until done, print a summary")
    p.add_argument("urls", nargs="*", metavar="URL")
    p.add_argument("--prefetch", type=int, help="per-queue prefetch (default: each domain's)")
    p.add_argument("--fresh", action="store_true", help="forget what earlier crawls saw and queued first")
    _crawl_options(p)
    _monitoring_options(p)
    _common(p)

    p = sub.add_parser("crawls", help="crawls: list, show, cancel or delete one")
    p.add_argument("action", choices=["list", "show", "cancel", "delete"])
    p.add_argument("id", nargs="?", help="the crawl's id (show, cancel, delete)")
    p.add_argument("--state", choices=["running", "finished", "cancelled"], help="list only these")
    p.add_argument("--purge", action="store_true", help="delete: its stored pages too")
    p.add_argument("--json", action="store_true", help="list as JSON lines")
    _common(p)

    p = sub.add_parser("domains", help="domains: list them, pause or resume one fleet-wide")
    p.add_argument("action", choices=["list", "pause", "resume"])
    p.add_argument("domain", nargs="?", help="the domain (pause, resume)")
    _common(p)

    p = sub.add_parser("status", help="queue depths and stored pages per domain")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--watch", action="store_true", help="refresh the status until interrupted")
    p.add_argument("--interval", type=_positive, default=2.0, help="seconds between refreshes")
    _common(p)

    p = sub.add_parser("reset", help="forget seen URLs and purge the work queues")
    p.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    _common(p)

    p = sub.add_parser("dead", help="the dead queue: list, replay or purge what was set aside")
    p.add_argument("action", choices=["list", "replay", "purge"])
    p.add_argument("--domain", help="only this domain (and its subdomains)")
    p.add_argument("--reason", help="only this reason: transient, invalid, rejected")
    p.add_argument("--limit", type=int, help="list at most this many")
    p.add_argument("--json", action="store_true", help="list as JSON lines")
    p.add_argument("--yes", action="store_true", help="purge without asking")
    _common(p)

    p = sub.add_parser("export", help="the pages table as JSON lines, CSV or Parquet, streamed")
    p.add_argument("--format", choices=FORMATS, default="jsonl", help="jsonl (default), csv or parquet")
    p.add_argument("--domain", help="only this configured domain's pages")
    p.add_argument("--since", help="only pages fetched at or after this ISO 8601 time (UTC if no offset)")
    p.add_argument("--out", type=Path, help="file to write (default: stdout; parquet needs a file)")
    _common(p)

    p = sub.add_parser("db", help="database schema")
    p.add_argument("action", choices=["upgrade"])
    _common(p)

    args = parser.parse_args(argv)
    _setup_logging(args.verbose, args.log_format)
    if args.command == "status" and args.watch and args.json:
        parser.error("--watch and --json do not go together")
    if not _confirmed(args):
        return EXIT_USAGE
    if args.command == "export":
        return _export(args)

    async def run() -> int:
        settings, config = _settings_and_config(args)
        if args.command == "seed":
            view = await _new_crawl(settings, config, _new(args, args.urls, args.priority))
            routed = sum(c["pending"] for c in view.counts.values())
            print(f"crawl {view.id}: {routed} seeds routed")
            print(view.id)
        elif args.command == "crawl":
            if args.fresh:
                await wiring.reset(settings, config)
            if args.urls:
                view = await _new_crawl(settings, config, _new(args, args.urls, None))
                print(f"crawl {view.id}", file=sys.stderr)
            started = time.monotonic()
            metrics = Metrics()
            progress = Progress(metrics, wiring.check_domains(config, None))
            async with background(progress.run()):
                stats = await wiring.consume(
                    settings,
                    config,
                    burst=True,
                    prefetch=args.prefetch,
                    role="crawler crawl",
                    config_path=settings.config_path,
                    monitoring=_monitoring(args, metrics),
                )
            print(_summary(stats, time.monotonic() - started))
        elif args.command == "status" and args.watch:
            await watch(settings, config, args.interval, Console())
        elif args.command == "status":
            data = await status(settings, config)
            print(json.dumps(data, indent=2) if args.json else render(data))
        elif args.command == "reset":
            await wiring.reset(settings, config)
            print("seen URLs forgotten, work queues purged")
        elif args.command == "dead":
            await _dead(settings, config, args)
        elif args.command == "crawls":
            await _crawls(settings, config, args)
        elif args.command == "domains":
            await _domains_verb(settings, config, args)
        elif args.command == "db":
            await asyncio.to_thread(migrate, settings.database_url)
            print("database schema is up to date")
        return EXIT_OK

    return _run(run)


def _export(args: argparse.Namespace) -> int:
    # Reads the database alone: no domains.yaml and no broker are needed to take the data out.
    try:
        query = Query(args.domain, parse_since(args.since) if args.since else None)
        count = export(Settings.from_env().database_url, args.format, args.out, query)
    except CrawlerError as exc:
        print(f"crawler: error: {redact(str(exc))}", file=sys.stderr)
        return EXIT_USAGE
    if args.out is not None:
        print(f"{count} pages written to {args.out}", file=sys.stderr)
    return EXIT_OK


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
    _monitoring_options(parser)
    _common(parser)
    args = parser.parse_args(argv)
    _setup_logging(args.verbose, args.log_format)

    async def run() -> int:
        settings, config = _settings_and_config(args)
        started = time.monotonic()
        monitoring = _monitoring(args)
        stats = await wiring.consume(
            settings,
            config,
            args.domains,
            burst=args.burst,
            prefetch=args.prefetch,
            grace=args.grace,
            config_path=settings.config_path,
            monitoring=monitoring,
        )
        summary = _summary(stats, time.monotonic() - started)
        log.info("stopped\n%s\n%s", summary, _ack_delays(monitoring.metrics))
        return EXIT_OK

    return _run(run)
