"""How a delivery ends: its changes to its crawl's counts, its ack, then its outcome counted; or parked
in a retry tier; or dropped, its channel closed, for the broker to deliver again."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

from crawler.errors import InvalidMessage
from crawler.frontier.crawls import CrawlState
from crawler.frontier.delivery import Delivery, lost
from crawler.frontier.message import CrawlMessage
from crawler.frontier.parking import Parking, attempts_of, parked_before
from crawler.frontier.retry import Delay, Failure
from crawler.frontier.settling import Counts, Done, Settling
from crawler.frontier.tracing import step, url_of
from crawler.monitor.metrics import Metrics
from crawler.monitor.metrics.visits import OutcomeKind
from crawler.worker.live import LiveConfig

log = logging.getLogger(__name__)


class Endings:
    """Ends a consumer's deliveries: acked after their crawl's counts, parked, or left to the broker."""

    def __init__(
        self,
        live: LiveConfig,
        parking: Parking,
        settling: Settling,
        metrics: Metrics,
        crawls: CrawlState | None,
    ) -> None:
        self._live = live
        self._parking = parking
        self._settling = settling
        self._metrics = metrics
        self._crawls = crawls  # None: crawls are not counted (tests)

    def changes(
        self, message: Delivery, crawl: CrawlMessage, domain: str, kind: OutcomeKind
    ) -> dict[tuple[str, str], int] | None:
        """An outcome's changes to its crawl's counts; one back from a retry tier is no longer waiting.

        A refresh was never routed into its crawl, so only the links it routes count there; nor was
        a sitemap task of a round its seeds did not begin. A sitemap task counts as one done.
        """
        if crawl.crawl is None or self._crawls is None:
            return None
        if crawl.refresh is not None or (crawl.sitemap is not None and not crawl.sitemap.counted):
            return {}
        back = parked_before(message)
        changes = {(domain, "retrying"): (kind == "retried") - back}
        if kind != "retried":
            changes[domain, "sitemaps_done" if crawl.sitemap is not None else kind] = 1
        return changes

    async def done(
        self,
        message: Delivery,
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
            step("not acked (channel closed)", message)
            return
        step("acked", message, f" {kind}")
        self._metrics.observe_outcome(domain, kind, status, reason)

    async def retried(
        self,
        message: Delivery,
        domain: str,
        crawl: CrawlMessage,
        attempts: int,
        delay: Delay,
        failure: Failure,
    ) -> None:
        """Park a copy in a retry tier (confirmed), then ack the delivery."""
        await self._parking.retry(message, domain, attempts, delay, failure)
        step("parked", message, f" tier={delay.tier:g}s: {failure.error}")
        parked = Done("retry", time.monotonic())
        counts = self.changes(message, crawl, domain, "retried")
        await self.done(message, domain, "retried", crawl=crawl.crawl, counts=counts, done_at=parked)

    async def waited(
        self, message: Delivery, domain: str, crawl: CrawlMessage, seconds: float, turn: float
    ) -> None:
        """A discovered host not ready for its next request: park a copy in the host wait queue of
        `seconds` (confirmed), its `turn` told, then ack the delivery; counted as waiting, like a
        retry, not as one."""
        await self._parking.wait(message, seconds, turn)
        step("waiting", message, f" {seconds:g}s for its host")
        counts = self.changes(message, crawl, domain, "retried")
        await self._settling.ack(message, crawl.crawl, counts, (), Done("retry", time.monotonic()))

    async def park_or_return(self, message: Delivery, domain: str, failure: Failure) -> bool:
        """Park the message in the longest tier (True), or leave it to the broker (False)."""
        # Our own trouble, not the site's: wait the longest delay, however often it happens.
        tier = self._live.rules(domain).retry_delays[-1]
        try:
            crawl = _message_of(message)
            await self.retried(message, domain, crawl, attempts_of(message), Delay(tier, tier), failure)
            return True
        except Exception as exc:
            log.warning("%s: cannot park the message (%r); the broker will deliver it again", domain, exc)
            step("returned (not parked)", message)
            try:
                await message.nack(requeue=True)
            except Exception as nack_failed:  # the channel is gone: the broker redelivers anyway
                log.debug("%s: nack failed too (%r)", domain, nack_failed)
            return False

    def abandon(self, domain: str, message: Delivery, how: str) -> None:
        """Leave a delivery whose channel closed to the broker, which delivers it again."""
        self._metrics.observe_error(domain, "lost")
        step("dropped (channel closed)", message)
        log.info(
            "%s: %s: its channel closed%s: dropped, neither stored nor acked; the broker delivers it again",
            domain,
            url_of(message),
            how,
        )


def _message_of(message: Delivery) -> CrawlMessage:
    """The crawl message of a delivery; one that cannot be read stands for none (no crawl, no refresh)."""
    try:
        return CrawlMessage.decode(message.body)
    except InvalidMessage:
        return CrawlMessage(url="")
