"""One delivery, top to bottom: read it, visit its page, then retry it, or store, route and ack.

A message is acked only once its row is committed and its links (or its redirect) are confirmed, so
a worker killed at any instant loses nothing: the broker delivers the message again. Its checks before
the fetch take one Redis round trip (admission.py); its dedup confirms, counts and ack are written
with those of the deliveries ending at the same time (settling.py).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

from aio_pika.abc import AbstractIncomingMessage
from aio_pika.exceptions import ChannelInvalidStateError

from crawler import names as hdr
from crawler.config import Rules
from crawler.errors import BackendHalt, BadURL, Cancelled, InvalidMessage, SinkError
from crawler.frontier.crawls import CrawlOptions, CrawlState
from crawler.frontier.message import CrawlMessage
from crawler.frontier.quota import PageQuota
from crawler.frontier.recovery import Recovery
from crawler.frontier.retry import Delay, Failure, next_delay
from crawler.frontier.router import PublishFailed, Routed, Router
from crawler.frontier.urls import fingerprint, host_of
from crawler.monitor import logs
from crawler.monitor.metrics import Metrics, OutcomeKind
from crawler.sink.groupcommit import GroupCommit
from crawler.sink.sql import PageRecord
from crawler.worker.admission import Admission, Checked
from crawler.worker.concurrency import short_retries
from crawler.worker.cost import Cost
from crawler.worker.live import LiveConfig
from crawler.worker.page import Outcome, Visitor, hop_id
from crawler.worker.parking import Parking, attempts_of
from crawler.worker.settling import Counts, Done, Settling

log = logging.getLogger(__name__)
pages_log = logging.getLogger("crawler.pages")  # one line per page outcome: verbose


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
    ) -> None:
        self._live = live
        self._visitor = visitor
        self._quota = quota
        self._cost = cost
        self._router = router
        self._writes = writes
        self._parking = parking
        self._metrics = metrics
        self._wait = short_retry_wait
        self._crawls = crawls  # None: crawl ids are carried but not checked nor counted (tests)
        self._recovery = recovery  # None: no check for pages queued twice after Redis was lost
        self._settling = settling
        self._admission = admission  # None: the checks before a fetch are asked one by one

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
            await self._park_or_return(message, domain, Failure("transient", f"{exc}"))

    async def _process(self, domain: str, message: AbstractIncomingMessage, received: float) -> None:
        if lost(message):  # prefetched before the connection dropped: not worth a fetch
            return self.abandon(domain, message, " before its work began")
        attempts = attempts_of(message) + 1
        try:
            crawl, url = self._read(domain, message)
        except (InvalidMessage, BadURL) as exc:
            log.warning("%s: invalid message set aside: %s", domain, exc)
            await self._parking.dead(message, domain, attempts, Failure("invalid", str(exc)))
            return await self._done(message, domain, "invalid")
        options = await self._options(crawl.crawl)
        rules = self._live.rules(domain)
        # A page counts against max_pages once, on its first try (not again when returned unfetched).
        first = attempts == 1 and not message.redelivered
        if first and await self._queued_twice(crawl.crawl, url):
            pages_log.info("%s %s: skipped, queued again after Redis was lost and taken already", domain, url)
            counts = self._changes(crawl.crawl, message, domain, "skipped")
            return await self._done(
                message, domain, "skipped", reason="duplicate", crawl=crawl.crawl, counts=counts
            )
        checked = await self._admit(url, domain, crawl.crawl, options, rules, first)
        if checked is None:
            if await self._cancelled(crawl.crawl):
                return await self._done(message, domain, "cancelled")
            held = await self._held_back(domain, crawl.crawl, options, rules, first)
        elif checked.held == "cancelled":
            return await self._done(message, domain, "cancelled")
        else:
            held = _held(checked, rules, options)
        if held is not None:
            reason, why = held
            pages_log.info("%s %s: skipped, %s", domain, url, why)
            counts = self._changes(crawl.crawl, message, domain, "skipped")
            return await self._done(
                message, domain, "skipped", reason=reason, crawl=crawl.crawl, counts=counts
            )
        record = PageRecord(url=url, domain=domain, depth=crawl.depth, attempts=attempts, crawl=crawl.crawl)
        start_by = self._live.config.start_by(received, rules)
        admitted = checked.admitted if checked is not None else None
        try:
            outcome = await self._visitor.visit(
                record,
                rules,
                self._live.fields(domain),
                crawl.via,
                # Granted at once, the token came in the same atomic step as the cancel check.
                None if checked is not None and checked.cleared_now else lambda: self._cancelled(crawl.crawl),
                start_by,
                admitted,
            )
        except Cancelled:
            return await self._done(message, domain, "cancelled")
        if outcome.late:
            # Waiting for a rate token used the delivery's time: fetching now could outlive RabbitMQ's
            # consumer_timeout, which would close the channel and have the work done twice.
            log.info("%s %s: returned unfetched, too late to finish within delivery_timeout", domain, url)
            self._metrics.observe_error(domain, "late")
            await message.nack(requeue=True)
            return
        outcome = await self._cost.charge(domain, outcome, message)
        self._metrics.observe_visit(domain, outcome)
        if lost(message):
            # Cut off from the broker while visiting: the broker has the message back and another
            # consumer may have stored the page already. Storing, routing or parking it here would
            # do its work twice, and the ack could not be sent.
            return self.abandon(domain, message, " while it was fetched")
        failure = outcome.failure
        delay = self._delay(domain, attempts, failure)
        if failure is not None and delay is not None:
            await self._parking.retry(message, domain, attempts, delay, failure)
            parked = Done("retry", time.monotonic())
            self._log("retry", outcome, crawl, attempts, delay=round(delay.seconds, 1))
            counts = self._changes(crawl.crawl, message, domain, "retried")
            return await self._done(
                message, domain, "retried", crawl=crawl.crawl, counts=counts, done_at=parked
            )
        await short_retries(SinkError, lambda: self._writes.store(outcome.record), self._wait)
        committed = Done("commit", time.monotonic())
        routed: list[Routed] = []
        if outcome.links:
            routed.append(
                await self._route(domain, outcome.links, crawl.depth + 1, url, crawl=crawl, options=options)
            )
        if outcome.redirect is not None:
            # Routed like a link at the page's own depth: the target's domain queue, rate, robots.txt
            # and dedup claim apply to it as to any request; a target already seen is not fetched.
            hops = (*crawl.via, hop_id(url))
            routed.append(
                await self._route(domain, [outcome.redirect], crawl.depth, url, hops, crawl, options)
            )
        if failure is not None and failure.transient:
            await self._parking.dead(message, domain, attempts, failure)
        kind: OutcomeKind = "ok" if failure is None else "dead" if failure.transient else "failed"
        self._log(kind, outcome, crawl, attempts, links=len(outcome.links))
        counts = self._changes(crawl.crawl, message, domain, kind)
        if counts is not None:
            for r in routed:
                for d, n in r.by_domain.items():
                    counts[d, "routed"] = counts.get((d, "routed"), 0) + n
        confirms = [fp for r in routed for fp in r.unconfirmed]
        await self._done(
            message,
            domain,
            kind,
            outcome.record.status_code,
            crawl=crawl.crawl,
            counts=counts,
            confirms=confirms,
            done_at=committed,
        )

    async def _admit(
        self, url: str, domain: str, crawl: str | None, options: CrawlOptions, rules: Rules, first: bool
    ) -> Checked | None:
        """The checks before the fetch in one round trip; None if they are to be asked one by one."""
        if self._admission is None:
            return None
        return await self._admission.check(
            url,
            domain,
            rules,
            crawl=crawl,
            cancellable=self._crawls is not None,
            count=first,
            crawl_max_pages=options.max_pages,
        )

    async def _held_back(
        self, domain: str, crawl: str | None, options: CrawlOptions, rules: Rules, first: bool
    ) -> tuple[str, str] | None:
        """Why policy keeps a page from being fetched (its metric reason and a log line), or None."""
        if first and not await self._quota.take(domain, rules.max_pages, crawl):
            return "max_pages", f"max_pages {rules.max_pages} reached"
        if (
            first
            and crawl is not None
            and options.max_pages is not None
            and not await self._quota.take_crawl(crawl, options.max_pages)
        ):
            return "max_pages", f"the crawl's max_pages {options.max_pages} reached"
        if not await self._cost.allows(domain, rules):
            return "max_credits", f"max_credits {rules.max_credits or 0:g} reached"
        return None

    async def _queued_twice(self, crawl: str | None, url: str) -> bool:
        """A page queued again after Redis lost the dedup store, whose first copy was taken already."""
        if self._recovery is None:
            return False
        return await self._recovery.duplicate(self._router.seen.for_crawl(crawl), url)

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

    async def _route(
        self,
        domain: str,
        urls: Sequence[str],
        depth: int,
        parent: str,
        via: tuple[str, ...] = (),
        crawl: CrawlMessage | None = None,
        options: CrawlOptions | None = None,
    ) -> Routed:
        """Route a page's links (or its redirect); their claims are confirmed when the page is acked."""
        claimant = fingerprint(parent)
        # Links inherit the page's crawl: its own dedup store, and its options' limits.
        crawl_id = crawl.crawl if crawl is not None else None
        options = options or _NO_OPTIONS
        routed = await short_retries(
            PublishFailed,
            lambda: self._router.route(
                urls,
                depth=depth,
                claimant=claimant,
                via=via,
                crawl=crawl_id,
                domains=options.domains,
                max_depth=options.max_depth,
                confirm=False,
            ),
            self._wait,
        )
        self._metrics.observe_links(domain, routed)
        return routed

    async def _cancelled(self, crawl: str | None) -> bool:
        return crawl is not None and self._crawls is not None and await self._crawls.cancelled(crawl)

    async def _options(self, crawl: str | None) -> CrawlOptions:
        if crawl is None or self._crawls is None:
            return _NO_OPTIONS
        return await self._crawls.options(crawl) or _NO_OPTIONS

    def _changes(
        self, crawl: str | None, message: AbstractIncomingMessage, domain: str, kind: OutcomeKind
    ) -> dict[tuple[str, str], int] | None:
        """An outcome's changes to its crawl's counts; one back from a retry tier is no longer waiting."""
        if crawl is None or self._crawls is None:
            return None
        back = hdr.HEADER_RETRY_TIER in (message.headers or {})
        changes = {(domain, "retrying"): (kind == "retried") - back}
        if kind != "retried":
            changes[domain, kind] = 1
        return changes

    async def _done(
        self,
        message: AbstractIncomingMessage,
        domain: str,
        kind: OutcomeKind,
        status: int | None = None,
        reason: str = "max_pages",
        crawl: str | None = None,
        counts: Counts | None = None,
        confirms: Sequence[bytes] = (),
        done_at: Done | None = None,
    ) -> None:
        """Confirm the page's links and count it in its crawl, then ack it; counted once it is acked."""
        await self._settling.ack(message, crawl, counts, confirms, done_at)
        if lost(message):  # the ack could not go: the broker delivers it again, and it is counted then
            return
        self._metrics.observe_outcome(domain, kind, status, reason)

    async def _park_or_return(self, message: AbstractIncomingMessage, domain: str, failure: Failure) -> bool:
        """Park the message in the longest tier (True), or leave it to the broker (False)."""
        # Our own trouble, not the site's: wait the longest delay, however often it happens.
        tier = self._live.rules(domain).retry_delays[-1]
        try:
            await self._parking.retry(message, domain, attempts_of(message), Delay(tier, tier), failure)
            parked = Done("retry", time.monotonic())
            crawl = _crawl_of(message)
            counts = self._changes(crawl, message, domain, "retried")
            await self._done(message, domain, "retried", crawl=crawl, counts=counts, done_at=parked)
            return True
        except Exception as exc:
            log.warning("%s: cannot park the message (%r); the broker will deliver it again", domain, exc)
            try:
                await message.nack(requeue=True)
            except Exception as nack_failed:  # the channel is gone: the broker redelivers anyway
                log.debug("%s: nack failed too (%r)", domain, nack_failed)
            return False

    def abandon(self, domain: str, message: AbstractIncomingMessage, how: str) -> None:
        """Leave a delivery whose channel closed to the broker, which delivers it again."""
        self._metrics.observe_error(domain, "lost")
        log.info(
            "%s: %s: its channel closed%s: dropped, neither stored nor acked; the broker delivers it again",
            domain,
            _url_of(message),
            how,
        )

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


_NO_OPTIONS = CrawlOptions()


def lost(message: AbstractIncomingMessage) -> bool:
    """Whether the channel `message` came on has closed: the broker has it back, unacked."""
    try:
        return message.channel.is_closed
    except ChannelInvalidStateError:  # aio-pika's answer for a closed channel
        return True


def _url_of(message: AbstractIncomingMessage) -> str:
    """The URL a message asks for, for a log line; its delivery tag if it cannot be read."""
    try:
        return CrawlMessage.decode(message.body).url
    except InvalidMessage:
        return f"#{message.delivery_tag}"


def _held(checked: Checked, rules: Rules, options: CrawlOptions) -> tuple[str, str] | None:
    """Why the admission held a page back (its metric reason and a log line), or None."""
    if checked.held == "max_pages":
        return "max_pages", f"max_pages {rules.max_pages} reached"
    if checked.held == "crawl_max_pages":
        return "max_pages", f"the crawl's max_pages {options.max_pages} reached"
    return None


def _crawl_of(message: AbstractIncomingMessage) -> str | None:
    """The crawl id of a message, None if it has none or cannot be read."""
    try:
        return CrawlMessage.decode(message.body).crawl
    except InvalidMessage:
        return None
