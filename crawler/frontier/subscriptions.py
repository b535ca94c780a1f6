"""A consumer's subscriptions: a channel per domain queue, spread over as many connections as needed."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from aio_pika.abc import AbstractChannel, AbstractIncomingMessage, AbstractQueue, AbstractRobustConnection

from crawler.config import FrontierConfig
from crawler.errors import CrawlerError
from crawler.frontier.concurrency import at_once
from crawler.frontier.exchanges import domain_queues
from crawler.hosts.shown import shown
from crawler.names import LOG_FIELDS, Names
from crawler.redact import redact

log = logging.getLogger(__name__)

# A resumed domain's held channel closes this long after: its deliveries' acks are long done by then
# (a page's fetch is capped by its timeout, at most 600 s, and it was held before the resume).
RETIRE_AFTER = 900.0

Handler = Callable[[str, AbstractIncomingMessage], Awaitable[None]]
"""What handles one delivery of a domain's queue."""


class SubscriptionPacing(Protocol):
    """How many round trips at once, and domain channels per connection (a consumer's Tuning has these)."""

    @property
    def at_once(self) -> int: ...
    @property
    def channels_per_connection(self) -> int: ...
    @property
    def channels_kept_free(self) -> int: ...


@dataclass(slots=True)
class _Subscription:
    domain: str
    connection: AbstractRobustConnection
    channel: AbstractChannel
    queues: Sequence[tuple[AbstractQueue, str]]  # the domain's queues (a quorum frontier's two bands), tags
    callback: Callable[[AbstractIncomingMessage], Awaitable[None]]
    held: bool = False  # its consumers are cancelled (the domain is paused); the channel stays open

    async def cancel(self) -> None:
        """Cancel its consumers; what they were delivered stays."""
        for queue, tag in self.queues:
            with contextlib.suppress(Exception):
                await queue.cancel(tag)

    async def consume(self) -> None:
        """Start (or restart) its consumers."""
        for queue, tag in self.queues:
            await queue.consume(self.callback, consumer_tag=tag)


