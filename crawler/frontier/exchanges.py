"""The RabbitMQ topology as data: exchanges, queues and bindings, declared idempotently."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from aio_pika.abc import AbstractChannel, ExchangeType
from aiormq.exceptions import ChannelPreconditionFailed

from crawler.config import CrawlConfig
from crawler.errors import CrawlerError
from crawler.frontier.retry import JITTER
from crawler.names import HEADER_RETRY_TIER, MAX_PRIORITY, Names, delay_label

Arguments = Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Exchange:
    """A durable exchange."""

    name: str
    type: ExchangeType
    arguments: Arguments = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Binding:
    """A queue's binding to an exchange."""

    exchange: str
    routing_key: str = ""
    arguments: Arguments = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Queue:
    """A durable queue and what feeds it."""

    name: str
    arguments: Arguments = field(default_factory=dict)
    bindings: tuple[Binding, ...] = ()


@dataclass(frozen=True, slots=True)
class Topology:
    """Everything one crawl declares on the broker."""

    exchanges: tuple[Exchange, ...]
    queues: tuple[Queue, ...]


def domain_queue(names: Names, domain: str) -> Queue:
    """A domain's work queue: takes the domain and every subdomain, rejects go to the dead queue."""
    return Queue(
        names.domain_queue(domain),
        {"x-max-priority": MAX_PRIORITY, "x-dead-letter-exchange": names.dead},
        (Binding(names.frontier, f"#.{domain}"),),
    )


def retry_queue(names: Names, delay: float) -> Queue:
    """A delay tier: no consumers; its messages expire back into the frontier by their host."""
    return Queue(
        names.retry_queue(delay),
        {"x-message-ttl": round(delay * JITTER * 1000), "x-dead-letter-exchange": names.frontier},
        (Binding(names.retry, "", {"x-match": "all", HEADER_RETRY_TIER: delay_label(delay)}),),
    )


def topology(config: CrawlConfig, names: Names) -> Topology:
    """The exchanges and queues `config` needs."""
    exchanges = (
        Exchange(names.frontier, ExchangeType.TOPIC, {"alternate-exchange": names.unrouted}),
        Exchange(names.unrouted, ExchangeType.FANOUT),
        Exchange(names.dead, ExchangeType.FANOUT),
        Exchange(names.retry, ExchangeType.HEADERS),
        Exchange(names.changes, ExchangeType.TOPIC),  # subscribers bind their own queues
    )
    queues = (
        Queue(names.unrouted, bindings=(Binding(names.unrouted),)),
        Queue(names.dead, bindings=(Binding(names.dead),)),
        *(retry_queue(names, delay) for delay in config.retry_tiers),
        *(domain_queue(names, domain) for domain in sorted(config.domains)),
    )
    return Topology(exchanges, queues)


async def declare(channel: AbstractChannel, topo: Topology) -> None:
    """Declare every exchange, queue and binding; harmless when they already exist."""
    try:
        for ex in topo.exchanges:
            await channel.declare_exchange(ex.name, ex.type, durable=True, arguments=dict(ex.arguments))
        for q in topo.queues:
            queue = await channel.declare_queue(q.name, durable=True, arguments=dict(q.arguments))
            for b in q.bindings:
                await queue.bind(b.exchange, b.routing_key, arguments=dict(b.arguments))
    except ChannelPreconditionFailed as exc:
        raise CrawlerError(
            f"RabbitMQ refused the topology: {exc}. An exchange or queue of that name exists with "
            "other arguments; delete it in the management UI (or use another CRAWLER_PREFIX)"
        ) from None


def work_queues(config: CrawlConfig, names: Names, domains: Iterable[str]) -> list[str]:
    """Queues holding work still to do for `domains`: their queues and every retry tier."""
    return [
        *(names.domain_queue(d) for d in domains),
        *(names.retry_queue(d) for d in config.retry_tiers),
    ]
