"""The command line: `crawler seed|crawl|crawls|domains|quality|status|reset|dead|export|history prune|
sitemaps|db upgrade`, and `crawler-consume`.

Exit codes: 0 done, 1 an unexpected error (a traceback, passwords hidden), 2 bad input or a
service out of reach (one line on stderr saying which), 3 stopped at once by a second signal,
130 interrupted before work began.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import sys
import threading
import time
import traceback
from collections import Counter
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import asdict, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from pydantic_core import to_jsonable_python
from rich.console import Console

from crawler import connections, stopping
from crawler.archive.source import ArchiveSource
from crawler.changes.feed import feed_on
from crawler.config import CrawlConfig, load_config, with_dedup_mode
from crawler.dedup.near import NearIndexes
from crawler.errors import ConfigError, CrawlerError
from crawler.frontier.client import frontier
from crawler.frontier.client import reset as reset_frontier
from crawler.frontier.settling import AckAfter
from crawler.monitor import logs, readings
from crawler.monitor.endpoint import METRICS_ADDR
from crawler.monitor.metrics import DomainStats, Metrics
from crawler.monitor.progress import PROGRESS_SAMPLE_EVERY, Progress
from crawler.monitor.quality import thresholds
from crawler.monitor.status import render, status, watch
from crawler.names import HEARTBEAT_TTL
from crawler.programs import EXIT_USAGE, Parser, closed_pipe, loop_factory
from crawler.quality.coverage import Coverage, coverage_of
from crawler.quality.report import render as render_quality
from crawler.quality.report import reparse_report
from crawler.redact import redact
from crawler.reparse.linking import links_into
from crawler.reparse.run import Progress as ReparseProgress
from crawler.reparse.run import Reparser
from crawler.scheduler.running import scheduling
from crawler.service import Control, CrawlView, NewCrawl, check_crawl
from crawler.service.control import Schema
from crawler.service.inputs import DEAD_LIMIT, DEAD_REASONS, CrawlRequest
from crawler.service.migration import migrate_frontier
from crawler.settings import Settings
from crawler.sink.crawls import STATES, CrawlStore
from crawler.sink.export import FORMATS, Query, export, parse_since
from crawler.sink.export_object import export_to_object
from crawler.sink.prune import Pruner
from crawler.sink.reparsed import ReparseStore, Selection
from crawler.sink.sitemaps import SitemapRead, SitemapStore
from crawler.sink.sql import check_schema, migrate
from crawler.storage import is_object_url
from crawler.worker import EXIT_ABORTED, Ending, Monitoring, background, wiring

EXIT_OK = 0
EXIT_BUG = 1
EXIT_INTERRUPTED = 130
MAX_PREFETCH = 65_535  # AMQP's prefetch count is a 16-bit number
MAX_GRACE = 86_400.0  # seconds: a drain longer than a day is a typo

log = logging.getLogger("crawler")


def _common(parser: argparse.ArgumentParser, crawls: bool = False, sub: bool = False) -> None:
    """The options every program and command takes. A command's (`sub`) have no default of their
    own: given before the command (`crawler --config F status`) or after it, they count alike."""
    default: dict[str, Any] = {"default": argparse.SUPPRESS} if sub else {}
    parser.add_argument(
        "--config", help="domains.yaml to use (default: $CRAWLER_CONFIG or config/domains.yaml)", **default
    )
    verbose = "log every page's outcome, and connections" if crawls else "log what it connects to and does"
    parser.add_argument("-v", "--verbose", action="store_true", help=verbose, **default)
    if crawls:
        parser.add_argument(
            "--trace",
            action="store_true",
            help="log each URL's way: routed, delivered, acked, parked (a lot)",
        )
    parser.add_argument(
        "--log-format",
        choices=logs.FORMATS,
        help="text, or json: one object per line",
        **(default or {"default": "text"}),
    )


def _port(value: str) -> int:
    port = int(value)
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{value} is not a TCP port (0-65535)")
    return port


def _positive(value: str) -> float:
    number = _number(value)
    if not number > 0:
        raise argparse.ArgumentTypeError(f"{value} is not a positive number of seconds")
    return number


def _seconds(value: str) -> float:
    number = _number(value)
    if not 0 <= number <= MAX_GRACE:
        raise argparse.ArgumentTypeError(f"{value} is not a number of seconds from 0 to {MAX_GRACE:g}")
    return number


def _number(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number") from None
    if number != number or number in (float("inf"), float("-inf")):
        raise argparse.ArgumentTypeError(f"{value!r} is not a finite number")
    return number


def _count(low: int, high: int) -> Callable[[str], int]:
    """An argparse type: a whole number from `low` to `high`."""

    def count(value: str) -> int:
        try:
            number = int(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{value!r} is not a whole number") from None
        if not low <= number <= high:
            raise argparse.ArgumentTypeError(f"{value} is not from {low} to {high}")
        return number

    return count


_prefetch = _count(1, MAX_PREFETCH)


def _monitoring_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--metrics-port", type=_port, help="serve Prometheus metrics on this port")
    parser.add_argument(
        "--metrics-addr",
        default=METRICS_ADDR,
        help=f"address to serve metrics on (default {METRICS_ADDR}: this machine only; 0.0.0.0 for all)",
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


_SUMMARY = (("ok", 7), ("failed", 7), ("retried", 7), ("dead", 5), ("invalid", 7), ("skipped", 7))
# A recrawl's columns: its unchanged pages counted apart, a 304 and a same signature.
_REFRESHED = (
    ("changed", "changed", 7),
    ("not_modified", "304", 7),
    ("same_signature", "same", 7),
    ("gone", "gone", 5),
)


def _summary(stats: dict[str, DomainStats], seconds: float) -> str:
    refreshed = any(getattr(s, key) for s in stats.values() for key, _, _ in _REFRESHED)
    columns = [(key, key, width) for key, width in _SUMMARY] + (list(_REFRESHED) if refreshed else [])
    lines = [f"{'domain':<24} " + " ".join(f"{title:>{width}}" for _, title, width in columns)]
    total = 0
    for domain, s in sorted(stats.items()):
        lines.append(f"{domain:<24} " + " ".join(f"{getattr(s, key):>{width}}" for key, _, width in columns))
        total += s.ok + s.failed
    rate = total / seconds if seconds > 0 else 0.0
    lines.append(f"{total} pages in {seconds:.1f}s: {rate:.1f} pages/s")
    return "\n".join(lines)


def _ack_delays(metrics: Metrics) -> str:
    """How soon deliveries were acked once done: what a crash just before would have done again."""
    parts = []
    afters: dict[AckAfter, str] = {"commit": "their row's commit", "retry": "their retry copy"}
    for after, what in afters.items():
        count, p99 = readings.ack_delay_quantile(metrics, 0.99, after)
        if p99 is not None:
            parts.append(f"{count} after {what}, p99 {1000 * p99:.1f} ms")
    frames, multiple = readings.ack_frames(metrics)
    if frames:
        # Every delivery acked once done counts once among these (dead ones within failed).
        done = sum(
            s.ok + s.failed + s.retried + s.invalid + s.skipped for s in readings.summary(metrics).values()
        )
        per = f" ({frames / done:.3f} per delivery)" if done else ""
        parts.append(f"{frames} ack frames{per}, {multiple} of them multiple")
    return f"acked: {'; '.join(parts) if parts else 'none'}"


async def _dead(settings: Settings, config: CrawlConfig, args: argparse.Namespace) -> None:
    async with Control.open(settings, config, "crawler dead", "none") as control:
        if args.action == "list":
            letters = await control.dead.letters(args.domain, args.reason, args.limit)
            for letter in letters:
                if args.json:
                    print(json.dumps(asdict(letter)))
                else:
                    print(f"{letter.reason:<10} {letter.attempts:>2} {letter.url}  {letter.error}")
            if not args.json:
                print(f"{len(letters)} dead letters", file=sys.stderr)
        elif args.action == "replay":
            print(f"{await control.dead.replay(args.domain, args.reason)} dead letters replayed")
        else:
            print(f"{await control.dead.purge(args.domain, args.reason)} dead letters purged")


_CRAWL_KINDS = ("ok", "failed", "retrying", "dead", "skipped", "pending")
# A crawl's columns: (title, width); counts are right-aligned, the label takes the rest of the line.
_CRAWL_COLUMNS = (("id", 16), ("state", 11), ("started", 20), ("ended", 20))


def _crawl_line(view: CrawlView) -> str:
    def when(moment: datetime | None) -> str:
        return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ") if moment else "-"

    cells = (view.id, view.state, when(view.started), when(view.finished))
    left = "  ".join(f"{cell:<{width}}" for cell, (_, width) in zip(cells, _CRAWL_COLUMNS, strict=True))
    counts = " ".join(f"{sum(c.get(k, 0) for c in view.counts.values()):>{len(k)}}" for k in _CRAWL_KINDS)
    return f"{left}  {counts}  {view.label or ''}".rstrip()


def _crawl_header() -> str:
    left = "  ".join(f"{title:<{width}}" for title, width in _CRAWL_COLUMNS)
    return f"{left}  {' '.join(_CRAWL_KINDS)}  label"


def _json(value: Any, indent: int | None = None) -> str:
    """JSON as the HTTP API writes it (times in ISO 8601 with Z), so both read the same."""
    return json.dumps(to_jsonable_python(value), indent=indent)


async def _crawls(settings: Settings, config: CrawlConfig, args: argparse.Namespace) -> None:
    async with Control.open(settings, config, "crawler crawls", "check") as control:
        if args.action == "list":
            views = await control.crawls.listed(args.state)
            if not args.json:
                print(_crawl_header())
            for view in views:
                print(_json(asdict(view)) if args.json else _crawl_line(view))
            return
        if args.action == "show":
            print(_json(asdict(await control.crawls.get(args.id)), indent=2))
        elif args.action == "cancel":
            print(_crawl_line(await control.crawls.cancel(args.id)))
        else:
            await control.crawls.delete(args.id, purge=args.purge)
            print(f"crawl {args.id} deleted{' with its pages' if args.purge else ''}")


async def _domains_verb(settings: Settings, config: CrawlConfig, args: argparse.Namespace) -> None:
    # A pause is kept in the database too: it may make the schema; a list only reads.
    schema: Schema = "check" if args.action == "list" else "upgrade"
    async with Control.open(settings, config, "crawler domains", schema) as control:
        if args.action == "list":
            for d in await control.domains.listed():
                paused = "paused" if d.paused else "active"
                print(f"{d.domain:<24} {paused:<7} depth={d.depth} rate={d.rate:g}/s workers={d.workers}")
            return
        domains = control.domains
        done = await (domains.pause(args.domain) if args.action == "pause" else domains.resume(args.domain))
        print(f"{done} {args.action}d")


async def _new_crawl(settings: Settings, config: CrawlConfig, new: NewCrawl) -> CrawlView:
    check_crawl(config, new)  # a bad seed is said before a service is needed
    async with Control.open(settings, config, "crawler seed") as control:
        return await control.crawls.create(new)


async def _crawl_begun(settings: Settings, config: CrawlConfig, new: NewCrawl) -> tuple[CrawlView, int]:
    """A new crawl for `crawler crawl`, and how many messages were queued before it (left by others)."""
    check_crawl(config, new)
    async with Control.open(settings, config, "crawler crawl") as control:
        left = sum(d.depth for d in await control.domains.listed())
        return await control.crawls.create(new), left


def _crawl_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--label", help="a name for the crawl, for people")
    parser.add_argument("--max-depth", type=int, help="this crawl's link depth limit (below domains.yaml's)")
    parser.add_argument("--max-pages", type=int, help="this crawl's page budget, every domain together")
    parser.add_argument("--only", type=_domains, help="comma-separated domains this crawl may visit")


# The flag (or argument) of each field of a crawl request, for its errors.
_CRAWL_FLAGS = {
    "seeds": "URL",
    "label": "--label",
    "priority": "--priority",
    "max_depth": "--max-depth",
    "max_pages": "--max-pages",
    "domains": "--only",
}


def _new(args: argparse.Namespace, urls: Sequence[str], priority: int | None) -> NewCrawl:
    """The crawl asked for, checked by the model the HTTP API checks it with."""
    try:
        asked = CrawlRequest(
            seeds=list(urls),
            label=args.label,
            priority=priority,
            max_depth=args.max_depth,
            max_pages=args.max_pages,
            domains=args.only,
        )
    except ValidationError as exc:
        error = exc.errors()[0]
        flag = _CRAWL_FLAGS.get(str(error["loc"][0]), str(error["loc"][0])) if error["loc"] else "the crawl"
        message = str(error["msg"])
        raise ConfigError(f"{flag} {error['input']!r}: {message[:1].lower()}{message[1:]}") from None
    return NewCrawl(asked.seeds, asked.label, asked.priority, asked.max_depth, asked.max_pages, asked.domains)


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


def _run(coro: Callable[[], Coroutine[Any, Any, int]], *, drains: bool = False) -> int:
    """Run a command; one that `drains` (consumes) stops cleanly on SIGTERM, at start-up too (exit 0)."""
    try:
        with asyncio.Runner(loop_factory=loop_factory()) as runner:
            if not drains:
                return runner.run(coro())
            done = stopping.run(runner, coro)
            return EXIT_OK if done is None else done
    except CrawlerError as exc:
        print(f"crawler: error: {redact(str(exc))}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return closed_pipe()
    except Exception:
        # A bug: its traceback is worth having, but not with a service password in it.
        print(redact(traceback.format_exc()), file=sys.stderr, end="")
        return EXIT_BUG


def build_parser() -> argparse.ArgumentParser:
    """`crawler`'s arguments, every subcommand's included."""
    parser = Parser(prog="crawler", description="A distributed web crawler on RabbitMQ.", version=True)
    _common(parser)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("seed", help="start a crawl: route its seed URLs into the frontier, print its id")
    p.add_argument("urls", nargs="+", metavar="URL")
    p.add_argument("--priority", type=int, choices=range(10), metavar="0-9", help="message priority")
    _crawl_options(p)
    _common(p, sub=True)

    p = sub.add_parser("crawl", help="seed, consume every configured domain until done, print a summary")
    p.add_argument("urls", nargs="*", metavar="URL")
    p.add_argument("--prefetch", type=_prefetch, help="per-queue prefetch (default: each domain's)")
    p.add_argument("--fresh", action="store_true", help="forget what earlier crawls saw and queued first")
    p.add_argument(
        "--recrawl",
        choices=["due", "all"],
        help="also refresh stored pages: those due, or every one of every configured domain",
    )
    _crawl_options(p)
    _monitoring_options(p)
    _common(p, crawls=True, sub=True)

    p = sub.add_parser("recrawl", help="publish the stored pages that are due (or all of them), then exit")
    p.add_argument(
        "--domain",
        action="append",
        dest="recrawl_domains",
        metavar="DOMAIN",
        help="only this domain (again for more; default: every domain that recrawls, every one with --all)",
    )
    p.add_argument("--all", action="store_true", help="every stored page, due or not, recrawled or not")
    _common(p, sub=True)

    p = sub.add_parser("crawls", help="crawls: list, show, cancel or delete one")
    p.add_argument("action", choices=["list", "show", "cancel", "delete"])
    p.add_argument("id", nargs="?", help="the crawl's id (show, cancel, delete)")
    p.add_argument("--state", choices=STATES, help="list only these")
    p.add_argument("--purge", action="store_true", help="delete: its stored pages too")
    p.add_argument("--json", action="store_true", help="list as JSON lines")
    _common(p, sub=True)

    p = sub.add_parser(
        "quality", help="a crawl's field coverage and failed expectations, beside the last finished crawl"
    )
    p.add_argument("--crawl", metavar="ID", help="this crawl (default: the newest)")
    p.add_argument("--domain", help="only this domain")
    p.add_argument("--json", action="store_true", help="print JSON")
    _common(p, sub=True)

    p = sub.add_parser("domains", help="domains: list them, pause or resume one fleet-wide")
    p.add_argument("action", choices=["list", "pause", "resume"])
    p.add_argument("domain", nargs="?", help="the domain (pause, resume)")
    _common(p, sub=True)

    p = sub.add_parser("status", help="queue depths and stored pages per domain")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--watch", action="store_true", help="refresh the status until interrupted")
    p.add_argument("--interval", type=_positive, default=2.0, help="seconds between refreshes")
    _common(p, sub=True)

    p = sub.add_parser("reset", help="forget seen URLs and purge the work queues")
    p.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    _common(p, sub=True)

    p = sub.add_parser("dead", help="the dead queue: list, replay or purge what was set aside")
    p.add_argument("action", choices=["list", "replay", "purge"])
    p.add_argument("--domain", help="only this domain (and its subdomains)")
    p.add_argument("--reason", choices=DEAD_REASONS, help="only this reason")
    p.add_argument(
        "--limit", type=_count(*DEAD_LIMIT), help=f"list at most this many (up to {DEAD_LIMIT[1]})"
    )
    p.add_argument("--json", action="store_true", help="list as JSON lines")
    p.add_argument("--yes", action="store_true", help="purge without asking")
    _common(p, sub=True)

    p = sub.add_parser("export", help="the pages table as JSON lines, CSV or Parquet, streamed")
    p.add_argument("--format", choices=FORMATS, default="jsonl", help="jsonl (default), csv or parquet")
    p.add_argument("--domain", help="only this configured domain's pages")
    p.add_argument("--since", help="only pages fetched at or after this ISO 8601 time (UTC if no offset)")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--history", action="store_true", help="every version of the pages, one row each")
    which.add_argument(
        "--changed-since", metavar="TIME", help="only pages with a version fetched after this time"
    )
    p.add_argument(
        "--dataset",
        action="store_true",
        help="pages with content, one JSON record each: url, title, lang, markdown, fetched_at, digest",
    )
    p.add_argument(
        "--invalid",
        action="store_true",
        help="only pages that failed an expectation, each with its `expectations` (name and reason)",
    )
    where = p.add_mutually_exclusive_group()
    where.add_argument("--out", type=Path, help="file to write (default: stdout; parquet needs a file)")
    where.add_argument(
        "--to",
        metavar="s3://BUCKET/KEY",
        help="an object to write, as one multipart upload (none if cut short)",
    )
    _common(p, sub=True)

    p = sub.add_parser("history", help="page versions: delete those each domain's `history` no longer keeps")
    p.add_argument("action", choices=["prune"])
    p.add_argument(
        "--domain",
        action="append",
        dest="prune_domains",
        metavar="DOMAIN",
        help="only this domain (again for more; default: every configured domain)",
    )
    p.add_argument("--dry-run", action="store_true", help="count what would be deleted, delete nothing")
    _common(p, sub=True)

    p = sub.add_parser(
        "sitemaps", help="a domain's sitemaps as last read: files, URLs, what was dropped and why"
    )
    p.add_argument("domain")
    p.add_argument(
        "--read", action="store_true", help="first begin a round of reading them (the workers read it)"
    )
    p.add_argument("--json", action="store_true", help="print JSON lines, one per file")
    _common(p, sub=True)

    p = sub.add_parser(
        "reparse", help="run the current extraction again over archived answers; fetches nothing"
    )
    p.add_argument(
        "--domain",
        action="append",
        dest="reparse_domains",
        metavar="DOMAIN",
        help="only this domain's pages (again for more; default: every archived page)",
    )
    p.add_argument("--since", help="only pages fetched at or after this ISO 8601 time (UTC if no offset)")
    p.add_argument("--crawl", metavar="ID", help="only the pages this crawl stored")
    p.add_argument("--no-links", action="store_true", help="route none of the links the pages now give")
    p.add_argument("--workers", type=_workers, help="processes reading pages (default: one per core)")
    _common(p, sub=True)

    p = sub.add_parser(
        "frontier",
        help="migrate: re-make the queues as domains.yaml's frontier.queue_type says, moving messages",
    )
    p.add_argument("action", choices=["migrate"])
    p.add_argument(
        "--domains", type=_domains, help="only these domains' queues, comma-separated (and the shared ones)"
    )
    _common(p, sub=True)

    p = sub.add_parser("db", help="database schema")
    p.add_argument("action", choices=["upgrade"])
    _common(p, sub=True)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of `crawler`."""
    args = build_parser().parse_args(argv)
    if args.command != "crawl":  # a one-shot command: SIGTERM ends it as it always did
        stopping.let_go()
    logs.setup(args.verbose, args.log_format, trace=getattr(args, "trace", False))
    # What argparse cannot see alone, checked before anything connects.
    if args.command == "status" and args.watch and args.json:
        return _usage(args, "--watch and --json do not go together")
    if args.command == "crawls" and args.action != "list" and not args.id:
        return _usage(args, f"`crawler crawls {args.action}` needs a crawl id")
    if args.command == "domains" and args.action != "list" and not args.domain:
        return _usage(args, f"`crawler domains {args.action}` needs a domain")
    try:
        urls = getattr(args, "urls", None)  # seed and crawl
        new = _new(args, urls, getattr(args, "priority", None)) if urls else None
    except ConfigError as exc:
        return _usage(args, str(exc))
    if not _confirmed(args):
        return EXIT_USAGE
    if args.command == "export":
        return _export(args)
    if args.command == "history":
        return _prune(args)
    if args.command == "sitemaps" and not args.read:
        return _sitemaps(args)

    async def run() -> int:
        if args.command == "db":  # the schema alone: no domains.yaml needed
            await asyncio.to_thread(migrate, Settings.from_env().database_url)
            print("database schema is up to date")
            return EXIT_OK
        settings, config = _settings_and_config(args)
        if args.command == "seed":
            assert new is not None  # argparse asks seed for one URL at least
            view = await _new_crawl(settings, config, new)
            routed = sum(c["pending"] for c in view.counts.values())
            print(f"crawl {view.id}: {routed} seeds routed")
            print(view.id)
        elif args.command == "crawl":
            if args.fresh:
                await reset_frontier(settings, config)
            crawl = None
            if new is not None:
                view, left = await _crawl_begun(settings, config, new)
                crawl = view.id
                print(f"crawl {view.id}", file=sys.stderr)
                if left:
                    print(
                        f"crawler crawl: {left} messages of earlier crawls were queued already: they are "
                        "crawled too, and counted in the summary (not in this crawl); --fresh drops them",
                        file=sys.stderr,
                    )
            started = time.monotonic()
            metrics = Metrics()
            progress = Progress(metrics, wiring.check_domains(config, None))
            async with AsyncExitStack() as stack:
                more = await stack.enter_async_context(_recrawling(settings, config, args.recrawl))
                await stack.enter_async_context(background(progress.run()))
                consumed = await wiring.consume(
                    settings,
                    config,
                    burst=True,
                    prefetch=args.prefetch,
                    role="crawler crawl",
                    config_path=settings.config_path,
                    monitoring=_monitoring(args, metrics),
                    more=more,
                    crawl=crawl,
                )
            print(_summary(consumed.stats, time.monotonic() - started))
            return _crawl_ended(consumed.ending, crawl)
        elif args.command == "recrawl":
            async with Control.open(settings, config, "crawler recrawl", "check") as control:
                recrawled = await control.recrawls.recrawl(args.recrawl_domains, args.all)
            for domain in sorted(recrawled.published):
                published, due = recrawled.published[domain], recrawled.due[domain]
                print(f"{domain:<24} {published:>8} published {due:>8} still due")
        elif args.command == "status" and args.watch:
            await watch(settings, config, args.interval, Console())
        elif args.command == "status":
            data = await status(settings, config)
            print(json.dumps(data, indent=2) if args.json else render(data))
        elif args.command == "reset":
            await reset_frontier(settings, config)
            print("seen URLs forgotten, work queues purged")
        elif args.command == "dead":
            await _dead(settings, config, args)
        elif args.command == "crawls":
            await _crawls(settings, config, args)
        elif args.command == "domains":
            await _domains_verb(settings, config, args)
        elif args.command == "quality":
            async with Control.open(settings, config, "crawler quality", "check") as control:
                report = await control.crawls.quality(args.crawl, args.domain)
            print(_json(report.to_json(), indent=2) if args.json else render_quality(report))
        elif args.command == "sitemaps":
            async with Control.open(settings, config, "crawler sitemaps", "check") as control:
                began = await control.recrawls.read_sitemaps(args.domain)
            print(
                f"{args.domain}: a round of reading its sitemaps began at {began} origin(s)", file=sys.stderr
            )
            return _sitemaps(args)
        elif args.command == "reparse":
            return await _reparse(settings, config, args)
        elif args.command == "frontier":
            moved = await migrate_frontier(settings, config, wiring.check_domains(config, args.domains))
            for queue, count in moved.queues.items():
                print(f"{queue}: re-made as {config.frontier.queue_type}, {count} message(s) moved")
            print(f"{len(moved.unchanged)} queue(s) already {config.frontier.queue_type}")
        return EXIT_OK

    return _run(run, drains=args.command == "crawl")


