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
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from aio_pika.abc import (
    AbstractChannel,
    AbstractIncomingMessage,
    AbstractQueue,
    AbstractRobustChannel,
    AbstractRobustConnection,
)
from redis.asyncio import Redis
from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_attempt, wait_exponential

from crawler import names as hdr
from crawler.config import CrawlConfig, load_config
from crawler.dedup.store import SeenStore
from crawler.errors import BackendHalt, BadURL, ConfigError, CrawlerError, InvalidMessage, SinkError
from crawler.fetch.fetcher import Fetcher
from crawler.fetch.ratelimit import RateLimiter
from crawler.fetch.robots import Robots
from crawler.frontier.exchanges import declare, domain_queue, topology, work_queues
from crawler.frontier.message import CrawlMessage, persistent
from crawler.frontier.quota import PageQuota
from crawler.frontier.retry import Delay, Failure, next_delay
from crawler.frontier.router import PublishFailed, Routed, Router
from crawler.frontier.scope import Scope
from crawler.frontier.urls import canonicalise, fingerprint, host_of
from crawler.monitor import logs
from crawler.monitor.metrics import Metrics
from crawler.names import Names, delay_label
from crawler.parse.extract import Fields, compile_fields
from crawler.sink.groupcommit import GroupCommit
from crawler.sink.sql import PageRecord, Sink
from crawler.worker.cost import Cost
from crawler.worker.page import Visitor, hop_id

T = TypeVar("T")
log = logging.getLogger(__name__)
pages_log = logging.getLogger("crawler.pages")  # one line per page outcome: verbose

DRAIN_POLL = 0.25  # seconds between checks for an empty frontier in burst mode
CONFIG_POLL = 1.0  # seconds between checks of domains.yaml for an edit
SHORT_RETRY_WAIT = 0.2  # seconds before the first retry of a failed store or publish; then doubling
EXIT_ABORTED = 3  # a second signal: exit at once, unacked messages go back to their queues
# With hundreds of domains, one queue after another is thousands of round trips in a row, each
# waiting behind the deliveries already being processed: set up (and take down) this many at once.
AT_ONCE = 64
# Messages one consumer holds unacked, all queues together: far beyond what its fetch slots can work
# on, more only cost broker CPU and pages/s (1,000 queues x 16 against x 4 in bench/README.md).
# Each queue's prefetch is lowered to its share when there are that many queues.
MAX_PREFETCHED = 4096
PROBES = 8  # channels asking queue depths at once when burst mode checks for an empty frontier
# RabbitMQ closes the whole connection when a client opens more channels than it negotiated (2047
# by default), and a robust connection restores its channels one by one after a reconnect: each
# connection carries at most this many domain channels, more domains get more connections.
CHANNELS_PER_CONNECTION = 256
CHANNELS_KEPT_FREE = 8  # under channel_max, for the probes and the queue sampler


@dataclass(slots=True)
class DomainStats:
    """What one consumer did for one domain."""

    ok: int = 0
    failed: int = 0
    retried: int = 0
    dead: int = 0
    invalid: int = 0
    skipped: int = 0


@dataclass(slots=True)
class _Subscription:
    domain: str
    connection: AbstractRobustConnection
    channel: AbstractChannel
    queue: AbstractQueue
    tag: str


