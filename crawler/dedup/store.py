"""The dedup store: fingerprints of routed URLs in Redis, shared by every process of a crawl.

One protocol in three layouts (`dedup.mode` in domains.yaml, or CRAWLER_DEDUP). A claim stays
*pending* under its claimant (a page's fingerprint) until its publish is confirmed: a redelivered page
may publish its own pending links again, nobody else may; a failed publish is released, and the URL
can be routed again.

- plain: one Redis hash, fingerprint -> claimant, then DONE (~56 bytes per URL).
- compact: exact, fingerprints spread over many small sets that Redis keeps as intsets (~9-12 bytes
  per URL); pending claims in a small hash of their own.
- bloom: a Bloom filter in Redis bitmaps (~1.8 bytes per URL at 0.1 %); a false positive is a URL
  never crawled. A Bloom filter cannot forget, so pending claims live in a small hash of their own.
"""

from __future__ import annotations

import hashlib
import logging
import math
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import ResponseError

from crawler.config import DedupConfig
from crawler.errors import ConfigError, DedupLost
from crawler.names import OPEN_FIELD, Names

log = logging.getLogger(__name__)

# A plain fingerprint's value is its claimant while its publish is unconfirmed, then DONE.
DONE = b"+"
# Compact: fingerprints per bucket at capacity. Redis keeps a set of integers as an intset (8 bytes a
# member, no per-member overhead) up to `set-max-intset-entries` (512 by default), then as a hash
# table (~50 bytes a member). At 256 on average, a bucket passes 512 with odds of about e^-99, and a
# crawl may grow to ~1.5x its capacity before many buckets do.
BUCKET_FILL = 256
# Bloom: bits per bitmap key. Redis strings stop at 512 MB, and a big one is allocated, zeroed and
# deleted in one blocking step: larger filters are split into keys of at most 64 MB.
MAX_BLOOM_KEY_BITS = 2**29
_MISMATCH = "crawler-dedup-layout"
_GONE = "crawler-dedup-gone"
MAX_RECOVERIES = 3  # a claim waits for its store's rebuild at most this often before failing
MAX_CRAWL_STORES = 256  # per-crawl stores a process keeps made

# Every claim first checks that the crawl's store has the layout this process expects (a fleet whose
# processes disagree would each consult a different store, or read a bitmap with other hashes), and
# records it on first use. It also checks that the store was not lost: Redis restarted empty keeps no
# layout (a confirm may have made the meta hash again, with a count), and a process that used the
# store before (`known`) must not go on as if it were new; `reset` marks a store emptied on purpose.
# KEYS[1] the meta hash, KEYS[2] the plain hash, ARGV[1] the layout, a tab and how the caller knows the
# store: `known`, `new` (never used here: ask before creating it) or `create`, then a tab and 1 if the
# store is a crawl's (its first claims open work in the crawl's counts: see CLAIM_LUA) else 0.
_CHECK = """
local sent, how, counted = string.match(ARGV[1], '^(.*)\t(%a+)\t([01])$')
local meta = redis.call('HMGET', KEYS[1], 'layout', 'rebuilding', 'reset')
local layout = meta[1]
if meta[2] then return redis.error_reply('GONE rebuilding') end
if not layout then
  if how ~= 'create' and not meta[3] then
    return redis.error_reply('GONE ' .. how)
  end
  if sent ~= 'plain' and redis.call('EXISTS', KEYS[2]) == 1 then
    return redis.error_reply('MARKER plain')
  end
  redis.call('HSET', KEYS[1], 'layout', sent)
elseif layout ~= sent then
  return redis.error_reply('MARKER ' .. layout)
end
""".replace("MARKER", _MISMATCH).replace("GONE", _GONE)

