"""The host layout: URLs of hosts no listed domain covers, in a fixed number of shard queues.

A discovered host has no queue of its own: its URLs go to the shard `crc32(host) % shards` names,
under the routing key `{host}.~s{shard}`, at a priority that falls with depth (a host's first pages
before any host's deep pages). A URL whose host is not ready for its next request is set aside in a
wait queue that returns it to its shard, so a slow host never holds its shard's prefetch.
"""

from __future__ import annotations

import contextlib
import zlib
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field

from aio_pika.abc import AbstractChannel, AbstractIncomingMessage, AbstractQueue, AbstractRobustConnection
from redis.asyncio import Redis

from crawler.config import CrawlConfig
from crawler.errors import BadHost
from crawler.frontier.exchanges import routing_key
from crawler.frontier.publisher import MAX_ROUTING_KEY
from crawler.hosts.caps import HostCaps
from crawler.hosts.checks import check_host
from crawler.names import HOST_SHARD_WORD, MAX_PRIORITY, Names

Handler = Callable[[str, AbstractIncomingMessage], Awaitable[None]]
"""What handles one delivery of a shard: called with the delivery's host as its domain."""

# The longest routing key suffix a host gets (`.~s1023`): a host must leave room for it.
_SUFFIX = len(f".{HOST_SHARD_WORD}1023")


def shard_of(host: str, shards: int) -> int:
    """The shard of `host`: the same in every process and run (Python's own hash is salted)."""
    return zlib.crc32(host.encode()) % shards


def host_key(host: str, shards: int) -> str:
    """The frontier routing key of a URL on discovered `host`."""
    return f"{host}.{HOST_SHARD_WORD}{shard_of(host, shards)}"


def frontier_key(config: CrawlConfig, host: str, priority: int) -> str:
    """The frontier routing key of a URL on `host`: its shard's if the host layout serves its domain
    (a discovered host, or a listed domain past the line), else its domain queue's at `priority`."""
    domain = config.domain_of(host) or host
    if config.in_layout(domain):
        return host_key(domain, config.discover.shards)
    return routing_key(host, priority)


def host_priority(depth: int) -> int:
    """A discovered host's URL's priority: breadth first, one level lower per hop from the seeds."""
    return max(0, MAX_PRIORITY - depth)


def follows(config: CrawlConfig, host: str) -> bool:
    """Whether links to `host` (of no listed domain) may be followed, caps aside: discovery is on,
    the host is a valid name (an IP literal only if allowed) within allow and not denied."""
    discover = config.discover
    if discover.follow != "all" or len(host) > MAX_ROUTING_KEY - _SUFFIX:
        return False
    try:
        canonical = check_host(host, allow_ip=discover.allow_ip_hosts)
    except BadHost:
        return False
    return canonical == host and discover.in_scope(host)


class Discovery:
    """Which hosts found by links a crawl follows: in `discover:`'s scope, a valid host name, and
    admitted within its caps (max_hosts, max_hosts_per_domain), counted fleet-wide in Redis."""

    def __init__(self, redis: Redis, names: Names) -> None:
        self._caps = HostCaps(redis, names)
        self._redis = redis
        self._names = names

    async def admit(self, config: CrawlConfig, hosts: Iterable[str], crawl: str | None) -> set[str]:
        """The hosts of `hosts` the crawl's caps admit (now or before), in one round trip (two when
        some are new to it)."""
        discover = config.discover
        verdicts = await self._caps.admit(
            list(hosts), max_hosts=discover.max_hosts, per_domain=discover.max_hosts_per_domain, crawl=crawl
        )
        if crawl is not None and "new" in verdicts.values():
            # The views of hosts (crawler/hosts/views.py) sum the crawls listed here; listed at each
            # new host, not once per process, so a Redis that lost the set has it again.
            await self._redis.sadd(self._names.host_crawls_key, crawl)
        return {host for host, verdict in verdicts.items() if verdict in ("known", "new")}


@dataclass(slots=True)
class HostShards:
    """A consumer's subscription to the shard queues, on one channel of their own; each delivery is
    handled with its host as its domain."""

    names: Names
    connection: AbstractRobustConnection
    handler: Handler
    label: str
    _channel: AbstractChannel | None = None
    _consumers: list[tuple[AbstractQueue, str]] = field(default_factory=list)
    _shards: int = 0

    async def add(self, shards: int, prefetch: int) -> None:
        """Consume every shard (again, after `close`); each consumer has `prefetch` deliveries."""
        if self._channel is not None:
            return
        self._channel = await self.connection.channel(publisher_confirms=False)
        await self._channel.set_qos(prefetch_count=prefetch)
        self._shards = shards
        await self.release()

    async def release(self) -> None:
        """Take deliveries again after `cancel` (the fetch service paused discovered hosts), on the
        same channel, which still carries the acks of what it delivered before."""
        if self._channel is None or self._consumers:
            return
        for shard in range(self._shards):
            queue = await self._channel.declare_queue(self.names.host_shard(shard), passive=True)
            tag = f"{self.label}.hosts.{shard}".replace(" ", ".")
            await queue.consume(self._deliver, consumer_tag=tag)
            self._consumers.append((queue, tag))

    async def _deliver(self, message: AbstractIncomingMessage) -> None:
        head, _, last = (message.routing_key or "").rpartition(".")
        # A key not of the layout's shape reads as no host: the pipeline sets the message aside.
        await self.handler(head if last.startswith(HOST_SHARD_WORD) else "", message)

    async def cancel(self) -> None:
        """Stop new deliveries; what was delivered stays until `close`."""
        for queue, tag in self._consumers:
            with contextlib.suppress(Exception):
                await queue.cancel(tag)
        self._consumers.clear()

    async def close(self) -> None:
        """Close the channel: anything delivered but not acked returns to its shard."""
        await self.cancel()
        channel, self._channel = self._channel, None
        if channel is not None:
            with contextlib.suppress(Exception):
                await channel.close()