class Consumer:
    """Consumes chosen domain queues until stopped (or, in burst mode, until the work is done)."""

    def __init__(
        self,
        config: CrawlConfig,
        names: Names,
        connection: AbstractRobustConnection,
        redis: Redis,
        sink: Sink,
        fetcher: Fetcher,
        domains: Sequence[str] | None,
        *,
        label: str,
        prefetch: int | None = None,
        burst: bool = False,
        grace: float = 30.0,
        config_path: str | None = None,
        metrics: Metrics | None = None,
        publishing: AbstractRobustConnection | None = None,
        connect: Callable[[], Awaitable[AbstractRobustConnection]] | None = None,
        backend: str = "gateway",
    ) -> None:
        self.config = config
        self.names = names
        self.connection = connection
        # Domain channels beyond what `connection` takes go on connections `connect` opens (and
        # closes, when its caller is done): without it, that many domains are an error.
        self._connect = connect
        self._connections = [connection]
        self.publishing = publishing or connection  # links, retries and dead letters go out here
        self.sink = sink
        self._writes = GroupCommit(sink)
        self.seen = SeenStore(redis, names, config.dedup)  # its layout is chosen at start only
        self.quota = PageQuota(redis, names)
        self.scope = Scope(config)
        self.visitor = Visitor(
            fetcher,
            RateLimiter(redis, names),
            Robots(redis, names, fetcher, config.user_agent),
            self.scope,
            lambda domain: self.config.rules_for(domain),
            config.max_retry_after,
        )
        # Without --domains a consumer takes every configured domain, new ones included.
        self._every_domain = domains is None
        self.domains = sorted(config.domains) if domains is None else list(domains)
        self.label = label
        self.prefetch = prefetch
        self.burst = burst
        self.grace = grace
        self.config_path = config_path
        self.metrics = metrics or Metrics()
        self.cost = Cost(redis, names, self.metrics, backend)
        self.halted: dict[str, str] = {}  # domain -> why the fetch service stopped it
        self.stats = {d: DomainStats() for d in self.domains}
        self._fields: dict[str, Fields] = {
            d: compile_fields(config.rules_for(d).extract) for d in self.domains
        }
        self._subs: list[_Subscription] = []
        self._declared_in = 0.0  # seconds the topology took to declare, for the "consuming" line
        self._subscribed = asyncio.Event()
        self._inflight = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self._stop = asyncio.Event()
        self._reload = asyncio.Event()
        self._signals = 0

    async def run(self) -> None:
        """Declare the topology, consume until stopped or drained, then return what is in flight."""
        publisher = await self.publishing.channel(publisher_confirms=True)
        try:
            started = time.monotonic()
            await declare(publisher, topology(self.config, self.names))
            self._declared_in = time.monotonic() - started
            self._frontier = await publisher.get_exchange(self.names.frontier, ensure=False)
            self._retry = await publisher.get_exchange(self.names.retry, ensure=False)
            self._dead = await publisher.get_exchange(self.names.dead, ensure=False)
            self.router = Router(self.config, self._frontier, self.seen, self.quota)
            self._publisher = publisher
            with self._signal_handlers():
                await self._subscribe(self.domains)
                watcher = asyncio.create_task(self._watch_config()) if self.config_path else None
                try:
                    if self.burst:
                        await self._until_drained()
                    else:
                        await self._stop.wait()
                    await self._unsubscribe(self.grace)
                finally:
                    if watcher is not None:
                        watcher.cancel()
                        await asyncio.gather(watcher, return_exceptions=True)
        finally:
            await publisher.close()

    def stop(self) -> None:
        """Stop taking deliveries; run() returns once in-flight messages are done or returned."""
        self._stop.set()

    # -- the one loop -----------------------------------------------------------------------------

    async def _on_message(self, domain: str, message: AbstractIncomingMessage) -> None:
        self._inflight += 1
        self._idle.clear()
        self.metrics.message_started(domain)
        try:
            await self._process(domain, message)
        except BackendHalt as exc:
            await self._halt(domain, message, exc)
        except Exception as exc:
            # Infrastructure trouble (broker, database) after the fetch: wait a tier and try again.
            log.warning("%s: %r; will retry", domain, exc)
            self.metrics.observe_error(domain, "internal")
            await self._retry_or_return(message, domain, Failure("transient", f"{exc}"))
        finally:
            self.metrics.message_done(domain)
            self._inflight -= 1
            if self._inflight == 0:
                self._idle.set()

    async def _process(self, domain: str, message: AbstractIncomingMessage) -> None:
        attempts = _attempts(message) + 1
        try:
            crawl = CrawlMessage.decode(message.body)
            url = canonicalise(crawl.url, tracking=self.config.dropped_params)
            if self.config.domain_of(host_of(url)) != domain:
                raise InvalidMessage(f"{url} does not belong to domain {domain}")
        except (InvalidMessage, BadURL) as exc:
            self.stats[domain].invalid += 1
            self.metrics.observe_dead(domain, "invalid")
            log.warning("%s: invalid message set aside: %s", domain, exc)
            await self._set_aside(message, domain, Failure("invalid", str(exc)), attempts)
            await message.ack()
            return
        rules = self.config.rules_for(domain)
        # A page counts against max_pages once, on its first try.
        if attempts == 1 and not await self.quota.take(domain, rules.max_pages):
            self.stats[domain].skipped += 1
            self.metrics.observe_skipped(domain, "max_pages")
            pages_log.info("%s %s: skipped, max_pages %d reached", domain, url, rules.max_pages)
            await message.ack()
            return
        if not await self.cost.allows(domain, rules):
            self.stats[domain].skipped += 1
            self.metrics.observe_skipped(domain, "max_credits")
            pages_log.info("%s %s: skipped, max_credits %g reached", domain, url, rules.max_credits or 0)
            await message.ack()
            return
        record = PageRecord(url=url, domain=domain, depth=crawl.depth, attempts=attempts)
        outcome = await self.visitor.visit(record, rules, self._fields[domain], crawl.via)
        outcome = await self.cost.charge(domain, outcome, message)
        self.metrics.observe_visit(domain, outcome)
        seconds = outcome.fetched.seconds if outcome.fetched else 0.0
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
                self.metrics.observe_retry(domain)
                logs.outcome(
                    pages_log,
                    "retry",
                    url=url,
                    domain=domain,
                    status=failure.status_code,
                    seconds=seconds,
                    attempt=attempts,
                    error=failure.error,
                    delay=round(delay.seconds, 1),
                )
                await message.ack()
                return
        await self._store(outcome.record)
        if outcome.links:
            routed = await self._route(outcome.links, crawl.depth + 1, url)
            self.metrics.observe_links(domain, routed)
        if outcome.redirect is not None:
            # Routed like a link at the page's own depth: the target's domain queue, rate, robots.txt
            # and dedup claim apply to it as to any request; a target already seen is not fetched.
            via = (*crawl.via, hop_id(url))
            routed = await self._route([outcome.redirect], crawl.depth, url, via)
            self.metrics.observe_links(domain, routed)
        if failure is not None and failure.transient:
            await self._set_aside(message, domain, failure, attempts)
            self.stats[domain].dead += 1
            self.metrics.observe_dead(domain, "exhausted")
        if failure is None:
            self.stats[domain].ok += 1
        else:
            self.stats[domain].failed += 1
        self.metrics.observe_page(domain, outcome.record.status_code, ok=failure is None)
        logs.outcome(
            pages_log,
            "ok" if failure is None else "dead" if failure.transient else "failed",
            url=url,
            domain=domain,
            status=outcome.record.status_code,
            seconds=seconds,
            attempt=attempts,
            depth=crawl.depth,
            links=len(outcome.links),
            error=failure.error if failure else None,
        )
        await message.ack()

    async def _store(self, record: PageRecord) -> None:
        await _short_retries(SinkError, lambda: self._writes.store(record))

    async def _route(
        self, links: Sequence[str], depth: int, parent: str, via: tuple[str, ...] = ()
    ) -> Routed:
        claimant = fingerprint(parent)
        return await _short_retries(
            PublishFailed, lambda: self.router.route(links, depth=depth, claimant=claimant, via=via)
        )

    async def _halt(self, domain: str, message: AbstractIncomingMessage, exc: BackendHalt) -> None:
        """The fetch service refuses the domain: its message goes back, its queue is let go.

        Nothing is set aside: the pages are fine, the key or the budget is not. A paused domain
        (budget) is taken up again after `exc.pause` seconds; a rejected key waits for a restart.
        """
        await message.nack(requeue=True)
        if domain in self.halted:
            return
        self.halted[domain] = str(exc)
        pause = f"paused for {exc.pause:g}s" if exc.pause else "stopped until this worker is restarted"
        log.error("%s: %s; its messages stay in the queue, %s", domain, exc, pause)
        subs = [s for s in self._subs if s.domain == domain]
        for sub in subs:
            self._subs.remove(sub)
            with contextlib.suppress(Exception):
                await sub.queue.cancel(sub.tag)
        if exc.pause:
            asyncio.get_running_loop().call_later(exc.pause, self._resume, domain)

    def _resume(self, domain: str) -> None:
        """Take a paused domain's queue up again (its budget may have been raised)."""
        if self.halted.pop(domain, None) is not None and not self._stop.is_set():
            log.info("%s: taking its messages again after a pause", domain)
            self._resuming = asyncio.ensure_future(self._subscribe([domain]))

    def _active(self) -> list[str]:
        """The domains this consumer serves, less those the fetch service halted."""
        return [d for d in self.domains if d not in self.halted]

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
            self.metrics.observe_retry(domain)
            await message.ack()
        except Exception as exc:
            log.warning("%s: cannot park the message (%r); the broker will deliver it again", domain, exc)
            with contextlib.suppress(Exception):
                await message.nack(requeue=True)

    # -- subscriptions and lifecycle --------------------------------------------------------------

    async def _subscribe(self, domains: Sequence[str]) -> None:
        started = time.monotonic()
        connections = await self._channel_slots(len(domains))
        await _at_once(self._subscribe_one, zip(domains, connections, strict=True))
        self._subscribed.set()
        seconds = time.monotonic() - started
        prefetch = max((self._prefetch(self.config, d) for d in domains), default=0)
        log.info(
            "consuming %s on %d connection(s), prefetch up to %d per queue: subscribed in %.2fs",
            _listed(domains),
            len({id(s.connection) for s in self._subs}),
            prefetch,
            seconds,
            extra={
                logs.FIELDS: {
                    "queues": len(domains),
                    "prefetch": prefetch,
                    "subscribed_seconds": round(seconds, 3),
                    "declared_seconds": round(self._declared_in, 3),
                }
            },
        )

    async def _subscribe_one(self, where: tuple[str, AbstractRobustConnection]) -> None:
        domain, connection = where
        # A channel per queue: prefetch is really per queue, and one queue's error stays there.
        channel = await connection.channel(publisher_confirms=False)
        await channel.set_qos(prefetch_count=self._prefetch(self.config, domain))
        # Declared (not just looked up) so the robust channel re-declares it and restores the
        # consumer after a reconnect.
        spec = domain_queue(self.names, domain)
        queue = await channel.declare_queue(spec.name, durable=True, arguments=dict(spec.arguments))
        tag = f"{self.label} {domain}".replace(" ", ".")

        async def callback(message: AbstractIncomingMessage) -> None:
            # Work waits until every queue is subscribed: the first queues' pages would otherwise
            # hold up the others' subscriptions (each round trip waits its turn in a busy loop).
            await self._subscribed.wait()
            await self._on_message(domain, message)

        await queue.consume(callback, consumer_tag=tag)
        self._subs.append(_Subscription(domain, connection, channel, queue, tag))

    def _prefetch(self, config: CrawlConfig, domain: str) -> int:
        """The domain queue's prefetch: as configured, unless this consumer's share is smaller."""
        share = max(1, MAX_PREFETCHED // max(1, len(self.domains)))
        return min(self.prefetch or config.rules_for(domain).prefetch, share)

    def _room(self, connection: AbstractRobustConnection) -> int:
        """How many more domain channels `connection` may carry."""
        transport = connection.transport
        negotiated = transport.connection.connection_tune.channel_max if transport is not None else 0
        most = min(CHANNELS_PER_CONNECTION, (negotiated or 65535) - CHANNELS_KEPT_FREE)
        return max(0, most - sum(1 for s in self._subs if s.connection is connection))

    async def _channel_slots(self, count: int) -> list[AbstractRobustConnection]:
        """A connection for each of `count` new domain channels, opening connections as needed."""
        slots: list[AbstractRobustConnection] = []
        for connection in self._connections:
            slots += [connection] * min(self._room(connection), count - len(slots))
        while len(slots) < count:
            if self._connect is None:
                raise CrawlerError(
                    f"{count} domain queues need a channel each, but the RabbitMQ connection has room "
                    f"for {len(slots)} more; give this consumer fewer domains (--domains) and run "
                    "another for the rest"
                )
            connection = await self._connect()
            self._connections.append(connection)
            room = self._room(connection)
            if room == 0:
                raise CrawlerError("RabbitMQ allows no channels on a new connection; check its channel_max")
            slots += [connection] * min(room, count - len(slots))
        return slots

    async def _unsubscribe(self, grace: float) -> None:
        async def cancel(sub: _Subscription) -> None:
            with contextlib.suppress(Exception):
                await sub.queue.cancel(sub.tag)

        async def close(sub: _Subscription) -> None:
            with contextlib.suppress(Exception):
                await sub.channel.close()

        await _at_once(cancel, self._subs)
        try:
            await asyncio.wait_for(self._idle.wait(), grace)
        except TimeoutError:
            log.warning("%d messages in flight after %.0fs: returned to their queues", self._inflight, grace)
        # Closing the channels returns anything delivered but not yet handled to the queues.
        await _at_once(close, self._subs)
        self._subs.clear()

    async def _pending(self, probes: Sequence[AbstractRobustChannel]) -> bool:
        """True if any work queue holds a message: asked of the broker itself, probes at once."""
        # Retry tiers first: while their messages wait out a delay, they are what is not empty, and
        # the sweep stops at the first queue that is not.
        names = work_queues(self.config, self.names, self._active())
        tiers = len(self.config.retry_tiers)
        pending = iter([*names[-tiers:], *names[:-tiers]] if tiers else names)
        found = False

        async def probe(channel: AbstractRobustChannel) -> None:
            nonlocal found
            for name in pending:  # shared: each queue is asked once, by whichever probe is free
                if found:
                    return
                # robust=False: a robust channel answers a repeated passive declare from its cache.
                declared = await channel.declare_queue(name, passive=True, robust=False)
                if declared.declaration_result.message_count:
                    found = True

        await _at_once(probe, probes)
        return found

    async def _until_drained(self) -> None:
        probes: list[AbstractRobustChannel] = []

        async def open_probe(_: int) -> None:
            probes.append(await self.connection.channel(publisher_confirms=False))

        try:
            await _at_once(open_probe, range(min(PROBES, len(self.domains) + len(self.config.retry_tiers))))
            idle = 0
            while not self._stop.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stop.wait(), DRAIN_POLL)
                idle = idle + 1 if self._inflight == 0 and not await self._pending(probes) else 0
                if idle < 2:
                    continue
                # Looks done: stop consuming and return anything prefetched, then look again.
                await self._unsubscribe(self.grace)
                if not await self._pending(probes):
                    return
                idle = 0
                await self._subscribe(self._active())
        finally:
            for probe in probes:
                with contextlib.suppress(Exception):
                    await probe.close()

    # -- live configuration -----------------------------------------------------------------------

    async def _watch_config(self) -> None:
        assert self.config_path is not None
        path = Path(self.config_path)
        seen = _mtime(path)
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._reload.wait(), CONFIG_POLL)
            changed = _mtime(path)
            if self._reload.is_set() or changed != seen:
                self._reload.clear()
                seen = changed
                try:
                    await self.apply(load_config(path))
                except ConfigError as exc:
                    log.error("edit of %s refused, the running configuration stays:\n%s", path, exc)
                except Exception as exc:  # the broker is away: keep watching, try again on the next edit
                    log.error("edit of %s not applied (%r); the running configuration stays", path, exc)

    async def apply(self, config: CrawlConfig) -> None:
        """Switch to an edited configuration: priorities, rates, extraction, scope; new domains too."""
        fields = {d: compile_fields(config.rules_for(d).extract) for d in config.domains}
        await declare(self._publisher, topology(config, self.names))
        self.config = config
        self.router.config = config
        self.scope.config = config
        self._fields.update(fields)

        async def set_qos(sub: _Subscription) -> None:
            await sub.channel.set_qos(prefetch_count=self._prefetch(config, sub.domain))

        await _at_once(set_qos, [sub for sub in self._subs if sub.domain in config.domains])
        added = sorted(set(config.domains) - set(self.domains)) if self._every_domain else []
        for domain in added:
            self.stats[domain] = DomainStats()
        self.domains.extend(added)
        if added and not self._stop.is_set():
            await self._subscribe(added)
        log.info("configuration reloaded%s", f"; new domains: {', '.join(added)}" if added else "")

    @contextlib.contextmanager
    def _signal_handlers(self) -> Any:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._on_signal, sig)
        loop.add_signal_handler(signal.SIGHUP, self._reload.set)
        try:
            yield
        finally:
            for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
                loop.remove_signal_handler(sig)

    def _on_signal(self, sig: signal.Signals) -> None:
        self._signals += 1
        if self._signals > 1:
            log.warning("second %s: exiting now; unacked messages return to their queues", sig.name)
            os._exit(EXIT_ABORTED)
        log.info("%s: finishing in-flight messages (up to %.0fs); again to exit now", sig.name, self.grace)
        self.stop()