# A pending claim, the rule of every claim in a hash of claims (this store's, and a sitemap round's,
# crawler/frontier/sitemaps.py): a member unseen is claimed for `claimant` now (2); one pending under
# the same claimant (its page redelivered: its publishes may not have been confirmed) is its own again
# (1); another's is seen (0).
# A crawl ends when the work it opened is all closed (crawler/frontier/crawls.py). A member is opened
# as it is first claimed and before it is published, in the claim's atomic step: opened when its
# page's outcome is counted, a link could end (and close) before it was opened, and the crawl would
# look finished while its parent was still at work. A claim taken again by its own claimant was opened
# by the first. `open_first(out, counted, counts)` opens the claims `out` answered 2, in the hash
# `counts`, if `counted` is '1'.
CLAIM_LUA = (
    """
local function claim(hash, member, claimant)
  if redis.call('HSETNX', hash, member, claimant) == 1 then
    return 2
  elseif redis.call('HGET', hash, member) == claimant then
    return 1
  end
  return 0
end
local function open_first(out, counted, counts)
  local opened = 0
  for _, x in ipairs(out) do
    if x == 2 then opened = opened + 1 end
  end
  if counted == '1' and opened > 0 then redis.call('HINCRBY', counts, '"""
    + OPEN_FIELD
    + """', opened) end
end
"""
)

# KEYS: meta, plain hash, the crawl's counts. ARGV: layout, claimant, fingerprints.
_PLAIN_CLAIM = (
    _CHECK
    + CLAIM_LUA
    + """
local out = {}
for i = 3, #ARGV do
  out[#out + 1] = claim(KEYS[2], ARGV[i], ARGV[2])
end
open_first(out, counted, KEYS[3])
return out
"""
)

# KEYS: meta, plain hash, pending, the crawl's counts, one bucket per fingerprint. ARGV: layout,
# claimant, then (fingerprint, member) pairs. Compact and Bloom claims pend in a hash of their own.
_COMPACT_CLAIM = (
    _CHECK
    + CLAIM_LUA
    + """
local out = {}
for i = 1, (#ARGV - 2) / 2 do
  if redis.call('SISMEMBER', KEYS[4 + i], ARGV[2 + 2 * i]) == 1 then
    out[i] = 0
  else
    out[i] = claim(KEYS[3], ARGV[1 + 2 * i], ARGV[2])
  end
end
open_first(out, counted, KEYS[4])
return out
"""
)

# KEYS: meta, pending, one bucket per fingerprint. ARGV: (fingerprint, member) pairs. Returns the count.
_COMPACT_CONFIRM = """
local added = 0
for i = 1, #ARGV / 2 do
  added = added + redis.call('SADD', KEYS[2 + i], ARGV[2 * i])
  redis.call('HDEL', KEYS[2], ARGV[2 * i - 1])
end
return redis.call('HINCRBY', KEYS[1], 'count', added)
"""

# BITFIELD arguments probing a URL's k bits, offsets by double hashing: h1 + j * h2 mod bits, exact
# in Lua's doubles (h1, h2 < 2^32). One table per script call, its offsets rewritten for each URL.
_PROBES = """
local function prober(op, k)
  local args, step = {}, op == 'SET' and 4 or 3
  for j = 0, k - 1 do
    args[j * step + 1] = op
    args[j * step + 2] = 'u1'
    if op == 'SET' then args[j * step + 4] = 1 end
  end
  return function(h1, h2, bits)
    for j = 0, k - 1 do
      args[j * step + 3] = (h1 + j * h2) % bits
    end
    return args
  end
end
"""

# KEYS: meta, plain hash, pending, the crawl's counts, one bitmap per fingerprint. ARGV: layout,
# claimant, k, bits per bitmap, then (fingerprint, h1, h2) triples.
_BLOOM_CLAIM = (
    _CHECK
    + CLAIM_LUA
    + _PROBES
    + """
local k, bits = tonumber(ARGV[3]), tonumber(ARGV[4])
local probes = prober('GET', k)
local out = {}
for i = 1, (#ARGV - 4) / 3 do
  local at = 2 + 3 * i
  local got = redis.call('BITFIELD_RO', KEYS[4 + i],
    unpack(probes(tonumber(ARGV[at + 1]), tonumber(ARGV[at + 2]), bits)))
  local all = 1
  for _, bit in ipairs(got) do
    if bit == 0 then all = 0 break end
  end
  if all == 1 then
    out[i] = 0
  else
    out[i] = claim(KEYS[3], ARGV[at], ARGV[2])
  end
end
open_first(out, counted, KEYS[4])
return out
"""
)

