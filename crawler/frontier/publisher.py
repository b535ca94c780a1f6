"""Persistent, confirmed publishes of many messages at once, written to the broker in one frame run.

aio-pika's `exchange.publish` costs the router more CPU per message than RabbitMQ spends storing it:
a fresh Message, a task-like chain of awaits, the channel lock, a timeout scope, a random message id,
pamqp's generic marshalling and one socket write per message. A page's links are published together,
so this publisher takes the channel lock once per batch, marshals the batch's frames from cached parts
and hands them to aiormq's writer as one write; the broker confirms each message as before.

That fast path uses aiormq's private channel state. A publisher first checks that state has the
shape it expects; if not, it publishes through aio-pika's public `exchange.publish` instead.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import logging
import struct
from collections.abc import Callable, MutableMapping, Sequence
from dataclasses import dataclass, replace

import aiormq
import aiormq.abc
from aio_pika import DeliveryMode, Exchange, Message
from aio_pika.abc import AbstractExchange
from aiormq.exceptions import AMQPError, ChannelInvalidStateError, DeliveryError
from pamqp import commands, frame
from pamqp.constants import FRAME_BODY, FRAME_END_CHAR, FRAME_HEADER

from crawler.errors import CrawlerError
from crawler.frontier.message import persistent

# AMQP 0-9-1 general frame: type, channel, payload size; then the payload and a frame-end octet.
_FRAME = struct.Struct(">BHI")
# A content header frame's payload starts with class id, weight (always 0) and body size.
_HEADER = struct.Struct(">BHIHHQ")
_HEADER_FIXED = 12  # class id, weight, body size
_MAX_CACHED_KEYS = 10_000
MAX_ROUTING_KEY = 255  # bytes: AMQP's short string

log = logging.getLogger(__name__)
_warned: set[str] = set()  # reasons already logged: a fleet of publishers warns once per process


class NotConfirmed(CrawlerError):
    """The channel closed before the broker confirmed a publish."""


@dataclass(frozen=True, slots=True)
class Outgoing:
    """One message to publish: persistent, JSON, at a priority; with an id and a type if given."""

    routing_key: str
    body: bytes
    priority: int
    message_id: str | None = None
    type: str | None = None

    def message(self) -> Message:
        """The aio-pika message, persistent."""
        message = persistent(self.body, self.priority)
        message.message_id, message.type = self.message_id, self.type
        return message


class Publisher:
    """Publishes batches to one exchange on a channel opened with publisher confirms."""

    # Persistent always in the crawler; the bench's what-if measures transient with a subclass.
    delivery_mode = DeliveryMode.PERSISTENT

    def __init__(
        self, exchange: AbstractExchange, *, check: Callable[[object], str | None] | None = None
    ) -> None:
        """`check` says why an aiormq channel cannot take the fast path (default: fast_path_problem)."""
        if not isinstance(exchange, Exchange):
            raise TypeError(f"{exchange!r} is not an aio-pika Exchange")
        self._exchange = exchange
        self._check = check or fast_path_problem
        self._checked: tuple[int, str | None] | None = None  # (id of the aiormq channel, its problem)
        self._methods: dict[tuple[int, str], bytes] = {}
        self._properties: dict[int, bytes] = {}

    async def publish(self, messages: Sequence[Outgoing]) -> list[BaseException | None]:
        """Publish `messages` and wait for the broker's confirms: per message None, or why it failed.

        Raises (nothing was sent) if the channel is closed or was opened without publisher confirms.
        """
        if not messages:
            return []
        # Fresh each time: after a reconnect the robust channel has a new aiormq channel.
        channel = await self._exchange.channel.get_underlay_channel()
        if not self._exchange.channel.publisher_confirms:
            raise CrawlerError(
                f"the channel of exchange {self._exchange.name!r} was opened without publisher "
                "confirms: open it with channel(publisher_confirms=True)"
            )
        if self._problem(channel) is not None:
            return await self._publish_public(messages)
        assert isinstance(channel, aiormq.Channel)  # checked by _problem
        loop = asyncio.get_running_loop()
        confirms = [loop.create_future() for _ in messages]
        closing = channel.closing  # an observer of the close, cancelled below
        try:
            if not await _unblocked(channel, closing):
                _discard(confirms)
                lost = NotConfirmed(f"channel closed while RabbitMQ blocked publishing ({_reason(closing)})")
                return [lost] * len(messages)
            # The lock keeps delivery tags in the order the broker sees the messages, also against
            # aio-pika publishes on the same channel; it raises if the channel is closed.
            async with channel.lock:
                payload = self._frames(channel.number, channel.max_content_size, messages)
                drained = loop.create_future()
                await channel.write_queue.put(
                    aiormq.abc.ChannelFrame(payload=payload, should_close=False, drain_future=drained)
                )
                # Registered once the frames are queued (no await since): the broker numbers
                # messages per channel from 1, and aiormq resolves `confirmations` by that number.
                first = channel.delivery_tag + 1
                channel.delivery_tag += len(messages)
                for tag, future in enumerate(confirms, first):
                    channel.confirmations[tag] = future
                # Written before the lock is let go, as aiormq's own publish does (back-pressure).
                await asyncio.wait((drained, closing), return_when=asyncio.FIRST_COMPLETED)
            every = asyncio.gather(*confirms, return_exceptions=True)
            await asyncio.wait((every, closing), return_when=asyncio.FIRST_COMPLETED)
        except BaseException:
            _discard(confirms)
            raise
        finally:
            closing.cancel()
        if every.done():  # each a Basic.Ack, or the error (a nack) it failed with
            return [r if isinstance(r, BaseException) else None for r in every.result()]
        lost = NotConfirmed(f"channel closed before the broker confirmed ({_reason(closing)})")
        outcomes = [_outcome(f) if f.done() else lost for f in confirms]
        _discard(confirms)
        every.cancel()
        return outcomes

    def _problem(self, channel: object) -> str | None:
        if self._checked is None or self._checked[0] != id(channel):
            problem = self._check(channel)
            self._checked = (id(channel), problem)
            if problem is not None and problem not in _warned:
                _warned.add(problem)
                log.warning(
                    "batch publishing's fast path is off, publishing one message at a time through "
                    "aio-pika instead (slower): %s",
                    problem,
                )
        return self._checked[1]

    async def _publish_public(self, messages: Sequence[Outgoing]) -> list[BaseException | None]:
        if self._exchange.channel.is_closed:  # nothing sent, as the fast path's channel lock refuses
            raise ChannelInvalidStateError(f"the channel of exchange {self._exchange.name!r} is closed")

        async def one(m: Outgoing) -> None:
            message = m.message()
            message.delivery_mode = self.delivery_mode
            # mandatory=False: the frontier's alternate exchange takes whatever no queue binds.
            await self._exchange.publish(message, m.routing_key, mandatory=False)

        results = await asyncio.gather(*(one(m) for m in messages), return_exceptions=True)
        outcomes: list[BaseException | None] = []
        for result in results:
            if result is None or isinstance(result, DeliveryError):  # confirmed, or nacked
                outcomes.append(result)
            elif isinstance(result, AMQPError | ChannelInvalidStateError | ConnectionError):
                # As the fast path reports a publish whose channel closed before its confirm.
                lost = NotConfirmed(f"channel closed before the broker confirmed ({result!r})")
                lost.__cause__ = result
                outcomes.append(lost)
            else:
                raise result
        return outcomes

    def _frames(self, channel: int, max_body: int, messages: Sequence[Outgoing]) -> bytes:
        parts: list[bytes] = []
        for m in messages:
            parts.append(self._method(channel, m.routing_key))
            properties = self._properties.get(m.priority) if m.message_id is None and m.type is None else None
            if properties is None:
                message = replace(m, body=b"").message()
                message.delivery_mode = self.delivery_mode
                properties = message.properties.marshal()
                if m.message_id is None and m.type is None:  # the same for every such message
                    self._properties[m.priority] = properties
            size = len(m.body)
            parts += (
                _HEADER.pack(
                    FRAME_HEADER, channel, _HEADER_FIXED + len(properties), commands.Basic.frame_id, 0, size
                ),
                properties,
                FRAME_END_CHAR,
            )
            for start in range(0, size, max_body):
                chunk = m.body[start : start + max_body]
                parts += (_FRAME.pack(FRAME_BODY, channel, len(chunk)), chunk, FRAME_END_CHAR)
        return b"".join(parts)

    def _method(self, channel: int, routing_key: str) -> bytes:
        key = (channel, routing_key)
        method = self._methods.get(key)
        if method is None:
            if len(self._methods) >= _MAX_CACHED_KEYS:
                self._methods.clear()
            # mandatory=False: the frontier's alternate exchange takes whatever no queue binds.
            publish = commands.Basic.Publish(exchange=self._exchange.name, routing_key=routing_key)
            method = self._methods[key] = frame.marshal(publish, channel)
        return method


def fast_path_problem(channel: object) -> str | None:
    """Why the fast path cannot use this aiormq channel's private state, or None if it can."""
    expected = getattr(aiormq, "Channel", None)
    if not isinstance(expected, type) or not isinstance(channel, expected):
        return f"{type(channel).__name__} is not an aiormq.Channel"
    frame_type = getattr(aiormq.abc, "ChannelFrame", None)
    if not dataclasses.is_dataclass(frame_type):
        return "aiormq.abc.ChannelFrame is gone or no dataclass"
    fields = {f.name for f in dataclasses.fields(frame_type)}
    if fields != {"payload", "should_close", "drain_future"}:
        return f"aiormq.abc.ChannelFrame has fields {sorted(fields)}, not payload, should_close, drain_future"
    if not inspect.iscoroutinefunction(getattr(getattr(channel, "connection", None), "ready", None)):
        return "aiormq.Channel.connection.ready is no coroutine function"
    # Properties read from the class: reading them on the channel would create an observer or a lock.
    for name in ("lock", "closing"):
        if not isinstance(inspect.getattr_static(type(channel), name, None), property):
            return f"aiormq.Channel.{name} is no property"
    attributes: tuple[tuple[str, type], ...] = (
        ("write_queue", asyncio.Queue),
        ("confirmations", MutableMapping),
        ("delivery_tag", int),
        ("number", int),
        ("max_content_size", int),
    )
    for name, kind in attributes:
        value = getattr(channel, name, None)
        if not isinstance(value, kind) or isinstance(value, bool):
            return f"aiormq.Channel.{name} is {type(value).__name__}, not {kind.__name__}"
    return None


