"""Publishing a page's new version to the change feed, persistent and confirmed, before its ack.

The body is JSON: `url`, `domain`, `crawl`, `version`, `fetched_at` (ISO 8601, UTC), `kind` (`new`,
`changed`, `gone`, `back`, `reparse`), for `changed` and `reparse`, `changes`: {field: {"old": ...,
"new": ...}}, and, for a version with content (`content:` on), the page view's content fields, its
Markdown and text left out of a body that would exceed MAX_BODY_BYTES. The routing key is the
configured domain; the AMQP `message_id` is `{page id}:{version}`, the same for every copy of one
version, so a subscriber drops a copy it has seen (docs/history.md).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, datetime

from aio_pika.abc import AbstractConnection, AbstractExchange
from aiormq.exceptions import AMQPError, ChannelInvalidStateError

from crawler.config import CrawlConfig
from crawler.connections import publishing_channel
from crawler.errors import FeedError
from crawler.frontier.exchanges import Topology, declare, topology
from crawler.frontier.publisher import Outgoing, Publisher
from crawler.names import Names
from crawler.sink.versions import Version

# Above this, a body leaves out its Markdown and text (`content_too_large`; the page view has them):
# RabbitMQ refuses a message over its max_message_size (16 MiB by default since 4.0) by closing the
# channel, and every queue bound to the feed holds a copy of each body in the broker's memory.
MAX_BODY_BYTES = 1 << 20


def _utc(moment: datetime) -> str:
    # SQLite gives back naive times, stored as UTC.
    aware = moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
    return aware.astimezone(UTC).isoformat().replace("+00:00", "Z")


def body(version: Version) -> bytes:
    """The feed's JSON body of `version`."""
    out: dict[str, object] = {
        "url": version.url,
        "domain": version.domain,
        "crawl": version.crawl,
        "version": version.version,
        "fetched_at": _utc(version.fetched_at),
        "kind": version.kind,
    }
    if version.changes is not None:
        out["changes"] = {name: {"old": old, "new": new} for name, (old, new) in version.changes.items()}
    if version.content is not None:
        out |= version.content
        encoded = _json(out)
        if len(encoded) <= MAX_BODY_BYTES:
            return encoded
        out |= {"markdown": None, "text": None, "content_too_large": True}
    return _json(out)


def _json(out: dict[str, object]) -> bytes:
    return json.dumps(out, ensure_ascii=False, separators=(",", ":")).encode()


class ChangeFeed:
    """Publishes versions to the changes exchange on a channel opened with publisher confirms."""

    def __init__(self, exchange: AbstractExchange) -> None:
        # The frontier's batch publisher: aio-pika's own publish costs a consumer ~10 % more CPU
        # per page on a pass where a tenth of the pages change.
        self._publisher = Publisher(exchange)

    async def announce(self, version: Version) -> None:
        """Publish `version` and wait for the broker's confirm; FeedError if it is not confirmed."""
        await self.announce_all([version])

    async def announce_all(self, versions: Sequence[Version]) -> None:
        """Publish `versions` together and wait for every confirm; FeedError naming the first one
        not confirmed (publishing them all again is safe: a subscriber drops a copy by its id)."""
        # Not mandatory: versions are published whether or not a queue is bound (RabbitMQ drops
        # what no queue takes).
        outs = [Outgoing(v.domain, body(v), 0, v.message_id, v.kind) for v in versions]
        try:
            outcomes: Sequence[BaseException | None] = await self._publisher.publish(outs)
        except (AMQPError, ChannelInvalidStateError, ConnectionError) as exc:
            outcomes = [exc] * len(outs)
        for version, failed in zip(versions, outcomes, strict=True):
            if failed is not None:
                raise FeedError(
                    f"version {version.version} of {version.url} not confirmed: {failed!r}"
                ) from failed


@asynccontextmanager
async def changes_exchange(
    connection: AbstractConnection, config: CrawlConfig, names: Names, *, alone: bool = False
) -> AsyncIterator[AbstractExchange]:
    """The changes exchange on a channel of its own with confirms, the topology declared first (a
    broker that never saw a crawl has no exchange yet), or the exchange `alone` (a worker's consumer
    declares the rest: its every domain queue once is enough)."""
    channel = await publishing_channel(connection)
    try:
        topo = topology(config, names)
        if alone:
            topo = Topology(tuple(e for e in topo.exchanges if e.name == names.changes), ())
        await declare(channel, topo)
        yield await channel.get_exchange(names.changes, ensure=False)
    finally:
        await channel.close()


@asynccontextmanager
async def feed_on(
    connection: AbstractConnection, config: CrawlConfig, names: Names
) -> AsyncIterator[ChangeFeed]:
    """The change feed on a channel of its own: for a program that makes versions outside a worker."""
    async with changes_exchange(connection, config, names) as exchange:
        yield ChangeFeed(exchange)