# A claim released (its publish failed) closes what its first claim opened: it will be claimed, and
# opened, again. KEYS: the hash of claims, the crawl's counts. ARGV: 1 if counted, fingerprints.
_RELEASE = (
    """
local n = 0
for i = 2, #ARGV, 1000 do  -- unpack() is bounded by Lua's stack
  n = n + redis.call('HDEL', KEYS[1], unpack(ARGV, i, math.min(i + 999, #ARGV)))
end
if ARGV[1] == '1' and n > 0 then redis.call('HINCRBY', KEYS[2], '"""
    + OPEN_FIELD
    + """', -n) end
return n
"""
)

# KEYS: meta, pending, one bitmap per fingerprint. ARGV: k, bits per bitmap, then (fingerprint, h1,
# h2) triples. A URL counts as added when it set a bit. Returns the count.
# A bitmap is made whole at its first write: SETBIT would grow the string greedily (by 1 MB past
# 1 MB), which costs ~1.3 bytes per URL at a million URLs and nothing afterwards.
_BLOOM_CONFIRM = (
    _PROBES
    + """
local k, bits = tonumber(ARGV[1]), tonumber(ARGV[2])
local probes = prober('SET', k)
local added = 0
local whole = {}
for i = 1, (#ARGV - 2) / 3 do
  local at = 3 * i
  local key = KEYS[2 + i]
  if not whole[key] then
    whole[key] = true
    if redis.call('EXISTS', key) == 0 then
      redis.call('SET', key, string.rep('\\0', math.ceil(bits / 8)))
    end
  end
  local old = redis.call('BITFIELD', key,
    unpack(probes(tonumber(ARGV[at + 1]), tonumber(ARGV[at + 2]), bits)))
  for _, bit in ipairs(old) do
    if bit == 0 then added = added + 1 break end
  end
  redis.call('HDEL', KEYS[2], ARGV[at])
end
return redis.call('HINCRBY', KEYS[1], 'count', added)
"""
)


async def release_claims(
    redis: Redis, claims: str, opened: str | None, members: Sequence[bytes | str]
) -> None:
    """Delete `members` from the hash of claims `claims`; with `opened` (a crawl's counts), close the
    work their first claims opened there. Only a failed publish releases: rare, so unregistered."""
    keys = [claims, opened or claims]
    await redis.register_script(_RELEASE)(keys=keys, args=[0 if opened is None else 1, *members])


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def compact_buckets(config: DedupConfig) -> int:
    """The compact store's bucket count: the configured one, else capacity / BUCKET_FILL."""
    return config.buckets or max(2, math.ceil(config.capacity / BUCKET_FILL))


@dataclass(frozen=True, slots=True)
class BloomShape:
    """A Bloom filter's size: `keys` bitmaps of `bits` bits each, `hashes` probes per URL."""

    keys: int
    bits: int
    hashes: int

    @property
    def total_bytes(self) -> int:
        """Memory of the bitmaps once full-grown."""
        return self.keys * math.ceil(self.bits / 8)

    def false_positive_rate(self, urls: int) -> float:
        """The expected false-positive rate once `urls` distinct URLs are in."""
        per_key = urls / self.keys
        return float((1 - math.exp(-self.hashes * per_key / self.bits)) ** self.hashes)


def bloom_shape(capacity: int, error_rate: float) -> BloomShape:
    """The smallest Bloom filter holding `capacity` URLs at `error_rate`, split into bitmaps of at
    most MAX_BLOOM_KEY_BITS (each a filter of its own for the URLs hashed to it)."""
    total = math.ceil(-capacity * math.log(error_rate) / math.log(2) ** 2)
    keys = math.ceil(total / MAX_BLOOM_KEY_BITS)
    bits = math.ceil(total / keys)
    hashes = max(1, round(bits * keys / capacity * math.log(2)))
    return BloomShape(keys, bits, hashes)


