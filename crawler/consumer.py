"""The consumer: the one loop that takes a URL from its domain queue and crawls it.

delivery -> fetch -> extract -> store -> route links -> ack; on a failure, a retry tier or the dead
queue. A message is acked only once its row is committed and its links are confirmed, so a worker
killed at any instant loses nothing: the broker delivers the message again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from aio_pika.abc import (
    AbstractChannel,
    AbstractIncomingMessage,
    AbstractQueue,
    AbstractRobustConnection,
)
from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_attempt, wait_exponential

from crawler import names as hdr
from crawler.config import CrawlConfig, Rules
from crawler.dedup import SeenStore
from crawler.errors import BadURL, FetchError, InvalidMessage, SinkError
from crawler.exchanges import declare, topology, work_queues
from crawler.extract import charset_from_content_type, compile_fields, extract
from crawler.fetch import Fetcher, Response
from crawler.message import CrawlMessage, persistent
from crawler.names import Names, delay_label
from crawler.retry import JITTER, Delay, Failure, from_error, from_status, next_delay
from crawler.router import PublishFailed, Router
from crawler.sink import PageRecord, Sink
from crawler.urls import canonicalise, fingerprint, host_of

log = logging.getLogger(__name__)

DRAIN_POLL = 0.25  # seconds between checks for an empty frontier in burst mode
# RabbitMQ 3.10 can go on counting, in a delay queue's declare-ok, a message that has already
# expired back into the frontier (its management API and basic.get see none). A delay queue
# still counting messages this long past its delay with nothing delivered since holds none.
STALE_DELAY_MARGIN = 2.0
EXIT_ABORTED = 3  # a second signal: exit at once, unacked messages go back to their queues


@dataclass(slots=True)
class DomainStats:
    """What one consumer did for one domain."""

    ok: int = 0
    failed: int = 0
    retried: int = 0
    dead: int = 0
    invalid: int = 0


@dataclass(slots=True)
class _Subscription:
    domain: str
    channel: AbstractChannel
    queue: AbstractQueue
    tag: str


@dataclass(frozen=True, slots=True)
class _Outcome:
    record: PageRecord
    links: Sequence[str] = ()
    failure: Failure | None = None


class Consumer:
    """Consumes chosen domain queues until stopped (or, in burst mode, until the work is done)."""

    def __init__(
        self,
        config: CrawlConfig,
        names: Names,
        connection: AbstractRobustConnection,
        seen: SeenStore,
        sink: Sink,
        fetcher: Fetcher,
        domains: Sequence[str],
        *,
        label: str,
        prefetch: int | None = None,
        burst: bool = False,
        grace: float = 30.0,
    ) -> None:
        self.config = config
        self.names = names
        self.connection = connection
        self.seen = seen
        self.sink = sink
        self.fetcher = fetcher
        self.domains = list(domains)
        self.label = label
        self.prefetch = prefetch
        self.burst = burst
        self.grace = grace
        self.stats = {d: DomainStats() for d in self.domains}
        self._fields = {d: compile_fields(config.rules_for(d).extract) for d in self.domains}
        self._subs: list[_Subscription] = []
        self._inflight = 0
        self._last_activity = time.monotonic()
        self._idle = asyncio.Event()
        self._idle.set()
        self._stop = asyncio.Event()
        self._signals = 0

    async def run(self) -> None:
        """Declare the topology, consume until stopped or drained, then return what is in flight."""
        publisher = await self.connection.channel(publisher_confirms=True)
        try:
            await declare(publisher, topology(self.config, self.names))
            self._frontier = await publisher.get_exchange(self.names.frontier, ensure=False)
            self._retry = await publisher.get_exchange(self.names.retry, ensure=False)
            self._dead = await publisher.get_exchange(self.names.dead, ensure=False)
            self.router = Router(self.config, self._frontier, self.seen)
            with self._signal_handlers():
                await self._subscribe()
                if self.burst:
                    await self._until_drained()
                else:
                    await self._stop.wait()
                await self._unsubscribe(self.grace)
        finally:
            await publisher.close()

    def stop(self) -> None:
        """Stop taking deliveries; run() returns once in-flight messages are done or returned."""
        self._stop.set()

    # -- the one loop -----------------------------------------------------------------------------

    async def _on_message(self, domain: str, message: AbstractIncomingMessage) -> None:
        self._inflight += 1
        self._last_activity = time.monotonic()
        self._idle.clear()
        try:
            await self._process(domain, message)
        except Exception as exc:
            # Infrastructure trouble (broker, database) after the fetch: wait a tier and try again.
            log.warning("%s: %r; will retry", domain, exc)
            await self._retry_or_return(message, domain, Failure("transient", f"{exc}"))
        finally:
            self._inflight -= 1
            self._last_activity = time.monotonic()
            if self._inflight == 0:
                self._idle.set()

    async def _process(self, domain: str, message: AbstractIncomingMessage) -> None:
        attempts = _attempts(message) + 1
        try:
            crawl = CrawlMessage.decode(message.body)
            url = canonicalise(crawl.url, tracking=self.config.tracking_params)
            if self.config.domain_of(host_of(url)) != domain:
                raise InvalidMessage(f"{url} does not belong to domain {domain}")
        except (InvalidMessage, BadURL) as exc:
            self.stats[domain].invalid += 1
            log.warning("%s: invalid message set aside: %s", domain, exc)
            await self._set_aside(message, domain, Failure("invalid", str(exc)), attempts)
            await message.ack()
            return
        rules = self.config.rules_for(domain)
        outcome = await self._crawl(url, crawl.depth, domain, rules, attempts)
        failure = outcome.failure
        if failure is not None and failure.transient:
            delay = next_delay(
                rules.retry_delays,
                attempts,
                self.config.retry_tiers,
                failure.retry_after,
                self.config.max_retry_after,
            )
            if delay is not None:
                await self._publish_retry(message, domain, attempts, delay, failure)
                self.stats[domain].retried += 1
                log.info("%s %s: %s; retry in %.1fs", domain, url, failure.error, delay.seconds)
                await message.ack()
                return
        await self._store(outcome.record)
        if outcome.links:
            await self._route(outcome.links, crawl.depth + 1, url)
        if failure is not None and failure.transient:
            await self._set_aside(message, domain, failure, attempts)
            self.stats[domain].dead += 1
        if failure is None:
            self.stats[domain].ok += 1
        else:
            self.stats[domain].failed += 1
        log.info(
            "%s %s %s depth=%d attempt=%d links=%d",
            domain,
            outcome.record.status_code or "-",
            url,
            crawl.depth,
            attempts,
            len(outcome.links),
        )
        await message.ack()

    async def _crawl(self, url: str, depth: int, domain: str, rules: Rules, attempts: int) -> _Outcome:
        record = PageRecord(url=url, domain=domain, depth=depth, attempts=attempts)
        try:
            response = await self.fetcher.fetch(url, rules, self._check_scope)
        except FetchError as exc:
            failure = from_error(exc)
            failed = replace(record, error=failure.error, status_code=exc.status_code, final_url=exc.url)
            return _Outcome(failed, (), failure)
        status_failure = from_status(response.status_code, response.headers.get("retry-after"))
        record = replace(
            record,
            final_url=response.final_url,
            status_code=response.status_code,
            content_type=response.content_type,
            error=status_failure.error if status_failure else None,
        )
        if status_failure is not None or not response.is_html:
            return _Outcome(record, (), status_failure)
        return await self._extract(record, response, rules, domain)

    async def _extract(self, record: PageRecord, response: Response, rules: Rules, domain: str) -> _Outcome:
        page = extract(
            response.body,
            response.final_url,
            charset=charset_from_content_type(response.content_type),
            fields=self._fields[domain],
            max_links=rules.max_links,
        )
        return _Outcome(replace(record, title=page.title, data=page.data or None), page.links)

    def _check_scope(self, url: str) -> None:
        self.router.scope(canonicalise(url, tracking=self.config.tracking_params))

    async def _store(self, record: PageRecord) -> None:
        async for attempt in _short_retries(SinkError):
            with attempt:
                await self.sink.store(record)

    async def _route(self, links: Sequence[str], depth: int, parent: str) -> None:
        async for attempt in _short_retries(PublishFailed):
            with attempt:
                await self.router.route(links, depth=depth, claimant=fingerprint(parent))

    # -- the failure paths ------------------------------------------------------------------------

    def _headers(
        self, message: AbstractIncomingMessage, domain: str, attempts: int, failure: Failure
    ) -> dict[str, Any]:
        headers = dict(message.headers or {})
        headers.update(
            {
                hdr.HEADER_ATTEMPTS: attempts,
                hdr.HEADER_REASON: failure.reason,
                hdr.HEADER_ERROR: failure.error[:1000],
                hdr.HEADER_STATUS: failure.status_code or 0,
                hdr.HEADER_DOMAIN: domain,
                hdr.HEADER_CONSUMER: self.label,
                hdr.HEADER_TIME: datetime.now(UTC).isoformat(timespec="seconds"),
            }
        )
        return headers

    async def _publish_retry(
        self,
        message: AbstractIncomingMessage,
        domain: str,
        attempts: int,
        delay: Delay,
        failure: Failure,
    ) -> None:
        headers = self._headers(message, domain, attempts, failure)
        headers[hdr.HEADER_RETRY_TIER] = delay_label(delay.tier)
        copy = persistent(message.body, message.priority or 0, headers)
        copy.expiration = delay.seconds
        await self._retry.publish(copy, routing_key=message.routing_key or "")

    async def _set_aside(
        self, message: AbstractIncomingMessage, domain: str, failure: Failure, attempts: int
    ) -> None:
        headers = self._headers(message, domain, attempts, failure)
        copy = persistent(message.body, message.priority or 0, headers)
        await self._dead.publish(copy, routing_key=message.routing_key or "")

    async def _retry_or_return(self, message: AbstractIncomingMessage, domain: str, failure: Failure) -> None:
        # Our own trouble, not the site's: wait the longest delay, however often it happens.
        rules = self.config.rules_for(domain)
        tier = rules.retry_delays[-1]
        try:
            await self._publish_retry(message, domain, _attempts(message), Delay(tier, tier), failure)
            await message.ack()
        except Exception as exc:
            log.warning("%s: cannot park the message (%r); the broker will deliver it again", domain, exc)
            with contextlib.suppress(Exception):
                await message.nack(requeue=True)

    # -- subscriptions and lifecycle --------------------------------------------------------------

    async def _subscribe(self) -> None:
        for domain in self.domains:
            # A channel per queue: prefetch is really per queue, and one queue's error stays there.
            channel = await self.connection.channel()
            await channel.set_qos(prefetch_count=self.prefetch or self.config.rules_for(domain).prefetch)
            queue = await channel.get_queue(self.names.domain_queue(domain), ensure=False)
            tag = f"{self.label} {domain}".replace(" ", ".")

            async def callback(message: AbstractIncomingMessage, domain: str = domain) -> None:
                await self._on_message(domain, message)

            await queue.consume(callback, consumer_tag=tag)
            self._subs.append(_Subscription(domain, channel, queue, tag))
        log.info("consuming %s", ", ".join(self.domains))

    async def _unsubscribe(self, grace: float) -> None:
        for sub in self._subs:
            with contextlib.suppress(Exception):
                await sub.queue.cancel(sub.tag)
        try:
            await asyncio.wait_for(self._idle.wait(), grace)
        except TimeoutError:
            log.warning("%d messages in flight after %.0fs: returned to their queues", self._inflight, grace)
        # Closing the channels returns anything delivered but not yet handled to the queues.
        for sub in self._subs:
            with contextlib.suppress(Exception):
                await sub.channel.close()
        self._subs.clear()

    async def _pending(self, probe: AbstractChannel) -> int:
        total = 0
        quiet = time.monotonic() - self._last_activity
        delays = {self.names.retry_queue(d): d for d in self.config.retry_tiers}
        for name in work_queues(self.config, self.names, self.domains):
            declared = await probe.declare_queue(name, passive=True)
            count = declared.declaration_result.message_count or 0
            if count and name in delays and quiet > delays[name] * JITTER + STALE_DELAY_MARGIN:
                log.debug("%s: counts %d messages past their delay; taken as none", name, count)
                continue
            total += count
        return total

    async def _until_drained(self) -> None:
        probe = await self.connection.channel()
        try:
            idle = 0
            while not self._stop.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stop.wait(), DRAIN_POLL)
                idle = idle + 1 if self._inflight == 0 and await self._pending(probe) == 0 else 0
                if idle < 2:
                    continue
                # Looks done: stop consuming and return anything prefetched, then look again.
                await self._unsubscribe(self.grace)
                if await self._pending(probe) == 0:
                    return
                idle = 0
                await self._subscribe()
        finally:
            with contextlib.suppress(Exception):
                await probe.close()

    @contextlib.contextmanager
    def _signal_handlers(self) -> Any:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._on_signal, sig)
        try:
            yield
        finally:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(sig)

    def _on_signal(self, sig: signal.Signals) -> None:
        self._signals += 1
        if self._signals > 1:
            log.warning("second %s: exiting now; unacked messages return to their queues", sig.name)
            os._exit(EXIT_ABORTED)
        log.info("%s: finishing in-flight messages (up to %.0fs); again to exit now", sig.name, self.grace)
        self.stop()


def _short_retries(kind: type[Exception]) -> AsyncRetrying:
    return AsyncRetrying(
        stop=stop_after_attempt(3),
        wait=wait_exponential(multiplier=0.2, max=2),
        retry=retry_if_exception_type(kind),
        reraise=True,
    )


def _attempts(message: AbstractIncomingMessage) -> int:
    value = (message.headers or {}).get(hdr.HEADER_ATTEMPTS, 0)
    return value if isinstance(value, int) and value >= 0 else 0
