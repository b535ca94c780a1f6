"""What the fleet shares about crawls in Redis: their options, which are cancelled, their outcome
counts, and which domains are paused. The durable record of a crawl is its database row
(crawler/sink/crawls.py), that of a pause the `domain_state` table (crawler/sink/domains.py); this is
what every worker reads on the hot path.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from redis.asyncio import Redis

from crawler.names import DISCOVERED_LABEL, HOST_ACTIVE_WINDOW, HOST_VIEWS_TTL, OPEN_FIELD, Names
from crawler.quality.coverage import is_quality
from crawler.sink.crawls import CrawlRecord, CrawlStatus, CrawlStore
from crawler.sink.domains import DomainStore

log = logging.getLogger(__name__)

# Outcome kinds a crawl counts per domain. "routed" counts URLs queued; "retrying" those waiting in
# a retry tier (up when parked, down when they come back and end); "sitemaps_queued" and
# "sitemaps_done" the sitemap tasks of rounds its seeds began (crawler/frontier/sitemaps.py).
COUNTED = ("routed", "ok", "failed", "dead", "skipped", "retrying", "sitemaps_queued", "sitemaps_done")
MAX_CACHED = 1024  # crawls' options a worker keeps read (they never change once the crawl exists)

DONE = ("ok", "failed", "dead")  # outcomes of a page stored: what a crawl's pages-over-time counts
# A crawl's series is kept in steps that lengthen as it ages (seconds of age, step): at most about
# 120 + 180 + 130 + 24 a day per domain, however long it runs.
SERIES_STEPS = ((0, 10), (1200, 60), (10800, 600), (86400, 3600))

# Kinds that end a URL queued (TERMINAL) or a sitemap task; what `pending` and the end of a crawl read.
TERMINAL = ("ok", "failed", "dead", "skipped")
# Work is opened as it is first claimed (crawler/dedup/store.py, crawler/frontier/sitemaps.py), before
# it is published; it is closed here, with its outcome.
CLOSED = (*TERMINAL, "sitemaps_done")

# Counts stop the moment a crawl is cancelled: the check and the increments are one atomic step.
# So is the look for its end: once the work it opened is all closed (OPEN_FIELD down to 0), every
# domain's counts are read to be sure (as `finished` reads them), and 2 is returned if it ended.
# A discovered host (one in the crawl's admitted hosts) is counted in the crawl's counts and series
# as one domain, DISCOVERED_LABEL, so every reading of them is bounded by the domains listed, not the
# hosts found; its own outcome counts go to the hosts' counts hash, from which its views of hosts
# (crawler/hosts/views.py) are set: its URLs queued (routed less ended, those waiting included),
# waiting (retrying), and when a page of it was last stored.
_VIEWED = ("routed", "ok", "failed", "dead", "skipped", "retrying")
_HOST_VIEWS = f"""
local FOLDED = '{DISCOVERED_LABEL}'
local VIEWED = {{{", ".join(f"{kind} = true" for kind in _VIEWED)}}}
local function views(host, stored)
  local c = redis.call('HMGET', KEYS[8], {", ".join(f"host .. ' {kind}'" for kind in _VIEWED)})
  for i = 1, 6 do c[i] = tonumber(c[i] or '0') end
  local queued = c[1] - c[2] - c[3] - c[4] - c[5]
  if queued > 0 then redis.call('ZADD', KEYS[5], queued, host) else redis.call('ZREM', KEYS[5], host) end
  if c[6] > 0 then redis.call('ZADD', KEYS[7], c[6], host) else redis.call('ZREM', KEYS[7], host) end
  if stored then
    local now = tonumber(redis.call('TIME')[1])
    redis.call('ZADD', KEYS[6], now, host)
    redis.call('ZREMRANGEBYSCORE', KEYS[6], '-inf', now - {HOST_ACTIVE_WINDOW})
  end
  for k = 5, 8 do redis.call('EXPIRE', KEYS[k], {HOST_VIEWS_TTL}) end
end
"""

# KEYS: cancelled set, counts hash, series hash, then the crawl's admitted hosts, its views of hosts
# (queued, active, waiting) and its hosts' counts hash. ARGV: crawl id, the change to OPEN_FIELD, n,
# then n (domain, pages stored) pairs for the series, then (field, increment) pairs for the counts.
_COUNT = (
    _HOST_VIEWS
    + """
