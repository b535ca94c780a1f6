"""Re-making the frontier's queues as another type or mode (classic to quorum, to lazy), moving their
messages with confirms.

Queue by queue: new publishes are bound to a holding queue, the old queue's messages are moved there
(each acked only once its copy is confirmed), the queue is made again as configured, and the holding
queue's messages are moved into it by their original routing keys. A domain is paused meanwhile, so
no worker holds a delivery of a queue being deleted. A message may be delivered twice (bound to both
queues for an instant), never lost; a migration cut short resumes where it stopped when run again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import aio_pika
from aio_pika.abc import AbstractExchange, AbstractIncomingMessage, AbstractQueue, AbstractRobustChannel

from crawler.config import CrawlConfig, FrontierConfig
from crawler.errors import CrawlerError
from crawler.frontier.exchanges import (
    Binding,
    Queue,
    backlog,
    domain_queues,
    host_queues,
    kept_queue,
    queue_mode,
    topology,
)
from crawler.names import Names

log = logging.getLogger(__name__)

BATCH = 500  # messages moved per round of confirms
SETTLE_WITHIN = 600.0  # seconds a paused domain's deliveries may take to be acked before giving up
POLL = 0.5
TOPIC = aio_pika.ExchangeType.TOPIC


@dataclass(frozen=True, slots=True)
class QueueInfo:
    """What the broker says of one queue: its type, its mode and its deliveries not yet acked."""

    type: str
    unacked: int
    consumers: int
    mode: str = "default"


Inspect = Callable[[str], Awaitable[QueueInfo | None]]
"""The broker's view of a queue by name; None if there is no such queue."""


class MigrationFailed(CrawlerError):
    """A queue could not be re-made; its messages are where the message says, nothing is lost."""


@dataclass(slots=True)
class Moved:
    """What a migration did: messages moved per queue re-made."""

    queues: dict[str, int] = field(default_factory=dict)
    unchanged: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Group:
    """Queues re-made together: a domain's bands, or one shared queue; `domain` is paused meanwhile."""

    wanted: tuple[Queue, ...]
    old: tuple[str, ...]  # names that may hold its messages now (a band the new type drops included)
    domain: str | None = None

    @property
    def holding(self) -> str:
        """The queue its messages wait in while it is re-made."""
        return f"{self.wanted[0].name}.migrating"


def groups(config: CrawlConfig, names: Names, domains: Sequence[str] | None = None) -> list[Group]:
    """What `config`'s frontier is made of, in the order it is re-made: shared queues, then domains."""
    declared = {q.name: q for q in topology(config, names).queues}
    shared = [names.dead, names.unrouted, *(names.retry_queue(d) for d in config.retry_tiers)]
    # The webhooks' queue and the host layout's shards are consumed by every worker: re-made only
    # while none runs.
    if config.webhooks:
        shared.append(names.webhooks)
    shared += [q.name for q in host_queues(config, names)]
    out = [Group((declared[name],), (name,)) for name in shared]
    for d in sorted(config.domains) if domains is None else domains:
        wanted = domain_queues(names, d, config.frontier)
        out.append(Group(wanted, (names.domain_queue(d), names.first_band(d)), d))
    return out


def _type(queue: Queue) -> str:
    return str(queue.arguments.get("x-queue-type", "classic"))


