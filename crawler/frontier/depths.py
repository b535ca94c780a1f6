"""How many messages the domain queues hold, asked of the broker itself."""

from __future__ import annotations

from collections.abc import Sequence

from aio_pika.abc import AbstractRobustConnection

from crawler.config import FrontierConfig
from crawler.frontier.exchanges import domain_queues
from crawler.names import Names


async def queued(
    connection: AbstractRobustConnection, names: Names, frontier: FrontierConfig, domains: Sequence[str]
) -> dict[str, int]:
    """The messages each domain's queues (all its bands) hold, on a probe channel of its own: a
    passive declare that fails ends its channel."""
    depths: dict[str, int] = {}
    async with connection.channel(publisher_confirms=False) as probe:
        for domain in domains:
            depths[domain] = 0
            for spec in domain_queues(names, domain, frontier):
                # robust=False: a robust channel answers a repeated passive declare from its cache.
                queue = await probe.declare_queue(spec.name, passive=True, robust=False)
                depths[domain] += queue.declaration_result.message_count or 0
    return depths
