"""`crawler seed`, `crawler crawl` and `crawler recrawl`: work begun, and in `crawl` done here."""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager

from pydantic import ValidationError

from crawler import connections
from crawler.cli.arguments import CRAWL_OPTIONS, MONITORING, PREFETCH, Command, arg, each_domain
from crawler.cli.consuming import crawl_ended, monitoring, summary
from crawler.cli.running import EXIT_OK, configured, usage
from crawler.config import CrawlConfig
from crawler.errors import ConfigError
from crawler.frontier.client import reset as reset_frontier
from crawler.monitor.metrics import Metrics
from crawler.monitor.progress import Progress
from crawler.scheduler.running import scheduling
from crawler.service import Control, CrawlView, NewCrawl, check_crawl
from crawler.service.inputs import CrawlRequest
from crawler.settings import Settings
from crawler.sink.database import Database
from crawler.worker import background, wiring

# The flag (or argument) of each field of a crawl request, for its errors.
_CRAWL_FLAGS = {
    "seeds": "URL",
    "label": "--label",
    "priority": "--priority",
    "max_depth": "--max-depth",
    "max_pages": "--max-pages",
    "domains": "--only",
}


def _new(args: argparse.Namespace) -> NewCrawl | None:
    """The crawl asked for (None: no URL given), checked by the model the HTTP API checks it with."""
    if not args.urls:
        return None
    try:
        asked = CrawlRequest(
            seeds=list(args.urls),
            label=args.label,
            priority=getattr(args, "priority", None),
            max_depth=args.max_depth,
            max_pages=args.max_pages,
            domains=args.only,
        )
    except ValidationError as exc:
        error = exc.errors()[0]
        flag = _CRAWL_FLAGS.get(str(error["loc"][0]), str(error["loc"][0])) if error["loc"] else "the crawl"
        message = str(error["msg"])
        raise ConfigError(f"{flag} {_shown(error['input'])}: {message[:1].lower()}{message[1:]}") from None
    return NewCrawl(asked.seeds, asked.label, asked.priority, asked.max_depth, asked.max_pages, asked.domains)


def _shown(value: object) -> str:
    """A refused value as an error line shows it: a list by its length, anything else cut short."""
    if isinstance(value, list | tuple):
        return f"({len(value)} given)"
    text = repr(value)
    return text if len(text) <= 200 else f"{text[:200]}..."


def seed(args: argparse.Namespace) -> int:
    """`crawler seed`: a new crawl, its seeds routed; its id printed."""
    try:
        new = _new(args)
    except ConfigError as exc:
        return usage(args, str(exc))
    assert new is not None  # argparse asks seed for one URL at least

    async def work(settings: Settings, config: CrawlConfig) -> int:
        check_crawl(config, new)  # a bad seed is said before a service is needed
        async with Control.open(settings, config, "crawler seed") as control:
            view = await control.crawls.create(new)
        routed = sum(c["pending"] for c in view.counts.values())
        print(f"crawl {view.id}: {routed} seeds routed")
        print(view.id)
        return EXIT_OK

    return configured(args, work)


def crawl(args: argparse.Namespace) -> int:
    """`crawler crawl`: seed, consume every configured domain until drained, print a summary."""
    try:
        new = _new(args)
    except ConfigError as exc:
        return usage(args, str(exc))
    return configured(args, lambda settings, config: _crawl(settings, config, args, new), drains=True)


async def _crawl(
    settings: Settings, config: CrawlConfig, args: argparse.Namespace, new: NewCrawl | None
) -> int:
    # One database for each part of the crawl: resetting, beginning, recrawling, consuming.
    with Database(settings.database_url) as database:
        return await _crawl_in(database, settings, config, args, new)


