"""The RabbitMQ topology as data: exchanges, queues and bindings, declared idempotently."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from aio_pika.abc import AbstractChannel, ExchangeType
from aiormq.exceptions import ChannelPreconditionFailed

from crawler.config import CrawlConfig, FrontierConfig
from crawler.errors import CrawlerError
from crawler.frontier.retry import JITTER
from crawler.names import (
    FIRST_BAND,
    FIRST_BAND_WORD,
    HEADER_RETRY_TIER,
    HOST_SHARD_WORD,
    HOST_WAITS,
    MAX_PRIORITY,
    WEBHOOK_KEY,
    Names,
    delay_label,
    host_wait_label,
)

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


CLASSIC = FrontierConfig()
# A quorum queue a person reads through (the dead letters: each read returns them) or nobody consumes
# must never drop a message for its deliveries; RabbitMQ 4.0 would after 20 by default.
UNLIMITED_DELIVERIES = 2**31 - 1


def routing_key(host: str, priority: int) -> str:
    """The frontier routing key of a URL on `host` at `priority`: its host, marked if first-band."""
    return f"{host}.{FIRST_BAND_WORD}" if priority >= FIRST_BAND else host


def host_of_key(key: str) -> str:
    """The host a frontier routing key was made from."""
    head, dot, last = key.rpartition(".")
    if dot and last.startswith(HOST_SHARD_WORD):
        return head
    return key.removesuffix(f".{FIRST_BAND_WORD}")


def kind(frontier: FrontierConfig, dead_letters_to: str | None = None) -> dict[str, Any]:
    """Arguments of a queue of the frontier's type, dead-lettering to `dead_letters_to` if given."""
    args: dict[str, Any] = {}
    if dead_letters_to is not None:
        args["x-dead-letter-exchange"] = dead_letters_to
    if frontier.queue_type == "classic":
        return args
    args |= {"x-queue-type": "quorum", "x-quorum-initial-group-size": frontier.replicas}
    if dead_letters_to is not None:
        # At-least-once: a message leaves for its dead-letter exchange only once that is confirmed
        # (RabbitMQ 3.10+); it requires the reject-publish overflow.
        args |= {"x-dead-letter-strategy": "at-least-once", "x-overflow": "reject-publish"}
    return args


def domain_queue(names: Names, domain: str, frontier: FrontierConfig = CLASSIC) -> Queue:
    """A domain's work queue: takes the domain and every subdomain, rejects go to the dead queue.

    Classic: one queue with ten priorities. Quorum: below FIRST_BAND only (see `first_band_queue`)."""
    keys = [f"#.{domain}"]
    args = kind(frontier, names.dead)
    if frontier.queue_type == "classic":
        keys.append(f"#.{domain}.{FIRST_BAND_WORD}")
        args["x-max-priority"] = MAX_PRIORITY
    else:
        args["x-delivery-limit"] = frontier.delivery_limit
    return Queue(names.domain_queue(domain), args, tuple(Binding(names.frontier, k) for k in keys))


def first_band_queue(names: Names, domain: str, frontier: FrontierConfig) -> Queue:
    """A quorum frontier's queue of a domain's seeds and raised links, consumed beside its queue."""
    return Queue(
        names.first_band(domain),
        kind(frontier, names.dead) | {"x-delivery-limit": frontier.delivery_limit},
        (Binding(names.frontier, f"#.{domain}.{FIRST_BAND_WORD}"),),
    )


def domain_queues(names: Names, domain: str, frontier: FrontierConfig = CLASSIC) -> tuple[Queue, ...]:
    """Every queue holding a domain's work: one on a classic frontier, two bands on a quorum one."""
    if frontier.queue_type == "classic":
        return (domain_queue(names, domain, frontier),)
    return (domain_queue(names, domain, frontier), first_band_queue(names, domain, frontier))


def retry_queue(names: Names, delay: float, frontier: FrontierConfig = CLASSIC) -> Queue:
    """A delay tier: no consumers; its messages expire back into the frontier by their host."""
    return Queue(
        names.retry_queue(delay),
        kind(frontier, names.frontier) | {"x-message-ttl": round(delay * JITTER * 1000)},
        (Binding(names.retry, "", {"x-match": "all", HEADER_RETRY_TIER: delay_label(delay)}),),
    )


def backlog(frontier: FrontierConfig, args: dict[str, Any]) -> dict[str, Any]:
    """`args` for a queue that holds the open web's backlog: on disk, not in the broker's memory.

    A classic queue keeps ~0.7 KB a message in memory and blocks every publisher at its memory alarm;
    lazy, ~10 bytes; quorum, ~150 bytes, its bodies on disk already (bench/README.md)."""
    return args | {"x-queue-mode": "lazy"} if frontier.queue_type == "classic" else args