class _Layout:
    """One way of keeping the seen set in Redis."""

    name = ""

    def __init__(self, redis: Redis, names: Names) -> None:
        self.redis = redis
        self.names = names

    async def claim(self, fingerprints: Sequence[bytes], claimant: bytes, how: str) -> list[Any]:
        raise NotImplementedError

    def tag(self, how: str) -> str:
        """The claim scripts' first argument: the layout, how the caller knows the store, and
        whether first claims open work in a crawl's counts."""
        return f"{self.name}\t{how}\t{0 if self.names.crawl is None else 1}"

    @property
    def opened_key(self) -> str:
        """Where first claims count as work opened: the crawl's counts (the default crawl has none:
        a key the scripts are given but never write)."""
        crawl = self.names.crawl
        return self.names.seen_meta_key if crawl is None else self.names.crawl_counts_key(crawl)

    async def _released(self, claims: str, fingerprints: Sequence[bytes]) -> None:
        opened = None if self.names.crawl is None else self.opened_key
        await release_claims(self.redis, claims, opened, fingerprints)

    async def confirm(self, fingerprints: Sequence[bytes]) -> int | None:
        raise NotImplementedError

    async def release(self, fingerprints: Sequence[bytes]) -> None:
        await self._released(self.names.seen_pending_key, fingerprints)

    async def count(self) -> int:
        return int(await self.redis.hget(self.names.seen_meta_key, "count") or 0)


class _Plain(_Layout):
    name = "plain"

    def __init__(self, redis: Redis, names: Names) -> None:
        super().__init__(redis, names)
        self._claim = redis.register_script(_PLAIN_CLAIM)

    async def claim(self, fingerprints: Sequence[bytes], claimant: bytes, how: str) -> list[Any]:
        keys = [self.names.seen_meta_key, self.names.seen_key, self.opened_key]
        result: list[Any] = await self._claim(keys=keys, args=[self.tag(how), claimant, *fingerprints])
        return result

    async def confirm(self, fingerprints: Sequence[bytes]) -> int | None:
        await self.redis.hset(self.names.seen_key, mapping=dict.fromkeys(fingerprints, DONE))
        return None

    async def release(self, fingerprints: Sequence[bytes]) -> None:
        await self._released(self.names.seen_key, fingerprints)

    async def count(self) -> int:
        return int(await self.redis.hlen(self.names.seen_key))


class _Spread(_Layout):
    """A layout spreading fingerprints over many keys, with claims pending until confirmed."""

    def __init__(
        self, redis: Redis, names: Names, claim: str, confirm: str, shape: Sequence[int] = ()
    ) -> None:
        super().__init__(redis, names)
        self._claim = redis.register_script(claim)
        self._confirm = redis.register_script(confirm)
        self._shape = list(shape)  # the scripts' leading arguments, before the fingerprints'

    def _split(self, fingerprints: Sequence[bytes]) -> tuple[list[str], list[bytes | int]]:
        """The keys holding each fingerprint, and the scripts' arguments for it."""
        raise NotImplementedError

    async def claim(self, fingerprints: Sequence[bytes], claimant: bytes, how: str) -> list[Any]:
        spread, args = self._split(fingerprints)
        keys = [self.names.seen_meta_key, self.names.seen_key, self.names.seen_pending_key, self.opened_key]
        keys += spread
        result: list[Any] = await self._claim(keys=keys, args=[self.tag(how), claimant, *self._shape, *args])
        return result

    async def confirm(self, fingerprints: Sequence[bytes]) -> int | None:
        spread, args = self._split(fingerprints)
        keys = [self.names.seen_meta_key, self.names.seen_pending_key, *spread]
        return int(await self._confirm(keys=keys, args=[*self._shape, *args]))


class _Compact(_Spread):
    def __init__(self, redis: Redis, names: Names, buckets: int) -> None:
        super().__init__(redis, names, _COMPACT_CLAIM, _COMPACT_CONFIRM)
        self.buckets = buckets
        self.name = f"compact/1 buckets={buckets}"

    def _split(self, fingerprints: Sequence[bytes]) -> tuple[list[str], list[bytes | int]]:
        # The whole fingerprint is kept, as (bucket, member): no precision is lost to the bucket.
        # Members stay below 2^63, so Redis stores them as 64-bit integers.
        keys: list[str] = []
        args: list[bytes | int] = []
        for fp in fingerprints:
            member, bucket = divmod(int.from_bytes(fp, "big"), self.buckets)
            keys.append(self.names.seen_bucket_key(bucket))
            args += (fp, member)
        return keys, args