class Migration:
    """Re-makes the queues whose type or mode differs from the configuration's."""

    def __init__(
        self,
        open_channel: Callable[[], Awaitable[AbstractRobustChannel]],
        frontier: FrontierConfig,
        inspect: Inspect,
        pause: Callable[[str], Awaitable[None]],
        resume: Callable[[str], Awaitable[None]],
    ) -> None:
        self._open = open_channel  # with publisher confirms, returns raising
        self._frontier = frontier
        self._inspect = inspect
        self._pause = pause
        self._resume = resume

    async def run(self, plan: Sequence[Group]) -> Moved:
        """Re-make every group that needs it, one after another."""
        moved = Moved()
        for group in plan:
            found = {name: await self._inspect(name) for name in (*group.old, group.holding)}
            if not self._needed(group, found):
                moved.unchanged += [q.name for q in group.wanted]
                continue
            if group.domain is not None:
                await self._pause(group.domain)
            try:
                moved.queues[group.wanted[0].name] = await self._remake(group, found)
            finally:
                if group.domain is not None:
                    await self._resume(group.domain)
        return moved

    @staticmethod
    def _needed(group: Group, found: dict[str, QueueInfo | None]) -> bool:
        if found[group.holding] is not None:
            return True  # an earlier run stopped half-way
        wanted = {q.name: (_type(q), queue_mode(q.arguments)) for q in group.wanted}
        for name in group.old:
            info = found[name]
            if (info is None) != (name not in wanted):
                return True
            if info is not None and (info.type, info.mode) != wanted[name]:
                return True
        return False

    async def _remake(self, group: Group, found: dict[str, QueueInfo | None]) -> int:
        present = [name for name in group.old if found[name] is not None]
        bindings = _bindings(group)
        await self._settled(present, group.domain)
        # The holding queue takes what is published from now on, and the old queues' messages. Each
        # phase has a channel of its own: RabbitMQ 3.10 fails a channel that publishes to a queue it
        # read from under the same name as another type.
        async with self._opened() as ch:
            if found[group.holding] is None:
                # A whole queue's messages wait here: on disk, as the open web's backlog does.
                kept = dict(kept_queue(group.holding, self._frontier, Binding("")).arguments)
                args = backlog(self._frontier, kept)
                holding = await ch.declare_queue(group.holding, durable=True, arguments=args, robust=False)
            else:  # an earlier run's, as it made it
                holding = await ch.declare_queue(group.holding, passive=True, robust=False)
            inbound = await ch.declare_exchange(f"{group.holding}.in", TOPIC, durable=True, robust=False)
            await holding.bind(inbound, "#")
            for b in bindings:
                await holding.bind(b.exchange, b.routing_key, arguments=dict(b.arguments))
            moved = 0
            for name in present:
                old = await ch.declare_queue(name, passive=True, robust=False)
                for b in bindings:
                    await old.unbind(b.exchange, b.routing_key, arguments=dict(b.arguments))
                moved += await _emptied(ch, old, inbound)
            await inbound.delete()
        # Made again as configured, bound, then filled from the holding queue by routing key.
        async with self._opened() as ch:
            outbound = await ch.declare_exchange(f"{group.holding}.out", TOPIC, durable=True, robust=False)
            for spec in group.wanted:
                args = dict(spec.arguments)
                queue = await ch.declare_queue(spec.name, durable=True, arguments=args, robust=False)
                for b in spec.bindings:
                    await queue.bind(b.exchange, b.routing_key, arguments=dict(b.arguments))
                    await queue.bind(outbound, b.routing_key or "#")
            holding = await ch.declare_queue(group.holding, passive=True, robust=False)
            for b in bindings:
                await holding.unbind(b.exchange, b.routing_key, arguments=dict(b.arguments))
            await _emptied(ch, holding, outbound)
            await outbound.delete()
        made = ", ".join(q.name for q in group.wanted)
        how = _type(group.wanted[0]) + (" (lazy)" if queue_mode(group.wanted[0].arguments) == "lazy" else "")
        log.info("re-made %s as %s: %d message(s) moved", made, how, moved)
        return moved

    @asynccontextmanager
    async def _opened(self) -> AsyncIterator[AbstractRobustChannel]:
        channel = await self._open()
        try:
            yield channel
        finally:
            await channel.close()

    async def _settled(self, names: Sequence[str], domain: str | None) -> None:
        """Wait until no consumer holds a delivery of `names` (their `domain` is paused; a queue of
        no domain waits for its workers to stop)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + SETTLE_WITHIN
        next_word = loop.time() + 5
        why = (
            "its domain is paused: is a worker stuck?"
            if domain is not None
            else "every worker consumes it: stop them first (SIGTERM, or scale to 0)."
        )
        while True:
            infos = [await self._inspect(n) for n in names]
            busy = [(n, i) for n, i in zip(names, infos, strict=True) if i and (i.consumers or i.unacked)]
            if not busy:
                return
            name, info = busy[0]
            if loop.time() >= next_word:
                next_word = loop.time() + 10
                log.info("waiting for %s: %s; %s", ", ".join(n for n, _ in busy), info, why)
            if loop.time() > deadline:
                raise MigrationFailed(
                    f"queue {name} still has {info.consumers} consumer(s) and {info.unacked} delivery(ies) "
                    f"not acked after {SETTLE_WITHIN:g}s and {why} Nothing was moved from it; run the "
                    "migration again"
                )
            await asyncio.sleep(POLL)


def _bindings(group: Group) -> list[Binding]:
    """Every binding that feeds the group's queues, whichever type they are now."""
    seen: dict[tuple[str, str], Binding] = {}
    for spec in group.wanted:
        for b in spec.bindings:
            seen.setdefault((b.exchange, b.routing_key), b)
    return list(seen.values())


async def _emptied(channel: AbstractRobustChannel, source: AbstractQueue, target: AbstractExchange) -> int:
    """Move `source`'s messages into `target`, then delete it once a fresh look finds it empty (quorum
    queues refuse a delete `if_empty`; nothing feeds it any more). How many moved."""
    moved = 0
    while True:
        moved += await move(channel, source, target)
        looked = await channel.declare_queue(source.name, passive=True, robust=False)
        if not looked.declaration_result.message_count:
            await source.delete(if_unused=False, if_empty=False)
            return moved


async def move(channel: AbstractRobustChannel, source: AbstractQueue, target: AbstractExchange) -> int:
    """Move every ready message of `source` into `target` by its routing key; each is acked only once
    its copy is confirmed. How many moved."""
    moved = 0
    while True:
        batch: list[AbstractIncomingMessage] = []
        while len(batch) < BATCH:
            message = await source.get(no_ack=False, fail=False)
            if message is None:
                break
            batch.append(message)
        if not batch:
            return moved
        try:
            await asyncio.gather(
                *(target.publish(_copy(m), m.routing_key or "", mandatory=True) for m in batch)
            )
        except Exception as exc:
            for m in batch:
                await m.nack(requeue=True)
            raise MigrationFailed(
                f"moving {source.name}: the broker did not take a copy ({exc}); its messages stay in it"
            ) from None
        for m in batch:
            await m.ack()
        moved += len(batch)


def _copy(message: AbstractIncomingMessage) -> aio_pika.Message:
    return aio_pika.Message(
        message.body,
        headers=dict(message.headers or {}),
        content_type=message.content_type,
        content_encoding=message.content_encoding,
        delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
        priority=message.priority,
        correlation_id=message.correlation_id,
        message_id=message.message_id,
        timestamp=message.timestamp,
        type=message.type,
        app_id=message.app_id,
    )
