"""Queue depths as metrics: a worker samples its queues every few seconds with passive declares.

Each worker samples its own domains' queues and the shared ones (retry tiers, dead, unrouted), so
Prometheus sees every queue as long as any worker runs; dashboards take the max across workers.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from aio_pika.abc import AbstractRobustChannel, AbstractRobustConnection
from redis.asyncio import Redis

from crawler.config import CrawlConfig
from crawler.frontier.exchanges import declare, domain_queues, host_queues, topology
from crawler.hosts.views import host_counts
from crawler.monitor.metrics import Metrics
from crawler.names import DISCOVERED_LABEL, Names
from crawler.stopping import still_cancelled

log = logging.getLogger(__name__)

SAMPLE_EVERY = 5.0  # seconds


@dataclass(frozen=True, slots=True)
class SampledQueue:
    """A queue to sample and how to label it."""

    name: str
    kind: str  # domain, retry, dead, unrouted, host_shard or host_wait
    domain: str = ""


def sampled_queues(config: CrawlConfig, names: Names, domains: Sequence[str]) -> list[SampledQueue]:
    """The queues a worker consuming `domains` samples; with discovery on, the host layout's shards
    and wait queues too, each labelled DISCOVERED_LABEL (a fixed number, whatever the hosts)."""
    return [
        *(
            SampledQueue(q.name, "domain", d)
            for d in domains
            for q in domain_queues(names, d, config.frontier)
        ),
        *(SampledQueue(names.retry_queue(t), "retry") for t in config.retry_tiers),
        SampledQueue(names.dead, "dead"),
        SampledQueue(names.unrouted, "unrouted"),
        *(
            SampledQueue(
                q.name, "host_shard" if i < config.discover.shards else "host_wait", DISCOVERED_LABEL
            )
            for i, q in enumerate(host_queues(config, names))
        ),
    ]


class QueueSampler:
    """Samples queue depths into `metrics` until cancelled.

    `config` and `domains` are asked at each sample: a consumer's configuration may be edited live.
    """

    def __init__(
        self,
        connection: AbstractRobustConnection,
        names: Names,
        config: Callable[[], CrawlConfig],
        domains: Callable[[], Sequence[str]],
        metrics: Metrics,
        every: float = SAMPLE_EVERY,
        redis: Redis | None = None,
    ) -> None:
        """With `redis`, the fleet's discovered hosts are counted at each sample too (discovery on)."""
        self.redis = redis
        self.connection = connection
        self.names = names
        self.config = config
        self.domains = domains
        self.metrics = metrics
        self.every = every
        self._channel: AbstractRobustChannel | None = None

    async def sample(self) -> None:
        """Sample every queue once."""
        config = self.config()
        if self._channel is None:
            # A passive declare of a missing queue would close the channel: make sure they exist.
            # (On a channel of its own: a robust channel answers passive declares of the queues it
            # declared from its cache, which would freeze the depths.)
            setup = await self.connection.channel()
            try:
                await declare(setup, topology(config, self.names))
            finally:
                await setup.close()
            self._channel = await self.connection.channel()
        frontier = shards = 0
        for queue in sampled_queues(config, self.names, self.domains()):
            # robust=False: a robust channel answers a repeated passive declare from its cache.
            declared = await self._channel.declare_queue(queue.name, passive=True, robust=False)
            result = declared.declaration_result
            ready, consumers = result.message_count or 0, result.consumer_count or 0
            self.metrics.observe_queue(queue.name, queue.kind, queue.domain, ready, consumers)
            if queue.kind == "domain":
                frontier += ready
            elif queue.kind == "host_shard":
                shards += ready
        # Set once per whole sample, so a scaler never reads a half-summed frontier.
        self.metrics.observe_frontier(frontier)
        if config.host_layout:
            self.metrics.observe_host_shards(shards)
            if self.redis is not None:
                self.metrics.observe_hosts(await host_counts(self.redis, self.names))

    async def run(self) -> None:
        """Sample every `every` seconds until cancelled."""
        try:
            while True:
                try:
                    await self.sample()
                except Exception as exc:
                    # The broker is away (the robust connection reconnects) or a queue was deleted
                    # by hand: sample again later, on a fresh channel that declares it again.
                    still_cancelled()
                    log.debug("queue sampling failed: %r", exc)
                    await self._close()
                await asyncio.sleep(self.every)
        finally:
            await asyncio.shield(self._close())

    async def _close(self) -> None:
        channel, self._channel = self._channel, None
        if channel is not None:
            with contextlib.suppress(Exception):
                await channel.close()
