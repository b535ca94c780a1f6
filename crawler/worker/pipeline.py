"""One delivery, top to bottom: read it, visit its page, then retry it, or store, announce, route and ack.

A message is acked only once its row is committed, its new version (if any) confirmed on the change
feed (announce.py) and its links (or its redirect) confirmed, so a worker killed at any instant loses
nothing: the broker delivers the message again. Its checks before
the fetch take one Redis round trip (gate.py, admission.py); its dedup confirms, counts and ack are
written with those of the deliveries ending at the same time (settling.py). A refresh (a stored page
due again) is asked conditionally; what it found decides its row and schedule (refresh.py).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from aio_pika.abc import AbstractIncomingMessage

from crawler.errors import BackendHalt, BadURL, Cancelled, InvalidMessage, SinkError
from crawler.frontier.concurrency import short_retries
from crawler.frontier.crawls import CrawlOptions, CrawlState
from crawler.frontier.delivery import lost
from crawler.frontier.message import CrawlMessage
from crawler.frontier.parking import Parking, attempts_of, parked_before
from crawler.frontier.quota import PageQuota
from crawler.frontier.recovery import Recovery
from crawler.frontier.retry import Delay, Failure, next_delay
from crawler.frontier.router import Router
from crawler.frontier.settling import Done, Settling
from crawler.frontier.tracing import step
from crawler.frontier.urls import host_of
from crawler.monitor import logs
from crawler.monitor.metrics import Metrics, OutcomeKind
from crawler.sink.groupcommit import GroupCommit
from crawler.sink.sql import PageRecord
from crawler.worker.admission import Admission
from crawler.worker.announce import Announcer
from crawler.worker.cost import Cost
from crawler.worker.ending import Endings
from crawler.worker.gate import Gate
from crawler.worker.linking import NO_OPTIONS, Linking
from crawler.worker.live import LiveConfig
from crawler.worker.page import DISALLOWED, Outcome, Visitor
from crawler.worker.refresh import settle
from crawler.worker.sitemaps import SitemapReading

log = logging.getLogger(__name__)
pages_log = logging.getLogger("crawler.pages")  # one line per page outcome: verbose
ROBOTS = "robots"  # the skip reason (crawler_pages_skipped_total{reason}) of a page robots.txt keeps out


class Pipeline:
    """Handles each delivery of a consumer's queues; never raises for what a site or a message does."""

    def __init__(
        self,
        live: LiveConfig,
        visitor: Visitor,
        quota: PageQuota,
        cost: Cost,
        router: Router,
        writes: GroupCommit,
        parking: Parking,
        metrics: Metrics,
        *,
        short_retry_wait: float,
        settling: Settling,
        crawls: CrawlState | None = None,
        recovery: Recovery | None = None,
        admission: Admission | None = None,
        announcer: Announcer | None = None,
        sitemaps: SitemapReading | None = None,
    ) -> None:
        self._live = live
        self._announcer = announcer  # None: no change feed (tests)
        self._sitemaps = sitemaps  # None: sitemap tasks are acked unread (tests)
        self._visitor = visitor
        self._cost = cost
        self._router = router
        self._writes = writes
        self._parking = parking
        self._metrics = metrics
        self._wait = short_retry_wait
        self._crawls = crawls  # None: crawl ids are carried but not checked nor counted (tests)
        self._gate = Gate(quota, cost, router.seen, crawls, recovery, admission)
        self._ends = Endings(live, parking, settling, metrics, crawls)
        self._linking = Linking(router, metrics, short_retry_wait)

    async def handle(self, domain: str, message: AbstractIncomingMessage) -> None:
        """Bring one delivery to its outcome and ack it (or leave it to the broker to deliver again)."""
        received = time.monotonic()  # the broker's delivery timeout runs from about now
        try:
            await self._process(domain, message, received)
        except BackendHalt:
            raise  # the fetch service refuses the domain: the consumer lets its queue go
        except Exception as exc:
            if lost(message):
                # Not a failure of the page's: parking a retry copy now would have it crawled twice.
                return self.abandon(domain, message, f" while it was stored or acked ({exc!r})")
            # Infrastructure trouble (broker, database) after the fetch: wait a tier and try again.
            log.warning("%s: %r; will retry", domain, exc)
            self._metrics.observe_error(domain, "internal")
            await self._ends.park_or_return(message, domain, Failure("transient", f"{exc}"))

    def abandon(self, domain: str, message: AbstractIncomingMessage, how: str) -> None:
        """Leave a delivery whose channel closed to the broker, which delivers it again."""
        self._ends.abandon(domain, message, how)

    async def _process(self, domain: str, message: AbstractIncomingMessage, received: float) -> None:
        if lost(message):  # prefetched before the connection dropped: not worth a fetch
            return self.abandon(domain, message, " before its work began")
        attempts = attempts_of(message) + 1
        try:
            crawl, url = self._read(domain, message)
        except (InvalidMessage, BadURL) as exc:
            log.warning("%s: invalid message set aside: %s", domain, exc)
            await self._parking.dead(message, domain, attempts, Failure("invalid", str(exc)))
            return await self._ends.done(message, domain, "invalid")
        options = await self._options(crawl.crawl)
        if crawl.sitemap is not None:
            return await self._sitemap(domain, message, crawl, url, attempts, options)
        rules = self._live.rules(domain)
        # A page counts against max_pages once, on its first try (not again when returned unfetched, nor
        # back from a retry tier); a refresh, never: it was counted when it was new. Only a first try
        # may be a copy queued twice after a Redis loss: a page's own copy back from a tier is not.
        first = (
            attempts == 1 and not message.redelivered and crawl.refresh is None and not parked_before(message)
        )
        verdict = await self._gate.verdict(url, domain, crawl.crawl, options, rules, first)
        if verdict.cancelled:
            return await self._ends.done(message, domain, "cancelled")
        if verdict.skip is not None:
            reason, why = verdict.skip
            pages_log.info("%s %s: skipped, %s", domain, url, why)
            counts = self._ends.changes(message, crawl, domain, "skipped")
            return await self._ends.done(
                message, domain, "skipped", reason=reason, crawl=crawl.crawl, counts=counts
            )
        checked = verdict.checked
        record = PageRecord(
            url=url,
            domain=domain,
            depth=crawl.depth,
            attempts=attempts,
            crawl=crawl.crawl,
            history=rules.history is not None,
        )
        # Granted at once, the token came in the same atomic step as the cancel check.
        cleared = checked is not None and checked.cleared_now
        try:
            outcome = await self._visitor.visit(
                record,
                rules,
                self._live.fields(domain),
                crawl.via,
                None if cleared else lambda: self._gate.cancelled(crawl.crawl),
                self._live.config.start_by(received, rules),
                checked.admitted if checked is not None else None,
                crawl.refresh,
                self._live.expectations(domain),
            )
        except Cancelled:
            return await self._ends.done(message, domain, "cancelled")
        if outcome.late:
            # Waiting for a rate token used the delivery's time: fetching now could outlive RabbitMQ's
            # consumer_timeout, which would close the channel and have the work done twice.
            log.info("%s %s: returned unfetched, too late to finish within delivery_timeout", domain, url)
            self._metrics.observe_error(domain, "late")
            step("returned (late)", message)
            await message.nack(requeue=True)
            return
        outcome = await self._cost.charge(domain, outcome, message)
        self._metrics.observe_visit(domain, outcome)
        if lost(message):
            # Cut off from the broker while visiting: the broker has the message back and another
            # consumer may have stored the page already. Storing, routing or parking it here would
            # do its work twice, and the ack could not be sent.
            return self.abandon(domain, message, " while it was fetched")
        if outcome.disallowed and crawl.refresh is None:
            # Skipped by policy, like a page past max_pages: no row, counted once as skipped. A
            # stored page robots.txt now keeps out is stored, for its schedule to say so.
            pages_log.info("%s %s: skipped, %s", domain, url, DISALLOWED)
            counts = self._ends.changes(message, crawl, domain, "skipped")
            return await self._ends.done(
                message, domain, "skipped", reason=ROBOTS, crawl=crawl.crawl, counts=counts
            )
        failure = outcome.failure
        delay = self._delay(domain, attempts, failure)
        if failure is not None and delay is not None:
            self._log("retry", outcome, crawl, attempts, delay=round(delay.seconds, 1))
            return await self._ends.retried(message, domain, crawl, attempts, delay, failure)
        settled = settle(outcome, crawl.refresh, rules.recrawl_for(url))
        made = await short_retries(SinkError, lambda: self._writes.store(settled.record), self._wait)
        committed = Done("commit", time.monotonic())
        if made is not None:
            self._metrics.observe_version(domain, made.kind)
        announcing = self._announcer and self._announcer.start(message, settled.record, crawl.refresh, made)
        try:
            routed = await self._linking.route(domain, url, crawl, options, outcome, settled.route)
        except BaseException:
            if announcing:
                announcing.cancel()
            raise
        if announcing and not await announcing:
            return  # back to the broker, to be announced again
        if failure is not None and failure.transient:
            await self._parking.dead(message, domain, attempts, failure)
        if crawl.refresh is not None:
            self._metrics.observe_refresh(domain, settled.how)
        kind: OutcomeKind = "ok" if failure is None else "dead" if failure.transient else "failed"
        if outcome.disallowed:
            kind = "skipped"
        self._log(kind, outcome, crawl, attempts, links=len(outcome.links) if settled.route else 0)
        counts = self._ends.changes(message, crawl, domain, kind)
        if counts is not None:
            if outcome.verdict is not None and crawl.refresh is None:
                # With its outcome, in the one atomic step: a crawl's coverage is read from its counts.
                counts.update(outcome.verdict.counts(domain))
            for r in routed:
                for d, n in r.by_domain.items():
                    counts[d, "routed"] = counts.get((d, "routed"), 0) + n
        confirms = [fp for r in routed for fp in r.unconfirmed]
        await self._ends.done(
            message,
            domain,
            kind,
            outcome.record.status_code,
            reason=ROBOTS,  # a skipped one's: the only skip a visit decides
            crawl=crawl.crawl,
            counts=counts,
            confirms=confirms,
            done_at=committed,
        )

    async def _sitemap(
        self,
        domain: str,
        message: AbstractIncomingMessage,
        crawl: CrawlMessage,
        url: str,
        attempts: int,
        options: CrawlOptions,
    ) -> None:
        """A sitemap task: done (its reading stored, its URLs confirmed), retried, or set aside."""
        if self._sitemaps is None or await self._gate.cancelled(crawl.crawl):
            return await self._ends.done(message, domain, "cancelled")
        done = await self._sitemaps.handle(domain, url, crawl, options)
        finished = Done("commit", time.monotonic())
        if lost(message):
            return self.abandon(domain, message, " while its sitemap was read")
        failure = done.failure
        delay = self._delay(domain, attempts, failure)
        if failure is not None and delay is not None:
            log.info("%s %s: sitemap task to retry in %.0fs: %s", domain, url, delay.seconds, failure.error)
            return await self._ends.retried(message, domain, crawl, attempts, delay, failure)
        if failure is not None:
            log.info("%s %s: sitemap task failed: %s", domain, url, failure.error)
            if failure.transient:
                await self._parking.dead(message, domain, attempts, failure)
        counts = self._ends.changes(message, crawl, domain, "sitemap")
        if counts is not None:
            counts = {**counts}
            for key, n in done.counts.items():
                counts[key] = counts.get(key, 0) + n
        await self._ends.done(message, domain, "sitemap", crawl=crawl.crawl, counts=counts, done_at=finished)

    def _read(self, domain: str, message: AbstractIncomingMessage) -> tuple[CrawlMessage, str]:
        """The message and its canonical URL; InvalidMessage or BadURL if it cannot be crawled here."""
        crawl = CrawlMessage.decode(message.body)
        url = self._live.scope.canonical(crawl.url)
        if self._live.config.domain_of(host_of(url)) != domain:
            raise InvalidMessage(f"{url} does not belong to domain {domain}")
        return crawl, url

    def _delay(self, domain: str, attempts: int, failure: Failure | None) -> Delay | None:
        """When a transient failure is tried again; None when it is not transient or out of tries."""
        if failure is None or not failure.transient:
            return None
        config = self._live.config
        return next_delay(
            self._live.rules(domain).retry_delays,
            attempts,
            config.retry_tiers,
            failure.retry_after,
            config.max_retry_after,
        )

    async def _options(self, crawl: str | None) -> CrawlOptions:
        if crawl is None or self._crawls is None:
            return NO_OPTIONS
        return await self._crawls.options(crawl) or NO_OPTIONS

    def _log(self, kind: str, outcome: Outcome, crawl: CrawlMessage, attempts: int, **fields: Any) -> None:
        record, failure = outcome.record, outcome.failure
        logs.outcome(
            pages_log,
            kind,
            url=record.url,
            domain=record.domain,
            status=failure.status_code if kind == "retry" and failure else record.status_code,
            seconds=outcome.fetched.seconds if outcome.fetched else 0.0,
            attempt=attempts,
            depth=crawl.depth,
            error=failure.error if failure else None,
            **fields,
        )