async def _unblocked(channel: aiormq.Channel, closing: asyncio.Future[object]) -> bool:
    """Wait while RabbitMQ blocks the channel's connection (a resource alarm); False if it closes first.

    A blocked connection is not read: a batch written meanwhile would sit in the socket, and if the
    consumer stopped, the broker would still take it once the alarm cleared, after its links were
    released for their pages to route again (each would be crawled twice). Held here, it is not sent.
    """
    ready = asyncio.ensure_future(channel.connection.ready())
    try:
        await asyncio.wait((ready, closing), return_when=asyncio.FIRST_COMPLETED)
    finally:
        ready.cancel()
    return ready.done() and not ready.cancelled() and ready.exception() is None


def _outcome(future: asyncio.Future[object]) -> BaseException | None:
    if future.cancelled():
        return asyncio.CancelledError()
    return future.exception()


def _reason(closing: asyncio.Future[object]) -> str:
    if closing.done() and not closing.cancelled() and closing.exception() is not None:
        return repr(closing.exception())
    return "closed"


def _discard(confirms: Sequence[asyncio.Future[object]]) -> None:
    # Nobody waits for these any more; a late nack must not log "exception never retrieved".
    for future in confirms:
        if future.done():
            if not future.cancelled():
                future.exception()
        else:
            future.cancel()
