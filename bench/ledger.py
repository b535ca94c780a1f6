"""The ledger of a crawl: every URL it discovered accounted for, checked against its dedup store.

A crawl claims each URL it discovers in its Redis seen-set (plain layout: fingerprint -> claimant, or
done) before publishing it. At the end of a run, with its workers stopped, every fingerprint there
must be one of:
- a row in `pages` (stored, with its outcome),
- a message in some queue: a domain's, a first band, a retry tier, the dead queue (a dead letter,
  with its reason) or `unrouted`; with discovered hosts, a shard or a host wait queue too (every
  queue of the topology is read),
- skipped by policy (past max_pages, disallowed by robots.txt): no row, but a line of a worker's
  log at -v (`{domain} {url}: skipped, {why}`), read from `logs`.
Anything else is lost: the ledger names it, with the last line the workers' trace (`--trace`) logged
for it. The URLs are found from the fingerprints through every URL the run knows: the site's pages,
the rows and the messages. The seen-set must be kept until the ledger is taken (the soak deletes its
Redis keys only after).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

import aio_pika
import sqlalchemy as sa
from redis.asyncio import Redis

from crawler.config import CrawlConfig
from crawler.frontier.exchanges import topology
from crawler.frontier.urls import canonicalise, fingerprint
from crawler.names import HEADER_REASON, Names
from crawler.sink.sql import engine_url

MISSING_SHOWN = 50  # missing URLs named in the text, each with its last trace line
_SKIPPED = re.compile(r" (\S+): skipped, ")  # a worker's -v line for a page skipped by policy


@dataclass(slots=True)
class Ledger:
    """Where each URL the crawl discovered is now."""

    discovered: int = 0  # fingerprints in the crawl's seen-sets
    pending: int = 0  # of them, claims never confirmed (a publish under way, or its page not acked)
    rows: int = 0  # discovered URLs with a row
    skipped: int = 0  # discovered URLs without a row that a worker's log says it skipped by policy
    queued: Counter[str] = field(default_factory=Counter)  # discovered URLs waiting, by queue
    dead: Counter[str] = field(default_factory=Counter)  # discovered URLs in the dead queue, by reason
    missing: list[tuple[str, str]] = field(default_factory=list)  # (URL, its last trace line)
    unknown: int = 0  # fingerprints that no URL the run knows has: lost, and not even named
    undiscovered: list[str] = field(default_factory=list)  # expected URLs never claimed, stored nor queued
    # Rows whose URL is not in a seen-set: stored after a Redis loss whose rebuild came before them.
    rows_not_discovered: int = 0

    @property
    def lost(self) -> int:
        """URLs discovered and now nowhere."""
        return len(self.missing) + self.unknown

    @property
    def ok(self) -> bool:
        """Every discovered URL accounted for, and every expected one discovered."""
        return self.lost == 0 and not self.undiscovered

    def text(self) -> str:
        """The ledger as printed at the end of a run."""
        queued = ", ".join(f"{q} {n}" for q, n in sorted(self.queued.items())) or "none"
        dead = ", ".join(f"{r} {n}" for r, n in sorted(self.dead.items())) or "none"
        lines = [
            f"ledger: {self.discovered} URLs discovered ({self.pending} claims pending): {self.rows} stored, "
            f"{sum(self.queued.values())} queued ({queued}), {sum(self.dead.values())} dead ({dead}), "
            f"LOST {self.lost} ({len(self.missing)} named, {self.unknown} unknown fingerprints); "
            f"{self.skipped} skipped by policy; {len(self.undiscovered)} expected URLs never discovered; "
            f"{self.rows_not_discovered} rows not in the seen-set",
        ]
        for url, last in self.missing[:MISSING_SHOWN]:
            lines.append(f"  lost {url}\n    last trace: {last}")
        if len(self.missing) > MISSING_SHOWN:
            lines.append(f"  ... and {len(self.missing) - MISSING_SHOWN} more")
        for url in self.undiscovered[:MISSING_SHOWN]:
            lines.append(f"  never discovered {url}")
        return "\n".join(lines)


async def seen_sets(redis: Redis, names: Names) -> dict[bytes, bytes]:
    """Every fingerprint of the crawls' plain seen-sets (the default crawl's and each crawl's), with
    its value: the claimant while pending, DONE once confirmed."""
    found: dict[bytes, bytes] = {}
    async for key in redis.scan_iter(match=f"{names.prefix}:*seen", count=1000):
        if await redis.type(key) in (b"hash", "hash"):
            found.update(cast(dict[bytes, bytes], await redis.hgetall(key)))
    return found


def stored_urls(database_url: str) -> set[str]:
    """The URL of every row in `pages`."""
    engine = sa.create_engine(engine_url(database_url))
    try:
        with closing(engine.connect()) as conn:
            return {r[0] for r in conn.execute(sa.text("SELECT url FROM pages"))}
    finally:
        engine.dispose()


async def queued(amqp_url: str, queues: Sequence[str], dead: str) -> list[tuple[str, str, str]]:
    """(queue, URL, dead letter's reason) of every message in `queues`, left where it was: taken
    unacked on one channel, which then closes and gives them all back."""
    out: list[tuple[str, str, str]] = []
    connection = await aio_pika.connect(amqp_url)
    async with connection:
        for name in queues:
            channel = await connection.channel()
            try:
                queue = await channel.declare_queue(name, passive=True)
            except aio_pika.exceptions.ChannelClosed:
                continue  # never declared (a tier no domain uses any more)
            while (message := await queue.get(no_ack=False, fail=False)) is not None:
                try:
                    url = str(json.loads(message.body)["url"])
                except (ValueError, KeyError, TypeError):
                    url = message.body[:200].decode("utf-8", "replace")
                reason = (message.headers or {}).get(HEADER_REASON, b"") if name == dead else b""
                text = reason.decode() if isinstance(reason, bytes) else str(reason)
                out.append((name, url, text or ("rejected" if name == dead else "")))
            await channel.close()  # all of them back, unacked
    return out


def skipped_urls(logs: Sequence[Path]) -> set[str]:
    """The URLs the workers' logs (at -v) say were skipped by policy."""
    found: set[str] = set()
    for log in logs:
        try:
            text = log.read_text(errors="replace")
        except OSError:
            continue
        found.update(m.group(1) for m in _SKIPPED.finditer(text))
    return found


def last_trace(url: str, logs: Sequence[Path]) -> str:
    """The latest line of `logs` that names `url` (text logs: each line starts with its time)."""
    lines = []
    for log in logs:
        try:
            text = log.read_text(errors="replace")
        except OSError:
            continue
        lines += [f"{line} [{log.name}]" for line in text.splitlines() if f"{url} " in f"{line} "]
    return max(lines, default="(no line names it)")


async def take(
    amqp_url: str,
    redis_url: str,
    names: Names,
    database_url: str,
    config: CrawlConfig,
    expected: Iterable[str],
    logs: Sequence[Path] = (),
) -> Ledger:
    """The ledger of a stopped crawl: its seen-sets against its rows and queues."""
    client = Redis.from_url(redis_url)
    try:
        seen = await seen_sets(client, names)
    finally:
        await client.aclose()
    rows = stored_urls(database_url)
    topo = topology(config, names)
    messages = await queued(amqp_url, [q.name for q in topo.queues], names.dead)
    expected = [canonicalise(u, tracking=config.dropped_params) for u in expected]
    skipped = skipped_urls(logs)
    known = {fingerprint(u): u for u in [*expected, *rows, *(url for _, url, _ in messages), *skipped]}
    where: dict[str, list[tuple[str, str]]] = {}
    for queue, queued_url, reason in messages:
        where.setdefault(queued_url, []).append((queue, reason))
    ledger = Ledger(discovered=len(seen), pending=sum(1 for v in seen.values() if v != b"+"))
    for fp in seen:
        if (url := known.get(fp)) is None:
            ledger.unknown += 1
        elif url in rows:
            ledger.rows += 1
        elif url in where:
            queue, reason = where[url][0]
            if queue == names.dead:
                ledger.dead[reason] += 1
            else:
                ledger.queued[queue] += 1
        elif url in skipped:
            ledger.skipped += 1
        else:
            ledger.missing.append((url, last_trace(url, logs)))
    # A page stored after a Redis loss may be missing from the seen-set rebuilt before it was: it is
    # accounted for by its row. Never discovered: an expected page neither claimed, stored nor queued.
    ledger.undiscovered = sorted(
        u for u in expected if fingerprint(u) not in seen and u not in rows and u not in where
    )
    ledger.rows_not_discovered = sum(1 for u in rows if fingerprint(u) not in seen)
    return ledger
