"""The near-duplicate index: pages' simhashes in Redis, shared by the fleet, searched within a Hamming
distance (default 3) in one round trip.

Permuted tables (Manku, Jain, Das Sarma, WWW 2007): the 64 bits are cut into distance + 1 blocks
(4 blocks of 16 bits at distance 3). Two simhashes within the distance differ in at most that many
blocks, so at least one block is equal: table i files each simhash under the value of its block i,
and a search reads one bucket per table and measures only the simhashes in them. A bucket is a
Redis set of the simhashes' other bits (at most 52 of them: an integer Lua's doubles hold exactly,
and a member an intset keeps in 8 bytes); a hash maps each simhash to the first page that had it.
Searching and, when nothing is near, storing happen in one script, so two processes claiming
near-duplicates at the same time do not both become originals.

Scale: a search measures about tables x N / 2^16 stored simhashes at distance 3 (60 at a million
pages; Redis runs them in the script, ~1 µs each).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from redis.asyncio import Redis

from crawler.errors import ConfigError
from crawler.names import Names

BITS = 64
DEFAULT_DISTANCE = 3
# Past 4, blocks are narrower than 12 bits: a simhash's other bits no longer fit a Lua number, and
# every bucket holds a 1/2^11 share of the index or more. Near-duplicates are found well within 4.
MAX_DISTANCE = 4
_MASK = (1 << BITS) - 1

# KEYS: one bucket per table, then the pages hash. ARGV[1] the distance, ARGV[2] `claim` or `find`,
# ARGV[3] the simhash (decimal: the pages hash's field), ARGV[4] the page, ARGV[5..] the simhash's other
# bits in each table. Returns every stored simhash within the distance as {table, other bits,
# distance}, flattened; none found and `claim`: stores the simhash for the page and returns {}.
_SEARCH = """
local function ones(x)
  local n = 0
  while x ~= 0 do
    x = bit.band(x, x - 1)
    n = n + 1
  end
  return n
