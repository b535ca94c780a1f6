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

from crawler.config import Rules
from crawler.errors import BackendHalt, BadURL, Cancelled, InvalidMessage
from crawler.fetch.ratelimit import budget
from crawler.frontier.client import NO_OPTIONS
from crawler.frontier.crawls import CrawlOptions, CrawlState
from crawler.frontier.delivery import Delivery, lost
from crawler.frontier.lines import HostLines
from crawler.frontier.message import CrawlMessage
from crawler.frontier.parking import Parking, attempts_of, parked_before, turn_of
from crawler.frontier.quota import PageQuota
from crawler.frontier.recovery import Recovery
from crawler.frontier.retry import Delay, Failure, next_delay
from crawler.frontier.router import Router
from crawler.frontier.settling import Done, Settling
from crawler.frontier.tracing import step
from crawler.frontier.urls import host_of
from crawler.monitor.metrics import Metrics
from crawler.sink.groupcommit import GroupCommit
from crawler.visited import PageTask
from crawler.worker.admission import Admission, Checked
from crawler.worker.announce import Announcer
from crawler.worker.cost import Cost
from crawler.worker.delivery_end import Endings
from crawler.worker.gate import Gate
from crawler.worker.handling import ROBOTS, Handling, pages_log
from crawler.worker.keeping import Keeping
from crawler.worker.linking import Linking
from crawler.worker.live import LiveConfig
from crawler.worker.page import DISALLOWED, Visit, Visitor
from crawler.worker.sitemaps import SitemapReading
from crawler.worker.turns import HostTurns