class _Bloom(_Spread):
    def __init__(self, redis: Redis, names: Names, shape: BloomShape) -> None:
        super().__init__(redis, names, _BLOOM_CLAIM, _BLOOM_CONFIRM, shape=(shape.hashes, shape.bits))
        self.shape = shape
        self.name = f"bloom/1 keys={shape.keys} bits={shape.bits} k={shape.hashes}"

    def _split(self, fingerprints: Sequence[bytes]) -> tuple[list[str], list[bytes | int]]:
        # Three independent numbers per URL (bitmap, h1, h2) stretched from its fingerprint: the
        # fingerprint's own 64 bits would tie the choice of bitmap to the bits probed in it.
        keys: list[str] = []
        args: list[bytes | int] = []
        for fp in fingerprints:
            digest = hashlib.blake2b(fp, digest_size=12, person=b"crawler-bloom").digest()
            keys.append(self.names.seen_bloom_key(int.from_bytes(digest[:4], "big") % self.shape.keys))
            args += (fp, int.from_bytes(digest[4:8], "big"), int.from_bytes(digest[8:], "big") | 1)
        return keys, args


# Called when a claim finds its store gone ("known": lost since this process used it; "new": never
# seen here, lost or not made yet; "rebuilding": being rebuilt). It returns once the store is usable.
Recover = Callable[["SeenStore", str], Awaitable[None]]


