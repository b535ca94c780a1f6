"""Deliveries ended in groups: their links' dedup confirms and their crawl counts written together,
then one ack per channel for every delivery finished so far (`multiple`).

A delivery comes here only once its row is committed and its links are confirmed by the broker, so
acking it keeps the rule "ack after commit and confirm". A `multiple` ack covers every delivery tag
up to its own on its channel, so it is sent only up to the first delivery still in flight there: a
delivery still being worked on, or one settled otherwise (nacked, rejected), is never covered.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from aio_pika.abc import AbstractIncomingMessage

from crawler.dedup.store import SeenStore
from crawler.frontier.crawls import CrawlState

log = logging.getLogger(__name__)

Counts = Mapping[tuple[str, str], int]
"""Changes to a crawl's counts, keyed (domain, kind)."""


@dataclass(slots=True)
class _Ending:
    message: AbstractIncomingMessage
    crawl: str | None
    counts: Counts
    confirms: Sequence[bytes]
    done: asyncio.Future[None] = field(default_factory=lambda: asyncio.get_running_loop().create_future())


@dataclass(slots=True)
class _Channel:
    """A channel's deliveries in the order they came, and which of them are finished."""

    delivered: deque[AbstractIncomingMessage] = field(default_factory=deque)
    finished: set[int] = field(default_factory=set)  # delivery tags: to ack here, or settled otherwise
    upto: int = 0  # every delivery up to this tag is acked or settled (tags grow per channel)


class Settling:
    """Ends a consumer's deliveries: confirms and counts per group, then `multiple` acks per channel."""

    def __init__(self, seen: SeenStore, crawls: CrawlState | None) -> None:
        self._seen = seen
        self._crawls = crawls  # None: counts are not kept (tests)
        self._channels: dict[Any, _Channel] = {}
        self._queue: list[_Ending] = []
        self._flusher: asyncio.Task[None] | None = None

    def delivered(self, message: AbstractIncomingMessage) -> None:
        """Note a delivery, in the order they arrive: acks never pass one not yet finished."""
        channel = _channel_of(message)
        if channel is None:
            return
        state = self._channels.get(channel)
        if state is None:
            # A reconnect replaces channels: forget the closed ones (their deliveries come again).
            for old in [c for c in self._channels if c.is_closed]:
                del self._channels[old]
            state = self._channels[channel] = _Channel()
        state.delivered.append(message)

    async def ack(
        self,
        message: AbstractIncomingMessage,
        crawl: str | None = None,
        counts: Counts | None = None,
        confirms: Sequence[bytes] = (),
    ) -> None:
        """Confirm `confirms` in `crawl`'s dedup store, add `counts` to its counts, then ack the message.

        Returns once that is done for its group; raises if the confirms or counts failed (then the
        message is not acked). The ack itself may wait for earlier deliveries of its channel.
        """
        ending = _Ending(message, crawl, counts or {}, confirms)
        self._queue.append(ending)
        if self._flusher is None:
            self._flusher = asyncio.create_task(self._flush())
        await asyncio.shield(ending.done)

    async def finished(self, message: AbstractIncomingMessage) -> None:
        """A delivery is over: if it was settled otherwise (nacked), later ones may now be acked.

        One that was neither acked nor settled goes back to its queue, or no ack could pass it.
        """
        channel = _channel_of(message)
        state = self._channels.get(channel) if channel is not None else None
        tag = message.delivery_tag
        if state is None or tag is None or tag <= state.upto or tag in state.finished:
            return
        if not message.processed:
            try:
                await message.nack(requeue=True)
            except Exception as exc:  # the channel is gone: the broker returns it all the same
                log.debug("nack of an unfinished delivery failed (%r)", exc)
        state.finished.add(tag)
        await self._ack_finished(channel, state)

    async def _flush(self) -> None:
        try:
            while self._queue:
                await asyncio.sleep(0)  # deliveries ending in the same loop turn join this group
                group, self._queue = self._queue, []
                await self._settle(group)
        finally:
            self._flusher = None

    async def _settle(self, group: list[_Ending]) -> None:
        try:
            await self._write(group)
        except Exception as exc:
            for ending in group:
                if not ending.done.done():
                    ending.done.set_exception(exc)
            return
        touched = {}
        for ending in group:
            message = ending.message
            channel = _channel_of(message)
            state = self._channels.get(channel) if channel is not None else None
            if state is not None and message.delivery_tag is not None and message.delivery_tag > state.upto:
                state.finished.add(message.delivery_tag)
                touched[channel] = state
            else:  # not noted as delivered (or its channel closed): on its own
                await _ack_one(message)
        for channel, state in touched.items():
            await self._ack_finished(channel, state)
        for ending in group:
            if not ending.done.done():
                ending.done.set_result(None)

    async def _write(self, group: list[_Ending]) -> None:
        """The group's dedup confirms and crawl counts, one call per crawl for each, at once."""
        confirms: dict[str | None, list[bytes]] = {}
        counts: dict[str, dict[tuple[str, str], int]] = {}
        for ending in group:
            if ending.confirms:
                confirms.setdefault(ending.crawl, []).extend(ending.confirms)
            if ending.crawl is not None and ending.counts and self._crawls is not None:
                summed = counts.setdefault(ending.crawl, {})
                for key, n in ending.counts.items():
                    summed[key] = summed.get(key, 0) + n
        calls = [self._seen.for_crawl(crawl).confirm(fps) for crawl, fps in confirms.items()]
        if self._crawls is not None:
            calls += [self._crawls.count(crawl, changes) for crawl, changes in counts.items()]
        if len(calls) == 1:
            await calls[0]
        elif calls:
            await asyncio.gather(*calls)

    async def _ack_finished(self, channel: Any, state: _Channel) -> None:
        """Ack, with one `multiple` ack, the finished deliveries before the first unfinished one."""
        last: AbstractIncomingMessage | None = None
        while state.delivered and state.delivered[0].delivery_tag in state.finished:
            message = state.delivered.popleft()
            state.finished.discard(message.delivery_tag)
            state.upto = message.delivery_tag or state.upto
            if not message.processed:
                last = message
        if last is None:
            return
        try:
            await last.ack(multiple=True)
        except Exception as exc:  # the channel closed: the broker delivers these again
            log.debug("ack failed (%r); the broker will deliver those messages again", exc)
            self._channels.pop(channel, None)


async def _ack_one(message: AbstractIncomingMessage) -> None:
    try:
        await message.ack()
    except Exception as exc:  # the channel closed: the broker delivers it again
        log.debug("ack failed (%r); the broker will deliver the message again", exc)


def _channel_of(message: AbstractIncomingMessage) -> Any:
    """The AMQP channel a message came on (delivery tags count per channel); None once it closed."""
    try:
        return message.channel
    except Exception:
        return None
