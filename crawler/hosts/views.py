"""The fleet's discovered hosts in aggregate, as every view shows them: how many are known, active,
waiting and parked, and the few with the most URLs queued; never a row per host.

The counts come from bounded Redis sets kept per crawl by the count script of crawler/frontier/crawls.py
(queued, active, waiting) and by admission (known), and from the DNS cache's parked hosts.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from redis.asyncio import Redis

from crawler.names import HOST_ACTIVE_WINDOW, Names

TOP_HOSTS = 10  # hosts a view lists by URLs queued


@dataclass(frozen=True, slots=True)
class TopHost:
    """A discovered host and its URLs queued, not yet at an outcome (those waiting included)."""

    host: str
    queued: int


@dataclass(frozen=True, slots=True)
class HostCounts:
    """Discovered hosts over the crawls Redis holds: admitted (known), with a page at an outcome
    within HOST_ACTIVE_WINDOW (active), with URLs waiting out of their shard (waiting), parked by DNS
    failures (parked, fleet-wide), the hosts with the most URLs queued (top), and those crawls."""

    known: int = 0
    active: int = 0
    waiting: int = 0
    parked: int = 0
    top: list[TopHost] = field(default_factory=list)
    crawls: int = 0


async def host_counts(redis: Redis, names: Names, top: int = TOP_HOSTS) -> HostCounts:
    """The counts of the discovered hosts of every crawl that admitted some and is not cancelled (and
    of the default crawl's), in two round trips whatever the number of hosts."""
    async with redis.pipeline(transaction=False) as pipe:
        pipe.time()
        pipe.smembers(names.host_crawls_key)
        pipe.smembers(names.cancelled_key)
        pipe.scard(names.for_crawl(None).hosts_key)
        (seconds, micros), raw, cancelled_raw, default_known = await pipe.execute()
    now = seconds + micros / 1e6
    cancelled = {_text(c) for c in cancelled_raw}
    crawls = sorted(c for c in map(_text, raw) if c not in cancelled)
    async with redis.pipeline(transaction=False) as pipe:
        pipe.zcount(names.dns_parked_key, int(now * 1000), "+inf")
        for crawl in crawls:
            keys = names.for_crawl(crawl)
            pipe.scard(keys.hosts_key)
            pipe.zcount(keys.hosts_active_key, now - HOST_ACTIVE_WINDOW, "+inf")
            pipe.zcard(keys.hosts_waiting_key)
            # Each crawl's top is enough for the top of their sum but for a host in several crawls.
            pipe.zrevrange(keys.hosts_queued_key, 0, top - 1, withscores=True)
        parked, *per_crawl = await pipe.execute()
    known, active, waiting = int(default_known), 0, 0
    tops: dict[str, int] = {}
    gone = []
    for i, crawl in enumerate(crawls):
        hosts, busy, waits, first = per_crawl[4 * i : 4 * i + 4]
        if not hosts and not first:
            gone.append(crawl)  # forgotten: its keys are deleted
        known, active, waiting = known + hosts, active + busy, waiting + waits
        for host, score in first:
            tops[_text(host)] = tops.get(_text(host), 0) + int(score)
    if gone:
        await redis.srem(names.host_crawls_key, *gone)
    ranked = sorted(tops.items(), key=lambda kv: (-kv[1], kv[0]))[:top]
    return HostCounts(
        known, active, waiting, int(parked), [TopHost(h, n) for h, n in ranked], len(crawls) - len(gone)
    )


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
