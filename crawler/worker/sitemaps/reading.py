"""A sitemap task, top to bottom: find an origin's sitemaps, or read one file and route what it lists.

Every request is a fetch like a page's: robots.txt, a rate token from the domain's bucket, the
private-network guard and the fetch layer (fetching.py). In a recrawl's round, a file whose signature
is the one stored, or answered 304, is not parsed; a crawl's own round asks for every file whole (a
new crawl needs every URL it lists). Else it is parsed off the event loop, 1,000 entries at a time, and
its URLs routed (listing.py) or, an index's, its sitemaps queued one level deeper. Its reading is
stored before the pipeline acks the task (or retries it, or sets it aside).
"""

from __future__ import annotations

import asyncio
import logging
import tempfile
from collections import Counter
from datetime import UTC, datetime

from crawler.config import Rules
from crawler.errors import BackendHalt, BadURL, FetchError, SitemapError
from crawler.fetch.robots import origin_of
from crawler.fetch.wire import paced
from crawler.frontier.crawls import CrawlOptions
from crawler.frontier.message import CrawlMessage, SitemapTask
from crawler.frontier.retry import Failure, from_error
from crawler.frontier.sitemaps import SitemapTasks
from crawler.monitor.metrics import Metrics
from crawler.parse.sitemaps import (
    MAX_BYTES,
    SitemapReport,
)
from crawler.sink.sitemaps import URL_OUTCOMES, SitemapRead, SitemapStore, Validators
from crawler.worker.live import LiveConfig
from crawler.worker.page import DISALLOWED, Visitor
from crawler.worker.sitemaps.done import SitemapDone
from crawler.worker.sitemaps.fetching import (
    NO_VALIDATORS,
    SPOOL,
    Fetched,
    fetch_file,
    rules_for_sitemaps,
)
from crawler.worker.sitemaps.listing import Listing
from crawler.worker.sitemaps.parsing import FileParsing

log = logging.getLogger(__name__)

MISSING = frozenset({404, 410})  # a sitemap that is not there: its reading is "missing", not "failed"


