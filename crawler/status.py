"""How a crawl stands: queue depths from RabbitMQ and stored pages from the database."""

from __future__ import annotations

import asyncio
from dataclasses import asdict, dataclass
from typing import Any
from urllib.parse import quote, urlsplit

import httpx

from crawler import services
from crawler.config import CrawlConfig
from crawler.settings import Settings
from crawler.sink import Sink, ensure_schema

MANAGEMENT_PORT = 15672


@dataclass(frozen=True, slots=True)
class QueueDepth:
    """One queue's messages and consumers; `unacked` is None when the management API is away."""

    name: str
    ready: int
    unacked: int | None
    consumers: int


@dataclass(frozen=True, slots=True)
class DomainStatus:
    """One domain's queue and stored pages."""

    domain: str
    queue: QueueDepth
    pages_ok: int
    pages_failed: int


def management_url(amqp_url: str) -> tuple[str, str, tuple[str, str]]:
    """Management API base, vhost and credentials for an AMQP URL (same host and user)."""
    parts = urlsplit(amqp_url)
    vhost = parts.path[1:] or "/"
    auth = (parts.username or "guest", parts.password or "guest")
    return f"http://{parts.hostname or 'localhost'}:{MANAGEMENT_PORT}", vhost, auth


async def _from_management(settings: Settings, queues: list[str]) -> dict[str, QueueDepth] | None:
    base, vhost, auth = management_url(settings.amqp_url)
    try:
        async with httpx.AsyncClient(base_url=base, auth=auth, timeout=5, trust_env=False) as client:
            resp = await client.get(f"/api/queues/{quote(vhost, safe='')}")
            resp.raise_for_status()
    except httpx.HTTPError:
        return None
    found: dict[str, Any] = {q["name"]: q for q in resp.json()}
    return {
        name: QueueDepth(
            name,
            int(found[name].get("messages_ready", 0)),
            int(found[name].get("messages_unacknowledged", 0)),
            int(found[name].get("consumers", 0)),
        )
        for name in queues
        if name in found
    }


async def _from_broker(settings: Settings, queues: list[str]) -> dict[str, QueueDepth]:
    out = {}
    async with services.broker(settings.amqp_url, "crawler status") as connection:
        for name in queues:
            # A passive declare of a missing queue closes its channel: one channel per queue.
            channel = await connection.channel()
            try:
                queue = await channel.declare_queue(name, passive=True)
            except Exception:
                continue
            finally:
                if not channel.is_closed:
                    await channel.close()
            result = queue.declaration_result
            out[name] = QueueDepth(name, result.message_count or 0, None, result.consumer_count or 0)
    return out


async def queue_depths(settings: Settings, queues: list[str]) -> dict[str, QueueDepth]:
    """Depths of `queues` from the management API, or from passive declares without it."""
    depths = await _from_management(settings, queues)
    return depths if depths is not None else await _from_broker(settings, queues)


async def status(settings: Settings, config: CrawlConfig) -> dict[str, Any]:
    """The crawl's status as plain data."""
    names = settings.names
    extra = [names.unrouted, names.dead, *(names.retry_queue(d) for d in config.retry_tiers)]
    queues = [names.domain_queue(d) for d in sorted(config.domains)]
    depths = await queue_depths(settings, queues + extra)
    await asyncio.to_thread(ensure_schema, settings.database_url)
    sink = Sink(settings.database_url)
    try:
        counts = await asyncio.to_thread(sink.counts)
    finally:
        sink.close()
    missing = QueueDepth("", 0, None, 0)
    domains = [
        DomainStatus(
            d,
            depths.get(names.domain_queue(d), missing),
            *counts.get(d, (0, 0)),
        )
        for d in sorted(config.domains)
    ]
    return {
        "domains": [asdict(s) for s in domains],
        "queues": [asdict(depths[q]) for q in extra if q in depths],
    }


def render(data: dict[str, Any]) -> str:
    """The status as a table for a person."""
    rows = [("domain", "ready", "unacked", "consumers", "ok", "failed")]
    for d in data["domains"]:
        q = d["queue"]
        unacked = "?" if q["unacked"] is None else str(q["unacked"])
        rows.append(
            (
                d["domain"],
                str(q["ready"]),
                unacked,
                str(q["consumers"]),
                str(d["pages_ok"]),
                str(d["pages_failed"]),
            )
        )
    for q in data["queues"]:
        unacked = "?" if q["unacked"] is None else str(q["unacked"])
        rows.append((q["name"], str(q["ready"]), unacked, str(q["consumers"]), "", ""))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(
            cell.ljust(w) if i == 0 else cell.rjust(w)
            for i, (cell, w) in enumerate(zip(r, widths, strict=True))
        )
        for r in rows
    )
