"""Deliveries ended in groups: their links' dedup confirms and their crawl counts written together,
then each delivery acked at once, whatever else is in flight on its channel.

A delivery comes here only once its row is committed and its links are confirmed by the broker, so
acking it keeps the rule "ack after commit and confirm". A `multiple` ack covers every outstanding tag
up to its own, whoever holds it, so one is sent only for a run of tags this worker saw and settled,
contiguous from the lowest tag not yet settled; every other delivery is acked alone, so no ack waits
behind a slow fetch, a rate wait or a paused domain. A tag counts as settled once its own ack or nack
is queued on the connection (which writes frames in order). A tag skipped in the delivery order (a
delivery the client library dropped before the worker saw it) is never covered: it is returned to its
queue instead.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from aio_pika.abc import AbstractIncomingMessage

from crawler.dedup.store import SeenStore
from crawler.frontier.crawls import CrawlState
from crawler.frontier.tracing import step

log = logging.getLogger(__name__)

Counts = Mapping[tuple[str, str], int]
"""Changes to a crawl's counts, keyed (domain, kind)."""

AckAfter = Literal["commit", "retry"]
"""What an ack delay runs from: the page's row committed, or its retry copy confirmed by the broker."""


class AckObserver(Protocol):
    """What takes the ack frames sent and each ack's delay (the worker's Metrics)."""

    def observe_ack_frames(self, single: int, multiple: int) -> None: ...
    def observe_ack_delay(self, after: AckAfter, seconds: float) -> None: ...


@dataclass(frozen=True, slots=True)
class Done:
    """When a delivery's work was done, for the ack delay: its row committed, or its retry copy confirmed."""

    after: AckAfter
    at: float  # time.monotonic()


@dataclass(slots=True)
class _Ending:
    message: AbstractIncomingMessage
    crawl: str | None
    counts: Counts
    confirms: Sequence[bytes]
    done_at: Done | None
    done: asyncio.Future[None] = field(default_factory=lambda: asyncio.get_running_loop().create_future())


@dataclass(slots=True)
class _Channel:
    """A channel's deliveries by tag (tags count from 1 on each channel): those not yet acked or settled
    otherwise, in delivery order, and how far every tag was seen and settled."""

    open: dict[int, None] = field(default_factory=dict)
    floor: int = 0  # every tag up to this one was seen (or returned as skipped) and settled
    settled: set[int] = field(default_factory=set)  # settled tags above `floor`
    last: int = 0  # the highest tag seen

    def settle(self, tags: Iterable[int]) -> None:
        """Note `tags` as settled (their ack or nack is queued) and raise the floor past them."""
        for tag in tags:
            self.open.pop(tag, None)
            if tag > self.floor:
                self.settled.add(tag)
        while self.floor + 1 in self.settled:
            self.floor += 1
            self.settled.discard(self.floor)

    def run(self, acking: set[int]) -> int | None:
        """The highest tag a `multiple` ack of `acking` may name: every tag from the floor up to it
        settled or being acked now, each of them seen. None if the lowest unsettled tag is not acked now."""
        covered = None
        tag = self.floor + 1
        while True:
            if tag in self.settled:
                tag += 1
            elif tag in acking and tag in self.open:
                covered = tag
                tag += 1
            else:
                return covered


