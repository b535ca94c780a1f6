"""How many messages the domain queues, and the host layout's, hold: asked of the broker itself."""

from __future__ import annotations

from collections.abc import Sequence

from aio_pika.abc import AbstractRobustConnection

from crawler.config import CrawlConfig, FrontierConfig
from crawler.frontier.exchanges import Queue, domain_queues, host_queues
from crawler.names import Names


async def queued(
    connection: AbstractRobustConnection, names: Names, frontier: FrontierConfig, domains: Sequence[str]
) -> dict[str, int]:
    """The messages each domain's queues (all its bands) hold."""
    held = {d: domain_queues(names, d, frontier) for d in domains}
    return await _depths(connection, held)


async def queued_in_layout(connection: AbstractRobustConnection, names: Names, config: CrawlConfig) -> int:
    """The messages the host layout's queues (its shards and waits) hold, 0 if it is not in use."""
    return (await _depths(connection, {"": host_queues(config, names)})).get("", 0)


async def _depths(connection: AbstractRobustConnection, held: dict[str, tuple[Queue, ...]]) -> dict[str, int]:
    """The messages each group of queues holds, on a probe channel of its own: a passive declare
    that fails ends its channel."""
    depths: dict[str, int] = {}
    async with connection.channel(publisher_confirms=False) as probe:
        for group, specs in held.items():
            depths[group] = 0
            for spec in specs:
                # robust=False: a robust channel answers a repeated passive declare from its cache.
                queue = await probe.declare_queue(spec.name, passive=True, robust=False)
                depths[group] += queue.declaration_result.message_count or 0
    return depths