def queue_mode(arguments: Arguments) -> str:
    """A queue's mode from its arguments (a spec's, or the broker's): `lazy`, or `default` if unset."""
    return str(arguments.get("x-queue-mode", "default"))


def shard_queue(names: Names, shard: int, frontier: FrontierConfig = CLASSIC) -> Queue:
    """One of the queues discovered hosts share: it takes the keys ending in its shard's word."""
    args = backlog(frontier, kind(frontier, names.dead))
    if frontier.queue_type == "classic":
        args["x-max-priority"] = MAX_PRIORITY
    else:
        args["x-delivery-limit"] = frontier.delivery_limit
    return Queue(names.host_shard(shard), args, (Binding(names.frontier, f"#.{HOST_SHARD_WORD}{shard}"),))


def host_wait_queue(names: Names, seconds: float, frontier: FrontierConfig = CLASSIC) -> Queue:
    """No consumers: a discovered host's URL waits here `seconds`, then expires back to its shard."""
    return Queue(
        names.host_wait(seconds),
        backlog(frontier, kind(frontier, names.frontier)) | {"x-message-ttl": round(seconds * 1000)},
        (Binding(names.retry, "", {"x-match": "all", HEADER_RETRY_TIER: host_wait_label(seconds)}),),
    )


def host_queues(config: CrawlConfig, names: Names) -> tuple[Queue, ...]:
    """The host layout's queues (its shards, then its waits); none unless discovery follows links
    or listed domains past the line use them."""
    if not config.host_layout:
        return ()
    return (
        *(shard_queue(names, n, config.frontier) for n in range(config.discover.shards)),
        *(host_wait_queue(names, s, config.frontier) for s in HOST_WAITS),
    )


def webhook_queue(names: Names, frontier: FrontierConfig = CLASSIC) -> Queue:
    """Every version the change feed publishes, and webhook deliveries back from a retry tier or a
    replay (the frontier's WEBHOOK_KEY); its deliverers' rejects go to the dead queue."""
    args = kind(frontier, names.dead)
    if frontier.queue_type == "quorum":
        args["x-delivery-limit"] = frontier.delivery_limit
    bindings = (Binding(names.changes, "#"), Binding(names.frontier, WEBHOOK_KEY))
    return Queue(names.webhooks, args, bindings)


def kept_queue(name: str, frontier: FrontierConfig, binding: Binding) -> Queue:
    """A queue messages wait in for a person (dead, unrouted): never dead-letters, never drops."""
    args = kind(frontier)
    if frontier.queue_type == "quorum":
        args["x-delivery-limit"] = UNLIMITED_DELIVERIES
    return Queue(name, args, (binding,))


def topology(config: CrawlConfig, names: Names) -> Topology:
    """The exchanges and queues `config` needs."""
    exchanges = (
        Exchange(names.frontier, ExchangeType.TOPIC, {"alternate-exchange": names.unrouted}),
        Exchange(names.unrouted, ExchangeType.FANOUT),
        Exchange(names.dead, ExchangeType.FANOUT),
        Exchange(names.retry, ExchangeType.HEADERS),
        Exchange(names.changes, ExchangeType.TOPIC),  # subscribers bind their own queues
    )
    frontier = config.frontier
    queues = (
        kept_queue(names.unrouted, frontier, Binding(names.unrouted)),
        kept_queue(names.dead, frontier, Binding(names.dead)),
        *(retry_queue(names, delay, frontier) for delay in config.retry_tiers),
        *(q for domain in sorted(config.domains) for q in domain_queues(names, domain, frontier)),
        *host_queues(config, names),
        # Only with receivers: a queue nobody consumes would keep every version for ever.
        *((webhook_queue(names, frontier),) if config.webhooks else ()),
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
            "other arguments: if domains.yaml's frontier.queue_type changed, or a queue's mode differs "
            "(the host layout's classic queues are lazy), run `crawler frontier migrate`; otherwise "
            "delete it in the management UI (or use another CRAWLER_PREFIX)"
        ) from None


def work_queues(
    config: CrawlConfig, names: Names, domains: Iterable[str], *, hosts: bool = True
) -> list[str]:
    """Queues holding work still to do for `domains`: their queues (and, with `hosts`, the host
    layout's), then every retry tier."""
    return [
        *(q.name for d in domains for q in domain_queues(names, d, config.frontier)),
        *(q.name for q in (host_queues(config, names) if hosts else [])),
        *(names.retry_queue(d) for d in config.retry_tiers),
    ]