class Settling:
    """Ends a consumer's deliveries: confirms and counts per group, then each one's ack at once."""

    def __init__(
        self, seen: SeenStore, crawls: CrawlState | None, metrics: AckObserver | None = None
    ) -> None:
        self._seen = seen
        self._crawls = crawls  # None: counts are not kept (tests)
        self._metrics = metrics  # None: ack delays are not observed (tests)
        self._channels: dict[Any, _Channel] = {}
        self._queue: list[_Ending] = []
        self._flusher: asyncio.Task[None] | None = None
        self._returning: set[asyncio.Task[None]] = set()

    def delivered(self, message: AbstractIncomingMessage) -> None:
        """Note a delivery, in the order they arrive: a `multiple` ack never covers one still open."""
        channel = _channel_of(message)
        if channel is None or message.delivery_tag is None:
            return
        state = self._channels.get(channel)
        if state is None:
            # A reconnect replaces channels: forget the closed ones (their deliveries come again).
            for old in [c for c in self._channels if c.is_closed]:
                del self._channels[old]
            state = self._channels[channel] = _Channel()
        tag = message.delivery_tag
        if tag > state.last + 1:
            skipped = range(state.last + 1, tag)
            task = asyncio.ensure_future(self._return_skipped(channel, state, skipped))
            self._returning.add(task)
            task.add_done_callback(self._returning.discard)
        state.last = max(state.last, tag)
        state.open[tag] = None

    async def _return_skipped(self, channel: Any, state: _Channel, tags: range) -> None:
        """Return deliveries the worker never saw: the broker counts them as this channel's, unacked."""
        # Deliveries reach `delivered` in tag order, so a tag jumped over never comes: the client
        # library dropped it (aiormq does, silently, for a consumer tag it does not know).
        log.warning(
            "deliveries %d-%d on a channel never reached the worker: returned to their queue",
            tags[0],
            tags[-1],
        )
        try:
            for tag in tags:
                await channel.basic_nack(tag, requeue=True, wait=False)
        except Exception as exc:  # the channel closed: the broker has them back anyway
            log.debug("return of skipped deliveries failed (%r)", exc)
            return
        state.settle(tags)

    async def ack(
        self,
        message: AbstractIncomingMessage,
        crawl: str | None = None,
        counts: Counts | None = None,
        confirms: Sequence[bytes] = (),
        done_at: Done | None = None,
    ) -> None:
        """Confirm `confirms` in `crawl`'s dedup store, add `counts` to its counts, then ack the message.

        Returns once that is done for its group; raises if the confirms or counts failed (then the
        message is not acked). `done_at` says when its work was done, for the ack delay's metric.
        """
        ending = _Ending(message, crawl, counts or {}, confirms, done_at)
        self._queue.append(ending)
        if self._flusher is None:
            self._flusher = asyncio.create_task(self._flush())
        await asyncio.shield(ending.done)

    async def finished(self, message: AbstractIncomingMessage) -> None:
        """A delivery is over. One that was neither acked nor settled goes back to its queue."""
        channel = _channel_of(message)
        state = self._channels.get(channel) if channel is not None else None
        tag = message.delivery_tag
        if state is None or tag is None or tag not in state.open:
            return
        if not message.processed:
            step("returned (unfinished)", message)
            try:
                await message.nack(requeue=True)
            except Exception as exc:  # the channel is gone: the broker returns it all the same
                log.debug("nack of an unfinished delivery failed (%r)", exc)
                state.open.pop(tag, None)
                return
        # Only now: until its ack or nack is queued, no `multiple` ack may cover it.
        state.settle((tag,))

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
        by_channel: dict[Any, list[int]] = {}
        for ending in group:
            channel = _channel_of(ending.message)
            state = self._channels.get(channel) if channel is not None else None
            tag = ending.message.delivery_tag
            if state is not None and tag is not None and tag in state.open:
                by_channel.setdefault(channel, []).append(tag)
            else:  # not noted as delivered (or its channel closed): on its own
                await _ack_one(ending.message)
                if self._metrics is not None:
                    self._metrics.observe_ack_frames(1, 0)
        for channel, tags in by_channel.items():
            await self._ack_channel(channel, self._channels[channel], tags)
        self._observe(group)
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
        calls: list[Awaitable[object]] = [
            self._seen.for_crawl(crawl).confirm(fps) for crawl, fps in confirms.items()
        ]
        if self._crawls is not None:
            calls += [self._crawls.count(crawl, changes) for crawl, changes in counts.items()]
        if len(calls) == 1:
            await calls[0]
        elif calls:
            await asyncio.gather(*calls)

    async def _ack_channel(self, channel: Any, state: _Channel, tags: list[int]) -> None:
        """Ack one channel's part of a group: one `multiple` ack for a run of them that every tag below
        is settled under, a single ack for each of the others."""
        covered = state.run(set(tags))
        acks = [(tag, False) for tag in tags if covered is None or tag > covered]
        if covered is not None:
            acks.insert(0, (covered, True))
        try:
            # The connection writes frames in the order they are queued, so a later `multiple` ack
            # or nack can never pass these; waiting for the last one's write paces the groups: what
            # ends meanwhile joins the next group, and shares its Redis write.
            for i, (tag, multiple) in enumerate(acks, 1):
                await channel.basic_ack(tag, multiple=multiple, wait=i == len(acks))
        except Exception as exc:  # the channel closed: the broker delivers these again
            log.debug("ack failed (%r); the broker will deliver those messages again", exc)
            self._channels.pop(channel, None)
            return
        if self._metrics is not None:
            multiples = sum(1 for _, m in acks if m)
            self._metrics.observe_ack_frames(len(acks) - multiples, multiples)
        state.settle(tags)

    def _observe(self, group: list[_Ending]) -> None:
        if self._metrics is None:
            return
        now = time.monotonic()
        for ending in group:
            if ending.done_at is not None:
                self._metrics.observe_ack_delay(ending.done_at.after, now - ending.done_at.at)


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