if redis.call('SISMEMBER', KEYS[1], ARGV[1]) == 1 then return 0 end
local n = tonumber(ARGV[3])
local counts = 4 + 2 * n
local admitting = redis.call('EXISTS', KEYS[4]) == 1
local hosts, order, listed = {}, {}, {}
for i = counts, #ARGV, 2 do
  local domain, kind = string.match(ARGV[i], '^(.*) ([^ ]+)$')
  if domain and admitting and hosts[domain] == nil and not listed[domain] then
    if redis.call('SISMEMBER', KEYS[4], domain) == 1 then
      hosts[domain] = false
      order[#order + 1] = domain
    else
      listed[domain] = true
    end
  end
  if domain and hosts[domain] ~= nil then
    if VIEWED[kind] then redis.call('HINCRBY', KEYS[8], ARGV[i], ARGV[i + 1]) end
    redis.call('HINCRBY', KEYS[2], FOLDED .. ' ' .. kind, ARGV[i + 1])
    if kind == 'ok' or kind == 'failed' or kind == 'dead' then hosts[domain] = true end
  else
    redis.call('HINCRBY', KEYS[2], ARGV[i], ARGV[i + 1])
  end
end
for _, host in ipairs(order) do views(host, hosts[host]) end
local closing = tonumber(ARGV[2])
local open = redis.call('HINCRBY', KEYS[2], '"""
    + OPEN_FIELD
    + """', closing)
local ended = 1
if closing < 0 and open <= 0 then
  local by = {}
  local all = redis.call('HGETALL', KEYS[2])
  for i = 1, #all, 2 do
    local domain, kind = string.match(all[i], '^(.*) ([^ ]+)$')
    if domain then
      by[domain] = by[domain] or {}
      by[domain][kind] = tonumber(all[i + 1])
    end
  end
  ended = 2
  for _, c in pairs(by) do
    local closed = (c.ok or 0) + (c.failed or 0) + (c.dead or 0) + (c.skipped or 0)
    if (c.routed or 0) > closed or (c.sitemaps_queued or 0) > (c.sitemaps_done or 0)
      or (c.retrying or 0) > 0 then
      ended = 1
    end
  end
end
if n > 0 then
  local now = tonumber(redis.call('TIME')[1])
  redis.call('HSETNX', KEYS[3], 'start', now)
  local age = now - tonumber(redis.call('HGET', KEYS[3], 'start'))
  local step = 10
"""
    + "".join(f"  if age >= {age} then step = {step} end\n" for age, step in SERIES_STEPS[1:])
    + """
  for i = 4, counts - 1, 2 do
    local domain = hosts[ARGV[i]] ~= nil and FOLDED or ARGV[i]
    redis.call('HINCRBY', KEYS[3], domain .. ' ' .. step .. ' ' .. math.floor(now / step), ARGV[i + 1])
  end
end
return ended
"""
)


@dataclass(frozen=True, slots=True)
class Span:
    """Pages a crawl stored in one domain from `start` (Unix time) for `seconds`."""

    domain: str
    start: float
    seconds: int
    pages: int


@dataclass(frozen=True, slots=True)
class CrawlOptions:
    """A crawl's limits, beyond domains.yaml's: a subset of domains, a depth, a page budget."""

    domains: tuple[str, ...] | None = None
    max_depth: int | None = None
    max_pages: int | None = None
    priority: int | None = None

    def encode(self) -> str:
        """JSON of these options."""
        return json.dumps(asdict(self))

    @classmethod
    def decode(cls, text: str | bytes) -> CrawlOptions:
        """Options from their JSON; tolerant of fields a newer version added."""
        data: dict[str, Any] = json.loads(text)
        domains = data.get("domains")
        return cls(
            domains=tuple(domains) if domains is not None else None,
            max_depth=data.get("max_depth"),
            max_pages=data.get("max_pages"),
            priority=data.get("priority"),
        )


def pending(counts: Mapping[str, int]) -> int:
    """URLs queued and not yet at an outcome, nor waiting for a retry."""
    done = sum(counts.get(k, 0) for k in (*TERMINAL, "retrying"))
    return max(0, counts.get("routed", 0) - done)


def sitemaps_pending(counts: Mapping[str, int]) -> int:
    """Sitemap tasks queued and not yet done (one waiting for a retry counts in "retrying")."""
    return max(0, counts.get("sitemaps_queued", 0) - counts.get("sitemaps_done", 0))


def finished(counts: Mapping[str, Mapping[str, int]]) -> bool:
    """Whether everything a crawl queued has come to an outcome (what the count script decides too)."""
    return bool(counts) and all(
        pending(c) == 0 and sitemaps_pending(c) == 0 and c.get("retrying", 0) <= 0 for c in counts.values()
    )


def reported(counts: Mapping[str, Mapping[str, int]]) -> dict[str, dict[str, int]]:
    """A crawl's counts per domain as every view shows them: ok, failed, retrying, dead, skipped, pending."""
    return {
        domain: {
            "ok": c.get("ok", 0),
            "failed": c.get("failed", 0),
            "retrying": c.get("retrying", 0),
            "dead": c.get("dead", 0),
            "skipped": c.get("skipped", 0),
            "pending": pending(c),
        }
        for domain, c in sorted(counts.items())
    }


def kept(counts: Mapping[str, Mapping[str, int]]) -> dict[str, dict[str, int]]:
    """What a crawl's row keeps once it ended: its counts as reported, and its data quality counts
    (`q:` kinds, crawler/quality/coverage.py), from which its coverage is read ever after."""
    out = reported(counts)
    for domain, c in counts.items():
        out[domain].update({kind: n for kind, n in c.items() if is_quality(kind)})
    return out


def outcomes(counts: Mapping[str, Mapping[str, int]]) -> dict[str, dict[str, int]]:
    """A row's kept counts as the views of outcomes show them: without its quality counts."""
    return {d: {k: n for k, n in c.items() if not is_quality(k)} for d, c in counts.items()}


class CrawlState:
    """One fleet's crawl state in Redis."""

    def __init__(
        self,
        redis: Redis,
        names: Names,
        durable: DomainStore | None = None,
        records: CrawlStore | None = None,
    ) -> None:
        """`durable` keeps the paused domains where a Redis loss cannot reach them (None: Redis only);
        with `records`, the count that ends a crawl marks its record finished (None: not marked)."""
        self._redis = redis
        self._names = names
        self._durable = durable
        self._records = records
        self._options: dict[str, CrawlOptions | None] = {}
        self._count = redis.register_script(_COUNT)

    async def publish(self, crawl: str, options: CrawlOptions) -> None:
        """Make a new crawl's options known to the workers (before its seeds are routed)."""
        await self._redis.set(self._names.crawl_options_key(crawl), options.encode())

    async def options(self, crawl: str) -> CrawlOptions | None:
        """A crawl's options (None: unknown, e.g. forgotten); read once per process."""
        if crawl in self._options:
            return self._options[crawl]
        raw = await self._redis.get(self._names.crawl_options_key(crawl))
        found = CrawlOptions.decode(raw) if raw is not None else None
        if len(self._options) >= MAX_CACHED:
            self._options.clear()
        if found is not None:  # an unknown crawl may yet be published: ask again next time
            self._options[crawl] = found
        return found

    async def cancelled(self, crawl: str) -> bool:
        """Whether `crawl` is cancelled (asked of Redis every time: a cancel takes hold at once)."""
        return bool(await self._redis.sismember(self._names.cancelled_key, crawl))

    async def cancel(self, crawl: str) -> None:
        """Cancel `crawl` fleet-wide: from now on its messages are acked unfetched, its counts frozen."""
        await self._redis.sadd(self._names.cancelled_key, crawl)

    async def open(self, crawl: str, n: int) -> None:
        """Open `n` pieces of work (less, if negative: never published) in `crawl`, before publishing
        them; what dedup claims do for URLs (crawler/dedup/store.py), for work no claim opens."""
        await self._redis.hincrby(self._names.crawl_counts_key(crawl), OPEN_FIELD, n)

    async def count(self, crawl: str, changes: Mapping[tuple[str, str], int]) -> bool:
        """Add to a crawl's counts, keyed (domain, kind); nothing once it is cancelled. True if they
        closed the last of its open work: the crawl ended (its record marked finished, if kept)."""
        done: dict[str, int] = {}
        counted: list[str | int] = []
        for (domain, kind), n in changes.items():
            if n:
                counted += (f"{domain} {kind}", n)
                if kind in DONE:
                    done[domain] = done.get(domain, 0) + n
        if counted:
            series = [x for domain, n in done.items() for x in (domain, n)]
            names = self._names
            own = names.for_crawl(crawl)
            keys = [
                *(names.cancelled_key, names.crawl_counts_key(crawl), names.crawl_series_key(crawl)),
                *(own.hosts_key, own.hosts_queued_key, own.hosts_active_key, own.hosts_waiting_key),
                own.hosts_counts_key,
            ]
            closing = -sum(n for (_, kind), n in changes.items() if kind in CLOSED)
            ended = await self._count(keys=keys, args=[crawl, closing, len(done), *series, *counted])
            if ended == 2:
                if self._records is not None:
                    await self.end(crawl, "finished")
                return True
        return False

    async def end(self, crawl: str, state: CrawlStatus) -> bool:
        """Mark a crawl's record ended now with its counts now; False if it had ended already."""
        if self._records is None:
            return False
        counts = kept(await self.counts(crawl))
        ended = await asyncio.to_thread(self._records.end, crawl, state, counts)
        if ended:
            log.info("crawl %s %s", crawl, state)
        return ended

    async def shown(self, record: CrawlRecord) -> dict[str, dict[str, int]]:
        """A crawl's counts as every view shows them: Redis's while it holds them (every count ever
        added, even one that came after the crawl was marked ended), else those its record kept."""
        live = await self.counts(record.id)
        if record.state == "running" or live:
            return reported(live)
        return outcomes(record.counts or {})

    async def series(self, crawl: str) -> list[Span]:
        """A crawl's pages stored over time, as the spans its series holds (coarser as it aged)."""
        raw: dict[bytes | str, bytes | str] = await self._redis.hgetall(self._names.crawl_series_key(crawl))
        out = []
        for field, value in raw.items():
            text = field.decode() if isinstance(field, bytes) else field
            domain, _, rest = text.partition(" ")
            step, _, index = rest.partition(" ")
            if step.isdigit() and index.isdigit():
                out.append(Span(domain, int(index) * int(step), int(step), int(value)))
        return out

    async def counts(self, crawl: str) -> dict[str, dict[str, int]]:
        """A crawl's counts per domain: every kind of COUNTED, zero if none yet."""
        raw: dict[bytes | str, bytes | str] = await self._redis.hgetall(self._names.crawl_counts_key(crawl))
        out: dict[str, dict[str, int]] = {}
        for field, value in raw.items():
            text = field.decode() if isinstance(field, bytes) else field
            domain, _, kind = text.rpartition(" ")
            if domain:  # not OPEN_FIELD
                out.setdefault(domain, dict.fromkeys(COUNTED, 0))[kind] = int(value)
        return out

    async def forget(self, crawl: str) -> None:
        """Delete a crawl's options, dedup store and counts (its cancellation stays: see service)."""
        keys = [key async for key in self._redis.scan_iter(match=self._names.crawl_keys(crawl), count=1000)]
        keys.append(self._names.crawl_options_key(crawl).encode())
        for i in range(0, len(keys), 1000):
            await self._redis.delete(*keys[i : i + 1000])
        self._options.pop(crawl, None)

    async def paused(self) -> set[str]:
        """The domains paused fleet-wide; read again from the database once Redis lost them."""
        async with self._redis.pipeline(transaction=False) as pipe:
            pipe.smembers(self._names.paused_key)
            pipe.exists(self._names.paused_known_key)
            members, known = await pipe.execute()
        if self._durable is None or known:
            return {m.decode() if isinstance(m, bytes) else m for m in members}
        # Never read (a new fleet), or lost with Redis: the database has the pauses.
        paused = await asyncio.to_thread(self._durable.paused)
        async with self._redis.pipeline(transaction=True) as pipe:
            if paused:
                pipe.sadd(self._names.paused_key, *paused)
            pipe.set(self._names.paused_known_key, "1")
            await pipe.execute()
        return paused | {m.decode() if isinstance(m, bytes) else m for m in members}

    async def pause(self, domain: str) -> None:
        """Pause a domain: every consumer cancels its subscription within PAUSE_POLL."""
        if self._durable is not None:
            await asyncio.to_thread(self._durable.pause, domain)
        await self._redis.sadd(self._names.paused_key, domain)

    async def resume(self, domain: str) -> None:
        """Resume a paused domain: consumers of it subscribe again within PAUSE_POLL."""
        await self._redis.srem(self._names.paused_key, domain)
        if self._durable is not None:
            await asyncio.to_thread(self._durable.resume, domain)