class SitemapReading:
    """Does the sitemap tasks of a consumer's queues."""

    def __init__(
        self,
        live: LiveConfig,
        visitor: Visitor,
        listing: Listing,
        tasks: SitemapTasks,
        store: SitemapStore,
        metrics: Metrics,
    ) -> None:
        self._live = live
        self._visitor = visitor
        self._tasks = tasks
        self._parsing = FileParsing(listing, tasks)
        self._store = store
        self._metrics = metrics

    async def handle(
        self, domain: str, url: str, message: CrawlMessage, options: CrawlOptions
    ) -> SitemapDone:
        """Do the task `message` carries for `url` (canonical, in `domain`)."""
        task = message.sitemap
        assert task is not None
        rules = self._live.rules(domain)
        done = SitemapDone()
        try:
            if rules.sitemaps is False:
                log.info("%s: not read, sitemaps are off for %s", url, domain)
            elif task.find:
                await self._find(domain, url, message, task, rules, done)
            else:
                await self._read(domain, url, message, task, rules, options, done)
        except BackendHalt:
            raise  # the fetch service refuses the domain: the consumer lets its queue go
        except FetchError as exc:
            done.failure = from_error(exc)
            if not exc.transient and not task.find:
                await self._keep(domain, url, task, "failed", note=str(exc), status=exc.status_code)
        return done

    # -- finding an origin's sitemaps ------------------------------------------------------------

    async def _find(
        self, domain: str, url: str, message: CrawlMessage, task: SitemapTask, rules: Rules, done: SitemapDone
    ) -> None:
        origin = origin_of(url)
        listed = await self._visitor.robots.sitemaps(origin, rules, self._visitor.hop)
        wanted = list(listed)
        if rules.sitemaps == "auto":
            if not listed:
                wanted.append(f"{origin}/sitemap.xml")
        elif rules.sitemaps is not False:
            wanted += rules.sitemaps  # a file listed twice is read once in a round
        child = SitemapTask(task.round, 0, counted=task.counted)
        tasked = await self._tasks.files(wanted, child, message.crawl, url)
        done.tasked(task, tasked)
        for why, n in tasked.dropped.items():
            if why != "seen":
                self._metrics.observe_sitemap_url(domain, "dropped", why, n)
        await asyncio.to_thread(
            self._store.note_origin, origin, domain, message.crawl, _now(), rules.sitemaps_every
        )
        log.info(
            "%s: %d sitemap(s) to read (%s)",
            origin,
            sum(tasked.published.values()),
            "robots.txt" if listed else "none in robots.txt",
        )

    # -- reading one file ------------------------------------------------------------------------

    async def _read(
        self,
        domain: str,
        url: str,
        message: CrawlMessage,
        task: SitemapTask,
        rules: Rules,
        options: CrawlOptions,
        done: SitemapDone,
    ) -> None:
        allowed, crawl_delay = await self._allowed(domain, url, task, rules, done)
        if not allowed:
            return
        token, on_wire = await self._visitor.cleared(url, domain, crawl_delay)
        self._metrics.observe_rate_wait(domain, token.waited)
        stored = await asyncio.to_thread(self._store.validators, url) if not task.whole else None
        with tempfile.SpooledTemporaryFile(max_size=SPOOL) as spool:
            with paced(on_wire):
                fetched = await fetch_file(
                    self._visitor.fetcher,
                    self._metrics,
                    domain,
                    url,
                    rules_for_sitemaps(rules),
                    stored,
                    spool,
                    self._visitor.archiving,
                )
            if not await self._to_parse(domain, url, message, task, fetched, stored, done):
                return
            spool.seek(0)
            try:
                report, counts, routed = await self._parsing.parse(
                    url, spool, message, task, rules, options, done
                )
            except SitemapError as exc:
                await self._keep(
                    domain, url, task, "failed", status=fetched.status, validators=fetched.validators,
                    note=str(exc),
                )  # fmt: skip
                return
        if message.crawl is not None:
            done.counts.update({(d, "routed"): n for d, n in routed.items()})
        await self._keep_read(domain, url, task, fetched, report, counts)

    async def _allowed(
        self, domain: str, url: str, task: SitemapTask, rules: Rules, done: SitemapDone
    ) -> tuple[bool, float | None]:
        """Whether robots.txt lets the file be read (if the domain obeys it), and its crawl delay; a
        file it refuses is kept as such, or left to retry while robots.txt is unavailable."""
        if not rules.obey_robots:
            return True, None
        verdict = await self._visitor.robots.check(url, rules, self._visitor.hop)
        if verdict.refused is not None:
            done.failure = from_error(verdict.refused)
            await self._keep(domain, url, task, "failed", note=f"robots.txt: {done.failure.error}")
            return False, None
        if verdict.unavailable is not None:
            done.failure = Failure("transient", verdict.unavailable)
            return False, None
        if not verdict.allowed:
            await self._keep(domain, url, task, "disallowed", note=DISALLOWED)
            return False, None
        return True, verdict.crawl_delay

    async def _to_parse(
        self,
        domain: str,
        url: str,
        message: CrawlMessage,
        task: SitemapTask,
        fetched: Fetched,
        stored: Validators | None,
        done: SitemapDone,
    ) -> bool:
        """Whether the fetched file is to be parsed; if not, what it came to is kept (not modified,
        redirected, missing, failed or unchanged)."""
        status = fetched.status
        if status == 304 and stored is not None:
            await self._keep(domain, url, task, "not_modified", status=status, validators=stored)
            return False
        if fetched.location is not None:
            await self._redirected(domain, url, fetched.location, message, task, status, done)
            return False
        if status in MISSING:  # a guessed /sitemap.xml mostly: nothing failed, and nothing to retry
            log.debug("%s: no sitemap there (HTTP %d)", url, status)
            await self._keep(domain, url, task, "missing", status=status)
            return False
        if fetched.failure is not None:
            if not fetched.failure.transient:
                await self._keep(domain, url, task, "failed", status=status, note=fetched.failure.error)
            done.failure = fetched.failure
            return False
        if stored is not None and stored.signature == fetched.validators.signature:
            await self._keep(domain, url, task, "unchanged", status=status, validators=fetched.validators)
            return False
        return True

    async def _keep_read(
        self,
        domain: str,
        url: str,
        task: SitemapTask,
        fetched: Fetched,
        report: SitemapReport,
        counts: Counter[str],
    ) -> None:
        """Keep a parsed file's reading: what its entries became, and why it was cut short if it was."""
        for why, n in report.skipped.items():
            counts[f"unreadable: {why}"] += n
        note = report.truncated or (f"cut after {MAX_BYTES} bytes" if fetched.cut else None)
        await self._keep(
            domain, url, task, "read", status=fetched.status, validators=fetched.validators, counts=counts,
            note=note, kind=str(report.kind) if report.kind else None,
        )  # fmt: skip
        log.info("%s; %s", report.summary(), ", ".join(f"{n} {k}" for k, n in sorted(counts.items())))

    async def _redirected(
        self,
        domain: str,
        url: str,
        location: str,
        message: CrawlMessage,
        task: SitemapTask,
        status: int,
        done: SitemapDone,
    ) -> None:
        """A sitemap that moved is read where it moved to, in the same round."""
        try:
            target = self._live.scope.canonical(location, url)
        except BadURL as exc:
            await self._keep(domain, url, task, "failed", status=status, note=f"redirect refused: {exc}")
            return
        tasked = await self._tasks.files([target], task, message.crawl, url)
        done.tasked(task, tasked)
        await self._keep(domain, url, task, "redirected", status=status, note=f"to {target}")

    # -- keeping --------------------------------------------------------------------------------

    async def _keep(
        self,
        domain: str,
        url: str,
        task: SitemapTask,
        outcome: str,
        *,
        status: int | None = None,
        validators: Validators = NO_VALIDATORS,
        counts: Counter[str] | None = None,
        note: str | None = None,
        kind: str | None = None,
    ) -> None:
        """Store a file's reading (before its task's ack) and count it."""
        read = SitemapRead(
            url, domain, task.depth, outcome, _now(), status, kind, validators, +(counts or Counter()), note
        )
        await asyncio.to_thread(self._store.record, read)
        self._metrics.observe_sitemap_file(domain, outcome)
        for key, n in (counts or {}).items():
            how = key if key in URL_OUTCOMES else "dropped"
            self._metrics.observe_sitemap_url(domain, how, key if how == "dropped" else "", n)


def _now() -> datetime:
    return datetime.now(UTC)