async def _at_once(call: Callable[[T], Awaitable[object]], items: Iterable[T]) -> None:
    """Await `call(item)` for each item, AT_ONCE at a time; on the first error, cancel the rest, raise it."""
    limit = asyncio.Semaphore(AT_ONCE)

    async def bounded(item: T) -> None:
        async with limit:
            await call(item)

    tasks = [asyncio.ensure_future(bounded(item)) for item in items]
    try:
        await asyncio.gather(*tasks)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def _listed(domains: Sequence[str], most: int = 10) -> str:
    """Domains for a log line: every one if few, else the first few and how many more."""
    if len(domains) <= most:
        return ", ".join(domains)
    return f"{', '.join(domains[:most])} and {len(domains) - most} more ({len(domains)} domain queues)"


async def _short_retries(kind: type[Exception], call: Callable[[], Awaitable[T]]) -> T:
    """`call()`, tried up to three times while it raises `kind`: a brief outage of the database or broker."""
    try:
        return await call()
    except kind:
        # Building tenacity's machinery costs more per message than the rest of this wrapper: only
        # a call that failed pays for it.
        await asyncio.sleep(SHORT_RETRY_WAIT)
    async for attempt in AsyncRetrying(
        stop=stop_after_attempt(2),
        wait=wait_exponential(multiplier=SHORT_RETRY_WAIT * 2, max=2),
        retry=retry_if_exception_type(kind),
        reraise=True,
    ):
        with attempt:
            return await call()
    raise AssertionError("unreachable: tenacity reraises the last failure")


def _attempts(message: AbstractIncomingMessage) -> int:
    value = (message.headers or {}).get(hdr.HEADER_ATTEMPTS, 0)
    return value if isinstance(value, int) and value >= 0 else 0


def _mtime(path: Path) -> float | None:
    try:
        return path.stat().st_mtime
    except OSError:
        return None