end
local tables = #KEYS - 1
local limit = tonumber(ARGV[1])
local found = {}
for i = 1, tables do
  local mine = tonumber(ARGV[4 + i])
  local mine_high, mine_low = math.floor(mine / 4294967296), mine % 4294967296
  for _, member in ipairs(redis.call('SMEMBERS', KEYS[i])) do
    local other = tonumber(member)
    local d = ones(bit.bxor(math.floor(other / 4294967296), mine_high))
      + ones(bit.bxor(other % 4294967296, mine_low))
    if d <= limit then
      found[#found + 1] = i
      found[#found + 1] = member
      found[#found + 1] = d
    end
  end
end
if #found == 0 and ARGV[2] == 'claim' then
  for i = 1, tables do
    redis.call('SADD', KEYS[i], ARGV[4 + i])
  end
  redis.call('HSETNX', KEYS[tables + 1], ARGV[3], ARGV[4])
end
return found
"""

# KEYS as above; ARGV[1] the simhash, ARGV[2] the page, ARGV[3..] its other bits in each table.
# Removes the simhash if it is stored for that page (another page's entry stays).
_REMOVE = """
local tables = #KEYS - 1
if redis.call('HGET', KEYS[tables + 1], ARGV[1]) ~= ARGV[2] then
  return 0
end
for i = 1, tables do
  redis.call('SREM', KEYS[i], ARGV[2 + i])
end
redis.call('HDEL', KEYS[tables + 1], ARGV[1])
return 1
"""


@dataclass(frozen=True, slots=True)
class Block:
    """Bits [low, low + width) of a simhash: the key of one table."""

    low: int
    width: int

    def value(self, simhash: int) -> int:
        """This block's bits of `simhash`."""
        return (simhash >> self.low) & ((1 << self.width) - 1)

    def rest(self, simhash: int) -> int:
        """The other bits of `simhash`, closed up: what a bucket of this table holds."""
        below = simhash & ((1 << self.low) - 1)
        return below | ((simhash >> (self.low + self.width)) << self.low)

    def join(self, value: int, rest: int) -> int:
        """The simhash whose block is `value` and other bits `rest`."""
        below = rest & ((1 << self.low) - 1)
        return below | (value << self.low) | ((rest >> self.low) << (self.low + self.width))


def blocks_for(distance: int) -> tuple[Block, ...]:
    """distance + 1 blocks covering the 64 bits, as even as they come (the wider ones first)."""
    if not 0 <= distance <= MAX_DISTANCE:
        raise ConfigError(
            f"near-duplicate distance {distance} is out of range: use 0 to {MAX_DISTANCE} "
            f"(bits that may differ between two pages' simhashes; {DEFAULT_DISTANCE} by default)"
        )
    count = distance + 1
    base, wider = divmod(BITS, count)
    blocks, low = [], 0
    for i in range(count):
        width = base + (1 if i < wider else 0)
        blocks.append(Block(low, width))
        low += width
    return tuple(blocks)


@dataclass(frozen=True, slots=True)
class NearMatch:
    """A stored page near the one asked about: its simhash and their Hamming distance. `page` is None
    if the index lost that simhash's page (its hash entry was deleted by hand)."""

    page: str | None
    simhash: int
    distance: int


class NearIndex:
    """Pages' simhashes under one prefix, for every crawl and process; tables for one distance."""

    def __init__(self, redis: Redis, names: Names, distance: int = DEFAULT_DISTANCE) -> None:
        self.distance = distance
        self._redis = redis
        self._names = names
        self._blocks = blocks_for(distance)
        self._search = redis.register_script(_SEARCH)
        self._remove = redis.register_script(_REMOVE)

    def _keys(self, simhash: int) -> list[str]:
        tables = len(self._blocks)
        buckets = [
            self._names.near_bucket_key(tables, i, b.value(simhash)) for i, b in enumerate(self._blocks)
        ]
        return [*buckets, self._names.near_pages_key(tables)]

    def _rests(self, simhash: int) -> list[int]:
        return [b.rest(simhash) for b in self._blocks]

    async def claim(self, simhash: int, page: str) -> NearMatch | None:
        """The stored page nearest to `simhash` within the distance, other than `page` itself; with
        none, `simhash` is stored for `page` (atomically with the search) and None returned."""
        simhash = _checked(simhash)
        found = await self._run_search(simhash, page, "claim")
        if not found:
            return None
        match = await self._nearest(found, page)
        if match is None:  # only the page's own earlier simhash is near: file this one as well
            await self.add(simhash, page)
        return match

    async def find(self, simhash: int, page: str | None = None) -> NearMatch | None:
        """The stored page nearest to `simhash` within the distance (other than `page`); stores nothing."""
        found = await self._run_search(_checked(simhash), page or "", "find")
        return await self._nearest(found, page) if found else None

    async def add(self, simhash: int, page: str) -> None:
        """Store `simhash` for `page` (a simhash already stored keeps its first page)."""
        simhash = _checked(simhash)
        keys = self._keys(simhash)
        async with self._redis.pipeline(transaction=True) as pipe:
            for key, rest in zip(keys, self._rests(simhash), strict=False):
                pipe.sadd(key, rest)
            pipe.hsetnx(keys[-1], str(simhash), page)
            await pipe.execute()

    async def remove(self, simhash: int, page: str) -> bool:
        """Forget `simhash` if it is stored for `page` (its text changed, or it is gone); True if it was."""
        simhash = _checked(simhash)
        keys = self._keys(simhash)
        removed = await self._remove(keys=keys, args=[str(simhash), page, *self._rests(simhash)])
        return bool(removed)

    async def _run_search(self, simhash: int, page: str, mode: str) -> list[tuple[int, int]]:
        args: list[str | int] = [self.distance, mode, str(simhash), page, *self._rests(simhash)]
        flat: Sequence[bytes | int] = await self._search(keys=self._keys(simhash), args=args)
        found = []
        for at in range(0, len(flat), 3):
            table, rest = int(flat[at]), int(flat[at + 1])
            block = self._blocks[table - 1]
            found.append((block.join(block.value(simhash), rest), int(flat[at + 2])))
        return found

    async def _nearest(self, found: list[tuple[int, int]], page: str | None) -> NearMatch | None:
        """The nearest of `found` (simhash, distance) that is not `page`; one simhash may be in several
        tables' answers."""
        unique = sorted(dict(found).items(), key=lambda item: (item[1], item[0]))
        pages = await self._redis.hmget(
            self._names.near_pages_key(len(self._blocks)), [str(s) for s, _ in unique]
        )
        for (simhash, distance), stored in zip(unique, pages, strict=True):
            owner = stored.decode() if isinstance(stored, bytes) else stored
            if owner is None or owner != page:
                return NearMatch(owner, simhash, distance)
        return None


class NearIndexes:
    """The index at each distance domains ask for (each distance has tables of its own), made once."""

    def __init__(self, redis: Redis, names: Names) -> None:
        self._redis = redis
        self._names = names
        self._made: dict[int, NearIndex] = {}

    def at(self, distance: int) -> NearIndex:
        """The index searched within `distance` bits."""
        index = self._made.get(distance)
        if index is None:
            index = self._made[distance] = NearIndex(self._redis, self._names, distance)
        return index


def _checked(simhash: int) -> int:
    if not 0 <= simhash <= _MASK:
        raise ValueError(f"a simhash is a 64-bit unsigned integer, not {simhash}")
    return simhash