def _crawl_ended(ending: Ending, crawl: str | None) -> int:
    """A burst's exit status: 0 drained; 2 if the fetch service refused a domain (said in one line);
    130 if Ctrl-C stopped it first (0 for SIGTERM, a graceful stop); what is left stays queued."""
    which = f"crawl {crawl}" if crawl else "the crawl"
    if ending.halted:
        domain, why = sorted(ending.halted.items())[0]
        more = f" (and {len(ending.halted) - 1} more domains)" if len(ending.halted) > 1 else ""
        print(
            f"crawler: error: {which} cannot fetch {domain}{more}: {redact(why)}; "
            "its messages stay queued for the next run",
            file=sys.stderr,
        )
        return EXIT_USAGE
    if ending.stopped:
        print(
            f"{which} interrupted: what it left queued is crawled by the next `crawler crawl`",
            file=sys.stderr,
        )
        return EXIT_INTERRUPTED if ending.signal == signal.SIGINT else EXIT_OK
    return EXIT_OK


@asynccontextmanager
async def _recrawling(
    settings: Settings, config: CrawlConfig, which: str | None
) -> AsyncIterator[Callable[[], bool]]:
    """`crawl --recrawl`: a scheduler publishing what is due alongside; what says it has more."""
    if which is None:
        yield lambda: False
        return
    domains = sorted(d for d, r in config.rules.items() if which == "all" or r.recrawls)
    async with (
        connections.broker(settings.amqp_url, "crawler crawl scheduler") as connection,
        scheduling(settings, lambda: config, connection) as scheduler,
    ):
        if which == "all":
            await scheduler.make_due(domains)
        await scheduler.read_sitemaps(domains, every=True)
        stop = asyncio.Event()
        task = asyncio.create_task(scheduler.run(stop, domains))
        try:
            yield scheduler.pending
        finally:
            stop.set()
            await task


