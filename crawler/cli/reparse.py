"""`crawler reparse`: the current extraction run again over archived answers; fetches nothing."""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AsyncExitStack, contextmanager
from dataclasses import dataclass, field

from crawler.archive.source import ArchiveSource
from crawler.changes.feed import feed_on
from crawler.cli.arguments import SINCE, Command, arg, each_domain, workers
from crawler.cli.running import EXIT_OK, configured
from crawler.config import CrawlConfig
from crawler.dedup.near import NearIndexes
from crawler.errors import ConfigError
from crawler.frontier.client import frontier
from crawler.monitor.quality import thresholds
from crawler.quality.coverage import Coverage, coverage_of
from crawler.quality.report import render as render_quality
from crawler.quality.report import reparse_report
from crawler.reparse.linking import links_into
from crawler.reparse.run import Progress, Reparser
from crawler.settings import Settings
from crawler.sink.crawls import CrawlStore
from crawler.sink.database import Database
from crawler.sink.export import parse_since
from crawler.sink.reparsed import ReparseStore, Selection
from crawler.sink.sql import migrate
from crawler.storage import is_object_url
from crawler.worker import EXIT_ABORTED, wiring


@dataclass
class _Stop:
    """Ctrl-C or SIGTERM: the batch under way is finished (`event` set); a second one exits now."""

    event: asyncio.Event = field(default_factory=asyncio.Event)
    received: list[signal.Signals] = field(default_factory=list)

    def on_signal(self, sig: signal.Signals) -> None:
        self.received.append(sig)
        if len(self.received) > 1:
            print(f"second {sig.name}: exiting now; the same command resumes", file=sys.stderr)
            os._exit(EXIT_ABORTED)  # the batch under way is lost, the ones committed are not
        print(f"{sig.name}: finishing the batch under way; again to exit now", file=sys.stderr)
        self.event.set()


@contextmanager
def _taking_signals(stop: _Stop) -> Iterator[None]:
    # Only a main thread can take signals (a caller may run this command in another).
    loop = asyncio.get_running_loop()
    stoppable = threading.current_thread() is threading.main_thread()
    taken = (signal.SIGINT, signal.SIGTERM) if stoppable else ()
    for sig in taken:
        loop.add_signal_handler(sig, stop.on_signal, sig)
    try:
        yield
    finally:
        for sig in taken:
            loop.remove_signal_handler(sig)


def reparse(args: argparse.Namespace) -> int:
    """`crawler reparse`: until every selected page is read again, or Ctrl-C / SIGTERM (then it
    finishes its batch and exits 130 / 143, and the same command resumes; a second one exits now)."""
    return configured(args, lambda settings, config: _reparse(settings, config, args))


async def _reparse(settings: Settings, config: CrawlConfig, args: argparse.Namespace) -> int:
    domains = tuple(wiring.check_domains(config, args.reparse_domains)) if args.reparse_domains else ()
    selection = Selection(domains, parse_since(args.since) if args.since else None, args.crawl)
    source = ArchiveSource.of(settings)  # an archive in object storage: read there, or in the spool
    local = not is_object_url(settings.archive_dir)
    if local and not await asyncio.to_thread(os.path.isdir, settings.archive_dir):
        raise ConfigError(
            f"no archive directory {settings.archive_dir!r}: set CRAWLER_ARCHIVE_DIR to the workers' one"
        )
    with Database(settings.database_url) as db:
        return await _reparse_in(db, settings, config, args, Reparsing(ReparseStore(db), source, selection))


async def _reparse_in(
    db: Database, settings: Settings, config: CrawlConfig, args: argparse.Namespace, what: Reparsing
) -> int:
    """`_reparse` over the process's one database."""
    await asyncio.to_thread(migrate, db)
    stop = _Stop()
    with _taking_signals(stop):
        before = await _kept_coverage(db, args.crawl)
        done = await _reparsed(db, settings, config, args, what, stop.event)
    resumed = " (resumed)" if done.resumed else ""
    print(
        f"{done.done:,} pages read again{resumed}: {done.changed:,} changed, {done.skipped:,} not pages "
        f"(redirects, errors, not HTML), {done.failed:,} unreadable, {done.links:,} links routed"
    )
    after = await _kept_coverage(db, args.crawl)
    if args.crawl and before is not None and after:
        domains = what.selection.domains
        chosen = {d: c for d, c in after.items() if not domains or d in domains}
        limits = {d: thresholds(config, d) for d in chosen}
        print(render_quality(reparse_report(args.crawl, before, chosen, limits)))
    if stop.received and done.done < done.total:
        print("stopped: the same command resumes where this one stopped", file=sys.stderr)
        return 128 + stop.received[0]  # 130 for Ctrl-C, 143 for SIGTERM, as a shell reports them
    return EXIT_OK


@dataclass(frozen=True)
class Reparsing:
    """What a run reads again: the pages `selection` chooses, their answers from `source`."""

    store: ReparseStore
    source: ArchiveSource
    selection: Selection


async def _reparsed(
    db: Database,
    settings: Settings,
    config: CrawlConfig,
    args: argparse.Namespace,
    what: Reparsing,
    stop: asyncio.Event,
) -> Progress:
    async with AsyncExitStack() as stack:
        links = None
        f = await stack.enter_async_context(frontier(settings, "crawler reparse", config, db))
        # The versions it makes reach the change feed as a worker's do.
        feed = await stack.enter_async_context(feed_on(f.connection, config, settings.names))
        if not args.no_links:
            links = await stack.enter_async_context(links_into(f, config))
        # Near-duplicates are claimed in the fleet's index, in Redis, as a worker claims them.
        near = NearIndexes(f.redis, settings.names) if config.content else None
        workers = args.workers or os.cpu_count() or 1
        reparser = Reparser(
            config,
            what.store,
            what.source,
            what.selection,
            workers=workers,
            links=links,
            near=near,
            feed=feed,
        )
        return await reparser.run(stop, _reporter())


def _reporter() -> Callable[[Progress], None]:
    """Where the run stands, on stderr every 2 s and once done."""
    last = [0.0]

    def report(p: Progress) -> None:
        if time.monotonic() - last[0] >= 2 or p.done == p.total:
            last[0] = time.monotonic()
            share = f" ({100 * p.done / p.total:.0f}%)" if p.total else ""
            print(
                f"reparse: {p.done:,} of {p.total:,} pages{share}, {p.changed:,} changed, "
                f"{p.failed:,} unreadable, {p.links:,} links routed; {p.rate:,.0f} pages/s",
                file=sys.stderr,
            )

    return report


async def _kept_coverage(db: Database, crawl: str | None) -> dict[str, Coverage] | None:
    """An ended crawl's coverage per domain as its row keeps it (what a re-parse corrects); None if
    there is no such crawl, or it has not ended (its counts are its workers')."""
    if crawl is None:
        return None
    record = await asyncio.to_thread(CrawlStore(db).get, crawl)
    return None if record is None or record.counts is None else coverage_of(record.counts)


REPARSE = Command(
    "reparse",
    "run the current extraction again over archived answers; fetches nothing",
    (
        each_domain(
            "reparse_domains", "only this domain's pages (again for more; default: every archived page)"
        ),
        SINCE,
        arg("--crawl", metavar="ID", help="only the pages this crawl stored"),
        arg("--no-links", action="store_true", help="route none of the links the pages now give"),
        arg("--workers", type=workers, help="processes reading pages (default: one per core)"),
    ),
    reparse,
)