class SeenStore:
    """Which canonical URLs were already routed, keyed by fingerprint, in the configured layout."""

    def __init__(
        self, redis: Redis, names: Names, config: DedupConfig | None = None, recover: Recover | None = None
    ) -> None:
        self.config = config or DedupConfig()
        self.crawl = names.crawl
        # None: a store found missing is made afresh, as if Redis had never held it (no sink to ask).
        self.recover = recover
        self._redis = redis
        self._names = names
        self._warned = False
        self._known = False  # this process used the store: finding it gone means Redis lost it
        self._crawls: dict[str | None, SeenStore] = {names.crawl: self}
        self._layout: _Layout
        if self.config.mode == "compact":
            self._layout = _Compact(redis, names, compact_buckets(self.config))
        elif self.config.mode == "bloom":
            self._layout = _Bloom(redis, names, bloom_shape(self.config.capacity, self.config.error_rate))
        else:
            self._layout = _Plain(redis, names)

    def for_crawl(self, crawl: str | None) -> SeenStore:
        """The store of crawl `crawl` (None: the default crawl), same layout: dedup is per crawl."""
        store = self._crawls.get(crawl)
        if store is None:
            if len(self._crawls) > MAX_CRAWL_STORES:  # a long-lived worker sees crawl after crawl
                self._crawls = {self._names.crawl: self}
            store = SeenStore(self._redis, self._names.for_crawl(crawl), self.config, self.recover)
            self._crawls[crawl] = store
        return store

    @property
    def layout(self) -> str:
        """The store's layout as recorded in Redis, e.g. `compact/1 buckets=39063`."""
        return self._layout.name

    async def check(self) -> None:
        """Raise ConfigError if the crawl's store was made with other dedup settings than these."""
        await self._claimed([], b"")

    async def claim(self, fingerprints: Sequence[bytes], claimant: bytes) -> list[bool]:
        """For each fingerprint, True if `claimant` should publish it (unseen, or its own pending)."""
        if not fingerprints:
            return []
        return await self._claimed(fingerprints, claimant)

    async def _claimed(self, fingerprints: Sequence[bytes], claimant: bytes) -> list[bool]:
        for _ in range(MAX_RECOVERIES):
            how = "create" if self.recover is None else "known" if self._known else "new"
            try:
                result = await self._layout.claim(fingerprints, claimant, how)
            except ResponseError as exc:
                text = str(exc)
                if _GONE not in text or self.recover is None:
                    self._refuse(text)
                    raise
                await self.recover(self, text.split(_GONE, 1)[1].strip())
                continue
            self._known = True
            return [bool(x) for x in result]
        raise DedupLost(
            f"the dedup store with prefix {self._names.prefix!r} (crawl {self.crawl or 'default'}) was "
            f"still missing after {MAX_RECOVERIES} rebuilds from the sink; is Redis restarting in a loop?"
        )

    def _refuse(self, text: str) -> None:
        """Raise ConfigError if a claim was refused for a layout mismatch."""
        if _MISMATCH in text:
            found = text.split(_MISMATCH, 1)[1].strip()
            raise ConfigError(
                f"the crawl with prefix {self._names.prefix!r} keeps its seen URLs as {found!r}, but "
                f"this process is set up for {self.layout!r} (`dedup` in domains.yaml, CRAWLER_DEDUP): "
                "every process of a crawl must use the same dedup settings; set them back, or start "
                "over with `crawler reset`"
            ) from None

    async def confirm(self, fingerprints: Sequence[bytes]) -> None:
        """Mark fingerprints published for good."""
        if not fingerprints:
            return
        count = await self._layout.confirm(fingerprints)
        if count is not None and count > self.config.capacity and not self._warned:
            self._warned = True
            log.warning(
                "the %s dedup store holds %d URLs, more than dedup.capacity (%d): it stays correct but "
                "grows %s; size the next crawl larger",
                self.config.mode,
                count,
                self.config.capacity,
                "less compact" if self.config.mode == "compact" else "more false positives",
            )

    async def release(self, fingerprints: Sequence[bytes]) -> None:
        """Forget fingerprints whose publish failed, so they can be routed again."""
        if fingerprints:
            await self._layout.release(fingerprints)

    async def count(self) -> int:
        """How many URLs were routed (plain: claims pending included; Bloom: false positives not)."""
        return await self._layout.count()

    # -- a store lost with Redis, rebuilt from the sink (crawler/frontier/recovery.py) ------------

    async def state(self) -> dict[str, str]:
        """The store's meta hash: layout, and `rebuilding` / `rebuilt` (a time) once Redis lost it."""
        raw: dict[bytes | str, bytes | str] = await self._redis.hgetall(self._names.seen_meta_key)
        return {_text(k): _text(v) for k, v in raw.items()}

    async def create(self) -> None:
        """Make the store afresh: nothing was routed in it yet."""
        await self._layout.claim([], b"", "create")
        self._known = True

    async def begin_rebuild(self) -> None:
        """Mark the store as being rebuilt: every claim waits (GONE rebuilding) until `end_rebuild`."""
        await self._redis.hset(self._names.seen_meta_key, mapping={"layout": self.layout, "rebuilding": "1"})

    async def restore(self, fingerprints: Sequence[bytes]) -> None:
        """Put back fingerprints of pages already stored, as routed for good."""
        if fingerprints:
            await self._layout.confirm(fingerprints)

    async def end_rebuild(self) -> None:
        """The store is whole again: claims go on, and first deliveries are checked with `take`."""
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.hdel(self._names.seen_meta_key, "rebuilding")
            pipe.hset(self._names.seen_meta_key, "rebuilt", f"{time.time():.3f}")
            await pipe.execute()
        self._known = True

    async def take(self, fp: bytes, taker: bytes) -> bool:
        """Claim a page for fetching, once per crawl: False if another delivery of it took it first.

        Used only after a rebuild, when a URL queued before Redis was lost may have been queued again.
        `taker` names this try: a command the client sends again after losing its answer (a worker
        cut off mid-call) finds its own mark, not another's, and the page is not skipped by both.
        """
        key = self._names.seen_taken_key
        if await self._redis.hsetnx(key, fp, taker):
            return True
        return bool(await self._redis.hget(key, fp) == taker)

    async def forgotten(self) -> None:
        """Mark the store as emptied on purpose (`crawler reset`): not lost, nothing to rebuild."""
        await self._redis.hset(self._names.seen_meta_key, "reset", f"{time.time():.3f}")
