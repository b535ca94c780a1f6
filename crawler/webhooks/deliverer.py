"""The webhooks queue consumed: each version POSTed to every receiver that wants it, at once; a
receiver that failed gets a copy of its own through a retry tier (back to this queue by the frontier's
WEBHOOK_KEY), then a dead letter; the version is acked once those copies are confirmed.

A crawl never waits on a receiver: versions reach this queue through the feed's exchange, after their
pages are acked, and deliveries run on a channel of their own, at most `prefetch` at once.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from datetime import UTC, datetime
from typing import Any

from aio_pika.abc import AbstractExchange, AbstractIncomingMessage, AbstractRobustConnection
from aiormq.exceptions import AMQPError, ChannelInvalidStateError

from crawler import names as hdr
from crawler.config import CrawlConfig, Webhook
from crawler.frontier.exchanges import declare, topology
from crawler.frontier.message import persistent
from crawler.frontier.retry import next_delay
from crawler.monitor.metrics import Metrics
from crawler.names import WEBHOOK_KEY, Names, delay_label
from crawler.webhooks.posting import Posted, Poster

log = logging.getLogger(__name__)
PREFETCH = 64  # deliveries in flight per process: a slow receiver holds these, nothing else


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value or "")


class Deliverer:
    """Delivers the versions of the webhooks queue; `config()` is the configuration in force."""

    def __init__(
        self,
        config: Callable[[], CrawlConfig],
        names: Names,
        poster: Poster,
        retry: AbstractExchange,
        dead: AbstractExchange,
        metrics: Metrics,
        label: str,
    ) -> None:
        self._config = config
        self._names = names
        self._poster = poster
        self._retry = retry
        self._dead = dead
        self._metrics = metrics
        self._label = label
        self._tasks: set[asyncio.Task[None]] = set()

    async def on_message(self, message: AbstractIncomingMessage) -> None:
        """Take one delivery off the queue: handled in a task of its own."""
        task = asyncio.create_task(self.handle(message))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def handle(self, message: AbstractIncomingMessage) -> None:
        """Deliver one version to its receivers; ack it once every failure's copy is confirmed."""
        config = self._config()
        try:
            version = json.loads(message.body)
            domain, kind = str(version["domain"]), str(version["kind"])
        except (ValueError, KeyError, TypeError):
            log.warning("webhooks: a message that is no version of the feed: set aside")
            await message.reject(requeue=False)  # the dead queue, as `rejected`
            return
        headers = message.headers or {}
        attempts = headers.get(hdr.HEADER_ATTEMPTS, 0)
        attempts = attempts if isinstance(attempts, int) and attempts >= 0 else 0
        only = _text(headers.get(hdr.HEADER_WEBHOOK))
        if only:  # a retry or a replay: for one receiver
            hooks = [h for h in config.webhooks if h.key == only]
            if not hooks:
                log.warning(
                    "webhooks: receiver %s is no longer in domains.yaml: its delivery is dropped", only
                )
        else:
            hooks = [h for h in config.webhooks if h.wants(domain, kind)]
        message_id = message.message_id or ""
        started = time.monotonic()
        posted = await asyncio.gather(
            *(self._poster.post(h, message.body, message_id, kind, attempts + 1) for h in hooks)
        )
        self._metrics.observe_webhook_seconds(time.monotonic() - started)
        try:
            for hook, outcome in zip(hooks, posted, strict=True):
                await self._settle(config, message, hook, outcome, domain, kind, attempts + 1)
            await message.ack()
        except (AMQPError, ChannelInvalidStateError, ConnectionError) as exc:
            # A copy not confirmed: the version comes again (receivers that had it see its
            # Idempotency-Key again).
            log.warning("webhooks: a retry copy was not confirmed (%r): the version comes again", exc)
            if not message.channel.is_closed:
                await message.nack(requeue=True)

    async def _settle(
        self,
        config: CrawlConfig,
        message: AbstractIncomingMessage,
        hook: Webhook,
        posted: Posted,
        domain: str,
        kind: str,
        attempts: int,
    ) -> None:
        if posted.delivered:
            self._metrics.observe_webhook(hook.host, "delivered")
            return
        delays = hook.retry_delays or config.defaults.retry_delays
        delay = None
        if posted.transient:
            delay = next_delay(
                delays, attempts, config.retry_tiers, posted.retry_after, config.max_retry_after
            )
        headers: dict[str, Any] = {
            hdr.HEADER_WEBHOOK: hook.key,
            hdr.HEADER_DOMAIN: domain,
            hdr.HEADER_ATTEMPTS: attempts,
            hdr.HEADER_ERROR: f"webhook {hook.host}: {posted.error}"[:1000],
            hdr.HEADER_STATUS: posted.status or 0,
        }
        if delay is not None:
            headers[hdr.HEADER_RETRY_TIER] = delay_label(delay.tier)
            copy = persistent(message.body, 0, headers)
            copy.expiration = delay.seconds
            exchange, outcome = self._retry, "retried"
        else:
            headers |= {
                hdr.HEADER_REASON: "webhook",
                hdr.HEADER_CONSUMER: self._label,
                hdr.HEADER_TIME: datetime.now(UTC).isoformat(timespec="seconds"),
            }
            copy = persistent(message.body, 0, headers)
            exchange, outcome = self._dead, "dead"
            log.warning("webhooks: %s set aside after %d tries: %s", hook.host, attempts, posted.error)
        copy.message_id = message.message_id
        copy.type = kind
        await exchange.publish(copy, routing_key=WEBHOOK_KEY)  # returns once confirmed
        self._metrics.observe_webhook(hook.host, outcome)

    async def drain(self) -> None:
        """Cancel the deliveries under way: their versions go back to the queue unacked."""
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


@asynccontextmanager
async def delivering(
    config: Callable[[], CrawlConfig],
    names: Names,
    connection: AbstractRobustConnection,
    metrics: Metrics,
    label: str,
    prefetch: int = PREFETCH,
    publishing: AbstractRobustConnection | None = None,
) -> AsyncIterator[Deliverer]:
    """Consume the webhooks queue (declared with the topology) until the block ends; retry and dead
    copies go out on `publishing` (a worker's publishing connection: a throttled publisher never
    holds up the deliveries and acks of `connection`)."""
    async with AsyncExitStack() as stack:
        poster = Poster(config())
        stack.push_async_callback(poster.aclose)
        channel = await connection.channel()
        stack.push_async_callback(channel.close)
        await declare(channel, topology(config(), names))  # the queue and its bindings, idempotently
        await channel.set_qos(prefetch_count=prefetch)
        out = await (publishing or connection).channel(publisher_confirms=True)
        stack.push_async_callback(out.close)
        retry = await out.get_exchange(names.retry, ensure=False)
        dead = await out.get_exchange(names.dead, ensure=False)
        deliverer = Deliverer(config, names, poster, retry, dead, metrics, label)
        stack.push_async_callback(deliverer.drain)
        queue = await channel.get_queue(names.webhooks, ensure=False)
        tag = await queue.consume(deliverer.on_message)
        stack.push_async_callback(queue.cancel, tag)
        yield deliverer