log = logging.getLogger(__name__)


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
        host_prefetch: int = 1,
    ) -> None:
        self._live = live
        self._sitemaps = sitemaps  # None: sitemap tasks are acked unread (tests)
        self._visitor = visitor
        self._cost = cost
        self._router = router
        self._parking = parking
        self._metrics = metrics
        self._wait = short_retry_wait
        self._crawls = crawls  # None: crawl ids are carried but not checked nor counted (tests)
        self._gate = Gate(quota, cost, router.seen, crawls, recovery, admission)
        self._ends = Endings(live, parking, settling, metrics, crawls)
        self._turns = HostTurns(
            HostLines(quota.redis, quota.names), live.config.discover.shards, host_prefetch
        )
        linking = Linking(router, metrics, short_retry_wait)
        self._keeping = Keeping(writes, announcer, linking, parking, self._ends, metrics, short_retry_wait)

    async def handle(self, domain: str, message: Delivery) -> None:
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

    def abandon(self, domain: str, message: Delivery, how: str) -> None:
        """Leave a delivery whose channel closed to the broker, which delivers it again."""
        self._ends.abandon(domain, message, how)

    async def _process(self, domain: str, message: Delivery, received: float) -> None:
        if lost(message):  # prefetched before the connection dropped: not worth a fetch
            return self.abandon(domain, message, " before its work began")
        delivery = await self._delivery(domain, message)
        if delivery is None:
            return  # set aside unread
        crawl = delivery.crawl
        if crawl.sitemap is not None:
            return await self._sitemap(delivery)
        rules = self._live.rules(domain)
        verdict = await self._gate.verdict(
            delivery.url, domain, crawl.crawl, delivery.options, rules, delivery.first
        )
        if verdict.cancelled:
            return await self._ends.done(message, domain, "cancelled")
        if verdict.skip is not None:
            return await self._skipped(delivery, *verdict.skip)
        admitted = verdict.checked.admitted if verdict.checked is not None else None
        if admitted is None or admitted.taken[0] or not self._live.config.in_layout(domain):
            visit = await self._visit(delivery, rules, verdict.checked, received)
        else:
            # No token for its host yet: a few of its pages wait here (turns.py bounds them by its
            # rate and the shard's prefetch), the others in line in a wait queue, so that no page
            # of the other hosts of its shard waits behind them.
            told = turn_of(message)
            # Its robots.txt's Crawl-delay slows it, and so does a back-off after a 429 or 503.
            rate = budget(rules, admitted.crawl_delay).rate * admitted.factor
            with self._turns.turn(domain, admitted.taken[1], rate, told) as here:
                if not here:
                    wait, turn = await self._turns.parked(domain, admitted.taken[1], rate, told)
                    return await self._ends.waited(message, domain, crawl, wait, turn)
                visit = await self._visit(delivery, rules, verdict.checked, received)
        if visit is None:
            return  # cancelled, returned unfetched, or left to the broker
        if visit.disallowed and crawl.refresh is None:
            # Skipped by policy, like a page past max_pages: no row, counted once as skipped. A
            # stored page robots.txt now keeps out is stored, for its schedule to say so.
            return await self._skipped(delivery, ROBOTS, DISALLOWED)
        failure = visit.failure
        delay = self._delay(domain, delivery.attempts, failure)
        if failure is not None and delay is not None:
            delivery.logged("retry", visit, delay=round(delay.seconds, 1))
            return await self._ends.retried(message, domain, crawl, delivery.attempts, delay, failure)
        await self._keeping.keep(delivery, rules, visit)

    async def _delivery(self, domain: str, message: Delivery) -> Handling | None:
        """The delivery's page and its crawl's options; None if the message was set aside as invalid."""
        attempts = attempts_of(message) + 1
        try:
            crawl, url = self._read(domain, message)
        except (InvalidMessage, BadURL) as exc:
            log.warning("%s: invalid message set aside: %s", domain, exc)
            await self._parking.dead(message, domain, attempts, Failure("invalid", str(exc)))
            await self._ends.done(message, domain, "invalid")
            return None
        # A page counts against max_pages once, on its first try (not again when returned unfetched, nor
        # back from a retry tier); a refresh, never: it was counted when it was new. Only a first try
        # may be a copy queued twice after a Redis loss: a page's own copy back from a tier is not.
        first = (
            attempts == 1 and not message.redelivered and crawl.refresh is None and not parked_before(message)
        )
        options = await self._options(crawl.crawl)
        return Handling(domain, message, crawl, url, attempts, options, first)

    async def _skipped(self, delivery: Handling, reason: str, why: str) -> None:
        """A page not fetched, by policy: counted once as skipped, for `reason`."""
        domain, message, crawl = delivery.domain, delivery.message, delivery.crawl
        pages_log.info("%s %s: skipped, %s", domain, delivery.url, why)
        counts = self._ends.changes(message, crawl, domain, "skipped")
        await self._ends.done(message, domain, "skipped", reason=reason, crawl=crawl.crawl, counts=counts)

    async def _visit(
        self, delivery: Handling, rules: Rules, checked: Checked | None, received: float
    ) -> Visit | None:
        """The page visited and its credits charged; None if its delivery ended without: its crawl
        was cancelled, it came too late to fetch, or its channel closed meanwhile."""
        domain, message, crawl = delivery.domain, delivery.message, delivery.crawl
        task = PageTask(
            delivery.url, domain, crawl.depth, delivery.attempts, crawl.crawl, rules.history is not None
        )
        # Granted at once, the token came in the same atomic step as the cancel check.
        cleared = checked is not None and checked.cleared_now
        try:
            visit = await self._visitor.visit(
                task,
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
            await self._ends.done(message, domain, "cancelled")
            return None
        if visit.late:
            # Waiting for a rate token used the delivery's time: fetching now could outlive RabbitMQ's
            # consumer_timeout, which would close the channel and have the work done twice.
            log.info(
                "%s %s: returned unfetched, too late to finish within delivery_timeout", domain, task.url
            )
            self._metrics.observe_error(domain, "late")
            step("returned (late)", message)
            await message.nack(requeue=True)
            return None
        visit = await self._cost.charge(domain, visit, message)
        self._metrics.observe_visit(domain, visit, visit.visited.answered.status_code)
        if lost(message):
            # Cut off from the broker while visiting: the broker has the message back and another
            # consumer may have stored the page already. Storing, routing or parking it here would
            # do its work twice, and the ack could not be sent.
            self.abandon(domain, message, " while it was fetched")
            return None
        return visit

    async def _sitemap(self, delivery: Handling) -> None:
        """A sitemap task: done (its reading stored, its URLs confirmed), retried, or set aside."""
        domain, message, crawl, url = delivery.domain, delivery.message, delivery.crawl, delivery.url
        attempts, options = delivery.attempts, delivery.options
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

    def _read(self, domain: str, message: Delivery) -> tuple[CrawlMessage, str]:
        """The message and its canonical URL; InvalidMessage or BadURL if it cannot be crawled here."""
        crawl = CrawlMessage.decode(message.body)
        url = self._live.scope.canonical(crawl.url)
        config, host = self._live.config, host_of(url)
        if (config.domain_of(host) or (host if config.discovered(host) else None)) != domain:
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