async def _crawl_in(
    database: Database,
    settings: Settings,
    config: CrawlConfig,
    args: argparse.Namespace,
    new: NewCrawl | None,
) -> int:
    if args.fresh:
        await reset_frontier(settings, config, database)
    crawl = None if new is None else await _begin(settings, config, new, database)
    started = time.monotonic()
    metrics = Metrics()
    progress = Progress(metrics, wiring.check_domains(config, None))
    async with AsyncExitStack() as stack:
        more = await stack.enter_async_context(_recrawling(settings, config, args.recrawl, database))
        await stack.enter_async_context(background(progress.run()))
        consumed = await wiring.consume(
            settings,
            config,
            burst=True,
            prefetch=args.prefetch,
            role="crawler crawl",
            config_path=settings.config_path,
            monitoring=monitoring(args, metrics),
            more=more,
            crawl=crawl,
            database=database,
        )
    print(summary(consumed.stats, time.monotonic() - started))
    return crawl_ended(consumed.ending, crawl)


async def _begin(settings: Settings, config: CrawlConfig, new: NewCrawl, database: Database) -> str:
    """A new crawl for `crawler crawl`, said with how many messages were queued before it (left by others)."""
    check_crawl(config, new)
    async with Control.open(settings, config, "crawler crawl", database=database) as control:
        left = sum(d.depth for d in await control.domains.listed())
        view: CrawlView = await control.crawls.create(new)
    print(f"crawl {view.id}", file=sys.stderr)
    if left:
        print(
            f"crawler crawl: {left} messages of earlier crawls were queued already: they are "
            "crawled too, and counted in the summary (not in this crawl); --fresh drops them",
            file=sys.stderr,
        )
    return view.id


@asynccontextmanager
async def _recrawling(
    settings: Settings, config: CrawlConfig, which: str | None, database: Database
) -> AsyncIterator[Callable[[], bool]]:
    """`crawl --recrawl`: a scheduler publishing what is due alongside; what says it has more."""
    if which is None:
        yield lambda: False
        return
    domains = sorted(d for d, r in config.rules.items() if which == "all" or r.recrawls)
    async with (
        connections.broker(settings.amqp_url, "crawler crawl scheduler") as connection,
        scheduling(settings, lambda: config, connection, database=database) as scheduler,
    ):
        if which == "all":
            await scheduler.make_due(domains)
        await scheduler.read_sitemaps(domains, every=True)
        stop = asyncio.Event()
        # Due pages of the host layout's domains too (they have no queue to name them by).
        task = asyncio.create_task(scheduler.run(stop, None if which == "due" else domains))
        try:
            yield scheduler.pending
        finally:
            stop.set()
            await task


def recrawl(args: argparse.Namespace) -> int:
    """`crawler recrawl`: publish the stored pages that are due (or all of them)."""

    async def work(settings: Settings, config: CrawlConfig) -> int:
        async with Control.open(settings, config, "crawler recrawl", "check") as control:
            recrawled = await control.recrawls.recrawl(args.recrawl_domains, args.all)
        for domain in sorted(recrawled.published):
            published, due = recrawled.published[domain], recrawled.due[domain]
            print(f"{domain:<24} {published:>8} published {due:>8} still due")
        return EXIT_OK

    return configured(args, work)


SEED = Command(
    "seed",
    "start a crawl: route its seed URLs into the frontier, print its id",
    (
        arg("urls", nargs="+", metavar="URL"),
        arg("--priority", type=int, choices=range(10), metavar="0-9", help="message priority"),
        *CRAWL_OPTIONS,
    ),
    seed,
)
CRAWL = Command(
    "crawl",
    "seed, consume every configured domain until done, print a summary",
    (
        arg("urls", nargs="*", metavar="URL"),
        PREFETCH,
        arg("--fresh", action="store_true", help="forget what earlier crawls saw and queued first"),
        arg(
            "--recrawl",
            choices=["due", "all"],
            help="also refresh stored pages: those due, or every one of every configured domain",
        ),
        *CRAWL_OPTIONS,
        *MONITORING,
    ),
    crawl,
    consumes=True,
)
RECRAWL = Command(
    "recrawl",
    "publish the stored pages that are due (or all of them), then exit",
    (
        each_domain(
            "recrawl_domains",
            "only this domain (again for more; default: every domain that recrawls, every one with --all)",
        ),
        arg("--all", action="store_true", help="every stored page, due or not, recrawled or not"),
    ),
    recrawl,
)