def _workers(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = 0
    if not 1 <= n <= 256:
        raise argparse.ArgumentTypeError(f"{text!r}: a number of processes from 1 to 256")
    return n


async def _reparse(settings: Settings, config: CrawlConfig, args: argparse.Namespace) -> int:
    """`crawler reparse`: until every selected page is read again, or Ctrl-C / SIGTERM (then it
    finishes its batch and exits 130 / 143, and the same command resumes; a second one exits now)."""
    domains = tuple(wiring.check_domains(config, args.reparse_domains)) if args.reparse_domains else ()
    selection = Selection(domains, parse_since(args.since) if args.since else None, args.crawl)
    source = ArchiveSource.of(settings)  # an archive in object storage: read there, or in the spool
    local = not is_object_url(settings.archive_dir)
    if local and not await asyncio.to_thread(os.path.isdir, settings.archive_dir):
        raise ConfigError(
            f"no archive directory {settings.archive_dir!r}: set CRAWLER_ARCHIVE_DIR to the workers' one"
        )
    await asyncio.to_thread(migrate, settings.database_url)
    stop = asyncio.Event()
    received: list[signal.Signals] = []
    loop = asyncio.get_running_loop()

    def on_signal(sig: signal.Signals) -> None:
        received.append(sig)
        if len(received) > 1:
            print(f"second {sig.name}: exiting now; the same command resumes", file=sys.stderr)
            os._exit(EXIT_ABORTED)  # the batch under way is lost, the ones committed are not
        print(f"{sig.name}: finishing the batch under way; again to exit now", file=sys.stderr)
        stop.set()

    # Only a main thread can take signals (a caller may run this command in another).
    stoppable = threading.current_thread() is threading.main_thread()
    for sig in (signal.SIGINT, signal.SIGTERM) if stoppable else ():
        loop.add_signal_handler(sig, on_signal, sig)
    store = ReparseStore(settings.database_url)
    before = await _kept_coverage(settings, args.crawl)
    last = [0.0]

    def report(p: ReparseProgress) -> None:
        if time.monotonic() - last[0] >= 2 or p.done == p.total:
            last[0] = time.monotonic()
            share = f" ({100 * p.done / p.total:.0f}%)" if p.total else ""
            print(
                f"reparse: {p.done:,} of {p.total:,} pages{share}, {p.changed:,} changed, "
                f"{p.failed:,} unreadable, {p.links:,} links routed; {p.rate:,.0f} pages/s",
                file=sys.stderr,
            )

    try:
        async with AsyncExitStack() as stack:
            links = None
            f = await stack.enter_async_context(frontier(settings, "crawler reparse", config))
            # The versions it makes reach the change feed as a worker's do.
            feed = await stack.enter_async_context(feed_on(f.connection, config, settings.names))
            if not args.no_links:
                links = await stack.enter_async_context(links_into(f, config))
            # Near-duplicates are claimed in the fleet's index, in Redis, as a worker claims them.
            near = NearIndexes(f.redis, settings.names) if config.content else None
            workers = args.workers or os.cpu_count() or 1
            reparser = Reparser(
                config, store, source, selection, workers=workers, links=links, near=near, feed=feed
            )
            done = await reparser.run(stop, report)
    finally:
        store.close()
        for sig in (signal.SIGINT, signal.SIGTERM) if stoppable else ():
            loop.remove_signal_handler(sig)
    resumed = " (resumed)" if done.resumed else ""
    print(
        f"{done.done:,} pages read again{resumed}: {done.changed:,} changed, {done.skipped:,} not pages "
        f"(redirects, errors, not HTML), {done.failed:,} unreadable, {done.links:,} links routed"
    )
    after = await _kept_coverage(settings, args.crawl)
    if args.crawl and before is not None and after:
        chosen = {d: c for d, c in after.items() if not domains or d in domains}
        limits = {d: thresholds(config, d) for d in chosen}
        print(render_quality(reparse_report(args.crawl, before, chosen, limits)))
    if received and done.done < done.total:
        print("stopped: the same command resumes where this one stopped", file=sys.stderr)
        return 128 + received[0]  # 130 for Ctrl-C, 143 for SIGTERM, as a shell reports them
    return EXIT_OK


async def _kept_coverage(settings: Settings, crawl: str | None) -> dict[str, Coverage] | None:
    """An ended crawl's coverage per domain as its row keeps it (what a re-parse corrects); None if
    there is no such crawl, or it has not ended (its counts are its workers')."""
    if crawl is None:
        return None
    records = CrawlStore(settings.database_url)
    try:
        record = await asyncio.to_thread(records.get, crawl)
    finally:
        records.close()
    return None if record is None or record.counts is None else coverage_of(record.counts)


def _usage(args: argparse.Namespace, message: str) -> int:
    """A bad command line, said in one line as argparse says its own."""
    command = f"crawler {args.command}"
    print(f"{command}: error: {redact(message)} (see {command} --help)", file=sys.stderr)
    return EXIT_USAGE


def _export(args: argparse.Namespace) -> int:
    # Reads the database alone: no domains.yaml and no broker are needed to take the data out.
    try:
        since = parse_since(args.since) if args.since else None
        changed = parse_since(args.changed_since, "--changed-since") if args.changed_since else None
        query = Query(args.domain, since, args.history, changed, args.dataset, args.invalid)
        settings = Settings.from_env()
        check_schema(settings.database_url)
        if args.to:
            count = export_to_object(settings, args.format, args.to, query)
        else:
            count = export(settings.database_url, args.format, args.out, query)
    except CrawlerError as exc:
        print(f"crawler: error: {redact(str(exc))}", file=sys.stderr)
        return EXIT_USAGE
    except BrokenPipeError:
        return closed_pipe()
    except KeyboardInterrupt:
        print("crawler export: interrupted; nothing was left under the key", file=sys.stderr)
        return EXIT_INTERRUPTED
    if args.out is not None or args.to:
        what = "versions" if args.history else "pages"
        print(f"{count} {what} written to {args.out or args.to}", file=sys.stderr)
    return EXIT_OK


def _prune(args: argparse.Namespace) -> int:
    # The database and domains.yaml alone: a cron job needs no broker.
    try:
        settings, config = _settings_and_config(args)
        domains = wiring.check_domains(config, args.prune_domains)
        check_schema(settings.database_url)
        pruner = Pruner(settings.database_url)
        try:
            for domain in domains:
                history = config.rules[domain].history
                if history is None:
                    print(f"{domain:<24} history off: its versions left alone")
                    continue
                deleted = pruner.prune(domain, history, args.dry_run)
                done = "would be deleted (dry run)" if args.dry_run else "deleted"
                print(f"{domain:<24} {deleted:>10} versions {done}")
        finally:
            pruner.close()
    except CrawlerError as exc:
        print(f"crawler: error: {redact(str(exc))}", file=sys.stderr)
        return EXIT_USAGE
    except BrokenPipeError:
        return closed_pipe()
    return EXIT_OK


def _sitemaps(args: argparse.Namespace) -> int:
    # The database and domains.yaml alone: what the workers' last readings found.
    try:
        settings, config = _settings_and_config(args)
        [domain] = wiring.check_domains(config, [args.domain])
        check_schema(settings.database_url)
        store = SitemapStore(settings.database_url)
        try:
            read = store.files(domain)
        finally:
            store.close()
    except CrawlerError as exc:
        print(f"crawler: error: {redact(str(exc))}", file=sys.stderr)
        return EXIT_USAGE
    try:
        if args.json:
            for f in read:
                print(json.dumps(_sitemap_json(f)))
        else:
            print(_sitemap_table(domain, read, config.rules[domain].sitemaps))
    except BrokenPipeError:
        return closed_pipe()
    return EXIT_OK


def _sitemap_json(f: SitemapRead) -> dict[str, Any]:
    return {
        "url": f.url,
        "depth": f.depth,
        "outcome": f.outcome,
        "kind": f.kind,
        "status_code": f.status_code,
        "read_at": f.read_at.isoformat(),
        "urls": dict(f.counts),
        "note": f.note,
    }


def _sitemap_table(domain: str, read: Sequence[SitemapRead], setting: object) -> str:
    if setting is False:
        head = f"{domain}: sitemaps off (`sitemaps: false` in domains.yaml)"
    else:
        head = f"{domain}: no sitemap read yet" if not read else f"{domain}: {len(read)} sitemap file(s)"
    total: Counter[str] = Counter()
    lines = []
    for f in read:
        total.update(f.counts)
        counts = ", ".join(f"{n} {k}" for k, n in sorted(f.counts.items())) or "no URLs"
        note = f" ({f.note})" if f.note else ""
        when = f.read_at.strftime("%Y-%m-%d %H:%M:%S")
        lines.append(f"  {f.outcome:<12} {f.kind or '-':<12} {when}  {f.url}\n    {counts}{note}")
    if total:
        head += ": " + ", ".join(f"{n} {k}" for k, n in sorted(total.items()))
    return "\n".join([head, *lines])


def build_consume_parser() -> argparse.ArgumentParser:
    """`crawler-consume`'s arguments."""
    parser = Parser(
        prog="crawler-consume",
        description="Consume chosen domain queues: fetch, extract, store, route.",
        version=True,
    )
    parser.add_argument("--domains", type=_domains, help="comma-separated domains (default: all configured)")
    parser.add_argument("--prefetch", type=_prefetch, help="per-queue prefetch (default: each domain's)")
    parser.add_argument("--burst", action="store_true", help="exit once the queues are empty")
    parser.add_argument(
        "--grace", type=_seconds, default=30.0, help="seconds to finish in-flight work on SIGTERM"
    )
    _monitoring_options(parser)
    _common(parser, crawls=True)
    return parser


def consume_main(argv: Sequence[str] | None = None) -> int:
    """Entry point of `crawler-consume`."""
    args = build_consume_parser().parse_args(argv)
    logs.setup(args.verbose, args.log_format, trace=args.trace)

    async def run() -> int:
        settings, config = _settings_and_config(args)
        started = time.monotonic()
        monitoring = _monitoring(args)
        consumed = await wiring.consume(
            settings,
            config,
            args.domains,
            burst=args.burst,
            prefetch=args.prefetch,
            grace=args.grace,
            config_path=settings.config_path,
            monitoring=monitoring,
        )
        summary = _summary(consumed.stats, time.monotonic() - started)
        log.info("stopped\n%s\n%s", summary, _ack_delays(monitoring.metrics))
        # A worker stopped by a signal ends as it always did (0); one that cannot fetch does not.
        return _crawl_ended(replace(consumed.ending, stopped=False), None) if args.burst else EXIT_OK

    return _run(run, drains=True)
