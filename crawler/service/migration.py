"""`crawler frontier migrate`: the frontier's queues re-made as domains.yaml's `frontier` says."""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from urllib.parse import quote

import httpx

from crawler import connections
from crawler.config import CrawlConfig
from crawler.errors import ServiceUnavailable
from crawler.frontier.client import declare_topology
from crawler.frontier.crawls import CrawlState
from crawler.frontier.exchanges import queue_mode
from crawler.frontier.migration import Migration, Moved, QueueInfo, groups
from crawler.monitor.status import management_url
from crawler.settings import Settings


async def migrate_frontier(settings: Settings, config: CrawlConfig, domains: Sequence[str] | None) -> Moved:
    """Re-make every queue of the frontier (of `domains`, if given) whose type or mode is not the
    configured one."""
    base, vhost, auth = management_url(settings.amqp_url, settings.management_url)
    async with (
        connections.broker(settings.amqp_url, "crawler frontier migrate") as connection,
        connections.redis(settings.redis_url) as redis,
        httpx.AsyncClient(base_url=base, auth=auth, timeout=10, trust_env=False) as api,
    ):
        state = CrawlState(redis, settings.names)
        held_before = await state.paused()

        async def inspect(name: str) -> QueueInfo | None:
            try:
                resp = await api.get(f"/api/queues/{quote(vhost, safe='')}/{quote(name, safe='')}")
            except httpx.HTTPError as exc:
                raise ServiceUnavailable(
                    f"cannot read RabbitMQ's management API at {base} ({exc}): the migration reads "
                    "each queue's type and unacked deliveries there; set CRAWLER_MANAGEMENT_URL"
                ) from None
            if resp.status_code == 404:
                return None
            resp.raise_for_status()
            q = resp.json()
            return QueueInfo(
                str(q.get("type", "classic")),
                int(q.get("messages_unacknowledged", 0)),
                int(q.get("consumers", 0)),
                queue_mode(q.get("arguments") or {}),
            )

        async def resume(domain: str) -> None:
            if domain not in held_before:  # a domain someone paused stays paused
                await state.resume(domain)

        opened = partial(connections.publishing_channel, connection)
        migration = Migration(opened, config.frontier, inspect, state.pause, resume)
        moved = await migration.run(groups(config, settings.names, domains))
        # Exchanges and anything new in the configuration, as every process declares them.
        await declare_topology(connection, config, settings.names)
        return moved