class Subscriptions:
    """Subscribes domain queues, sets their prefetch, and cancels and closes them again."""

    def __init__(
        self,
        names: Names,
        frontier: FrontierConfig,
        connection: AbstractRobustConnection,
        connect: Callable[[], Awaitable[AbstractRobustConnection]] | None,
        handler: Handler,
        prefetch_of: Callable[[str], int],
        *,
        label: str,
        tuning: SubscriptionPacing,
    ) -> None:
        self._names = names
        self._frontier = frontier
        # Domain channels beyond what `connection` takes go on connections `connect` opens (and
        # closes, when its caller is done): without it, that many domains are an error.
        self._connections = [connection]
        self._connect = connect
        self._handler = handler
        self._prefetch_of = prefetch_of
        self._label = label
        self._tuning = tuning
        self._subs: list[_Subscription] = []
        self._retired: dict[asyncio.Future[None], AbstractChannel] = {}  # held channels closing later
        # Work waits until the first queues are all subscribed: their pages would otherwise hold up
        # the other subscriptions (each round trip waits its turn in a busy loop).
        self._ready = asyncio.Event()

    async def add(self, domains: Sequence[str], declared_in: float = 0.0) -> None:
        """Consume `domains`' queues, opening connections as their channels need."""
        started = time.monotonic()
        connections = await self._channel_slots(len(domains))
        await at_once(self._subscribe, zip(domains, connections, strict=True), self._tuning.at_once)
        self._ready.set()
        seconds = time.monotonic() - started
        prefetch = max((self._prefetch_of(d) for d in domains), default=0)
        url = getattr(self._connections[0], "url", None)  # aio-pika's connections have it; the ABC not
        broker = str(url.with_query(None)) if url is not None else "RabbitMQ"
        log.info(
            "consuming %s on %d connection(s), prefetch up to %d per queue: subscribed in %.2fs (%s)",
            shown(domains) if len(domains) <= 10 else f"{shown(domains)} ({len(domains)} domain queues)",
            len({id(s.connection) for s in self._subs}),
            prefetch,
            seconds,
            redact(broker),
            extra={
                LOG_FIELDS: {
                    "queues": len(domains),
                    "prefetch": prefetch,
                    "subscribed_seconds": round(seconds, 3),
                    "declared_seconds": round(declared_in, 3),
                }
            },
        )

    async def refresh_prefetch(self, domains: Sequence[str]) -> None:
        """Set each subscribed queue of `domains` to its prefetch as configured now."""
        wanted = set(domains)

        async def set_qos(sub: _Subscription) -> None:
            await sub.channel.set_qos(prefetch_count=self._prefetch_of(sub.domain))

        await at_once(set_qos, [s for s in self._subs if s.domain in wanted], self._tuning.at_once)

    def subscribed(self, domain: str) -> bool:
        """Whether `domain`'s queue has a subscription here (held or not)."""
        return any(s.domain == domain for s in self._subs)

    async def hold(self, domain: str) -> None:
        """Stop new deliveries of one domain's queue; what was delivered finishes and is acked."""
        for sub in self._subs:
            if sub.domain == domain and not sub.held:
                sub.held = True
                await sub.cancel()

    async def release(self, domain: str) -> None:
        """Take deliveries of a held domain's queue again (subscribe it, if it never was)."""
        if not self.subscribed(domain):
            await self.add([domain])
            return
        # On a channel of its own: the queue may have been made again as another type meanwhile
        # (`crawler frontier migrate`), and RabbitMQ 3.10 fails a channel that consumes a queue of
        # one type, then one of another under the same name. The held channel carries the acks of
        # what it delivered until they are surely done, then closes.
        for sub in [s for s in self._subs if s.domain == domain and s.held]:
            self._subs.remove(sub)
            await self._subscribe((domain, sub.connection), declare=False)
            self._retire(sub.channel)

    def _retire(self, channel: AbstractChannel) -> None:
        async def later() -> None:
            await asyncio.sleep(RETIRE_AFTER)
            with contextlib.suppress(Exception):
                await channel.close()

        task = asyncio.ensure_future(later())
        self._retired[task] = channel
        task.add_done_callback(lambda t: self._retired.pop(t, None))

    async def cancel(self) -> None:
        """Stop new deliveries; what is delivered stays until `close`."""

        await at_once(_Subscription.cancel, self._subs, self._tuning.at_once)

    async def close(self) -> None:
        """Close every channel: anything delivered but not acked returns to its queue."""

        async def close(sub: _Subscription) -> None:
            with contextlib.suppress(Exception):
                await sub.channel.close()

        await at_once(close, self._subs, self._tuning.at_once)
        self._subs.clear()
        for task, channel in list(self._retired.items()):
            task.cancel()
            with contextlib.suppress(Exception):
                await channel.close()
        self._retired.clear()

    async def _subscribe(self, where: tuple[str, AbstractRobustConnection], declare: bool = True) -> None:
        domain, connection = where
        # A channel per queue: prefetch is really per queue, and one queue's error stays there.
        channel = await connection.channel(publisher_confirms=False)
        await channel.set_qos(prefetch_count=self._prefetch_of(domain))
        # Declared as configured when first subscribed (an error, if the broker's differs), then
        # looked up by name, as the robust channel does after a reconnect and a resume does: a
        # queue `crawler frontier migrate` re-made as another type meanwhile is consumed on. Each
        # consumer of the channel has the prefetch: a quorum frontier's first band adds its own
        # (quorum queues refuse a prefetch shared by the channel), and is subscribed first, so it
        # gets its prefetch of seeds before the domain's queue fills the worker with links.
        queues = []
        for band, spec in reversed(list(enumerate(domain_queues(self._names, domain, self._frontier)))):
            if declare:
                args = dict(spec.arguments)
                await channel.declare_queue(spec.name, durable=True, arguments=args, robust=False)
            queue = await channel.declare_queue(spec.name, passive=True)
            tag = f"{self._label} {domain}" + (" first" if band else "")
            queues.append((queue, tag.replace(" ", ".")))

        async def callback(message: AbstractIncomingMessage) -> None:
            await self._ready.wait()
            await self._handler(domain, message)

        sub = _Subscription(domain, connection, channel, queues, callback)
        await sub.consume()
        self._subs.append(sub)

    def _room(self, connection: AbstractRobustConnection) -> int:
        """How many more domain channels `connection` may carry."""
        transport = connection.transport
        negotiated = transport.connection.connection_tune.channel_max if transport is not None else 0
        most = min(
            self._tuning.channels_per_connection, (negotiated or 65535) - self._tuning.channels_kept_free
        )
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
