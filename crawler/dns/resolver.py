"""A host's addresses, resolved once per TTL for the whole fleet: answers and failures kept in Redis.

One resolver of the fleet looks a host up while the others wait for its answer. An answer is kept for
its TTL (within the floor and ceiling of `dns:`), NXDOMAIN for the zone's negative TTL. A timeout or a
failing name server is not asked again for `backoff` seconds, doubling; `park_after` failures in a row
park the host for `park_for`. A process keeps what it read until the fleet's copy expires.
"""

from __future__ import annotations

import asyncio
import ipaddress
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

from redis.asyncio import Redis

from crawler.dns.lookup import IPAddress, Upstream, upstream_for
from crawler.errors import HostParked, NoSuchHost, ResolveFailed
from crawler.names import DNS_LOCK_GRACE, Names
from crawler.openweb import DnsConfig

# Entries this process keeps of what it read from the fleet's cache (each until the fleet's expires).
LOCAL_ENTRIES = 16_384
# A resolver waiting on another's lookup reads the fleet's cache again after this, doubling, at most
# WAIT_MOST apart.
WAIT_FIRST, WAIT_MOST = 0.01, 0.25

# A host's entry (KEYS[1]) is one string: `A addr addr ...` (its addresses), `N why` (it has none),
# or `F fails retry_ms why` (failures in a row; not asked before retry_ms of the server's clock).
# KEYS[2] the host's lookup lock. ARGV[1] the lock's life (ms), ARGV[2] this resolver's token.
# Returns {entry or '', ms it is good for, 1 if this resolver must look the host up}.
_READ = """
local entry = redis.call('GET', KEYS[1])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if entry then
  if string.sub(entry, 1, 1) ~= 'F' then return {entry, redis.call('PTTL', KEYS[1]), 0} end
  local retry = tonumber(string.match(entry, '^F %d+ (%d+)'))
  if retry > now then return {entry, retry - now, 0} end
end
if redis.call('SET', KEYS[2], ARGV[2], 'NX', 'PX', ARGV[1]) then return {entry or '', 0, 1} end
return {entry or '', 0, 0}
"""

# KEYS as _READ's, and KEYS[3] the parked hosts. ARGV[1] the host, ARGV[2] this resolver's token,
# ARGV[3] 'A', 'N' or 'F', ARGV[4] the addresses or why, ARGV[5] the TTL (ms; A and N), ARGV[6] the
# first back-off, ARGV[7] its most, ARGV[8] park_after, ARGV[9] park_for (ms; F).
# Returns the entry written and the ms it is good for.
_WRITE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local entry, good
if ARGV[3] ~= 'F' then
  entry, good = ARGV[3] .. ' ' .. ARGV[4], tonumber(ARGV[5])
  redis.call('SET', KEYS[1], entry, 'PX', good)
  redis.call('ZREM', KEYS[3], ARGV[1])
else
  local old = redis.call('GET', KEYS[1])
  local fails = 1
  if old and string.sub(old, 1, 1) == 'F' then fails = tonumber(string.match(old, '^F (%d+)')) + 1 end
  local park = tonumber(ARGV[9])
  if fails >= tonumber(ARGV[8]) then
    good = park
    redis.call('ZADD', KEYS[3], now + good, ARGV[1])
  else
    good = math.min(tonumber(ARGV[7]), tonumber(ARGV[6]) * 2 ^ (fails - 1))
  end
  entry = 'F ' .. fails .. ' ' .. string.format('%d', now + good) .. ' ' .. ARGV[4]
  -- the streak outlives the back-off, so a failure after it counts on from there
  redis.call('SET', KEYS[1], entry, 'PX', string.format('%d', good + park))
end
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
if redis.call('GET', KEYS[2]) == ARGV[2] then redis.call('DEL', KEYS[2]) end
return {entry, string.format('%d', good)}
"""


@dataclass(frozen=True, slots=True)
class Resolved:
    """A host's addresses, and how many seconds the answer is good for."""

    host: str
    addresses: tuple[IPAddress, ...]
    ttl: float


class HostResolver:
    """Resolves hosts through the fleet's cache in Redis, asking `upstream` (by default the name
    servers of `config`, or the system's resolver) only for what no one resolved within its TTL."""

    def __init__(
        self,
        redis: Redis,
        names: Names,
        config: DnsConfig,
        upstream: Upstream | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._names = names
        self._config = config
        self._upstream = upstream or upstream_for(config.nameservers, config.timeout)
        self._read = redis.register_script(_READ)
        self._write = redis.register_script(_WRITE)
        self._redis = redis
        self._clock = clock
        self._token = uuid.uuid4().hex
        self._local: OrderedDict[str, tuple[float, str]] = OrderedDict()  # host -> (good until, entry)
        self._flights: dict[str, asyncio.Future[str]] = {}
        self.lookups = 0  # lookups this process sent upstream

    async def resolve(self, host: str) -> Resolved:
        """The addresses of canonical `host`: NoSuchHost if it has none, ResolveFailed (HostParked
        once it kept failing) if that cannot be told before `retry_after` seconds."""
        now = self._clock()
        kept = self._local.get(host)
        if kept is not None and kept[0] > now:
            return _answer(host, kept[1], kept[0] - now, self._config.park_after)
        flight = self._flights.get(host)
        if flight is None:
            flight = asyncio.ensure_future(self._fleet(host))
            self._flights[host] = flight
            flight.add_done_callback(lambda _: self._flights.pop(host, None))
        entry = await asyncio.shield(flight)
        until = self._local[host][0] if host in self._local else now
        return _answer(host, entry, max(0.0, until - self._clock()), self._config.park_after)

    async def parked(self) -> int:
        """How many hosts are parked now, fleet-wide."""
        seconds, micros = await self._redis.time()
        now_ms = seconds * 1000 + micros // 1000
        return int(await self._redis.zcount(self._names.dns_parked_key, now_ms, "+inf"))

    async def _fleet(self, host: str) -> str:
        keys = [self._names.dns_key(host), self._names.dns_lock_key(host)]
        lock_ms = int((self._config.timeout + DNS_LOCK_GRACE) * 1000)
        pause = WAIT_FIRST
        while True:
            entry, good_ms, mine = await self._read(keys=keys, args=[lock_ms, self._token])
            entry = entry.decode() if isinstance(entry, bytes) else str(entry)
            if int(mine):
                return await self._look_up(host, keys)
            if int(good_ms) > 0:
                return self._keep(host, entry, int(good_ms))
            # Another resolver of the fleet is looking it up: its answer lands in the cache.
            await asyncio.sleep(pause)
            pause = min(WAIT_MOST, pause * 2)

    async def _look_up(self, host: str, keys: list[str]) -> str:
        self.lookups += 1
        config = self._config
        try:
            found = await self._upstream.lookup(host)
        except ResolveFailed as exc:
            kind, what, ttl = "F", str(exc), 0.0
        else:
            if found.missing is not None:
                kind, what, ttl = "N", found.missing, config.kept(found.ttl, negative=True)
            else:
                kind, what, ttl = "A", " ".join(map(str, found.addresses)), config.kept(found.ttl)
        failure = [
            int(config.backoff * 1000),
            int(config.max_backoff * 1000),
            config.park_after,
            int(config.park_for * 1000),
        ]
        keys = [*keys, self._names.dns_parked_key]
        args: list[str | int] = [host, self._token, kind, what, max(1, int(ttl * 1000)), *failure]
        entry, good_ms = await self._write(keys=keys, args=args)
        return self._keep(host, entry.decode(), int(good_ms))

    def _keep(self, host: str, entry: str, good_ms: int) -> str:
        self._local[host] = (self._clock() + good_ms / 1000, entry)
        self._local.move_to_end(host)
        while len(self._local) > LOCAL_ENTRIES:
            self._local.popitem(last=False)
        return entry


@lru_cache(maxsize=LOCAL_ENTRIES)
def _addresses(spelled: str) -> tuple[IPAddress, ...]:
    return tuple(ipaddress.ip_address(a) for a in spelled.split())


def _answer(host: str, entry: str, good: float, park_after: int) -> Resolved:
    kind, _, rest = entry.partition(" ")
    if kind == "A":
        return Resolved(host, _addresses(rest), good)
    if kind == "N":
        raise NoSuchHost(rest)
    fails, _, rest = rest.partition(" ")
    why = rest.partition(" ")[2]
    if int(fails) >= park_after:
        raise HostParked(f"{why}; parked after {fails} failures in a row", retry_after=good)
    raise ResolveFailed(f"{why} (failure {fails} in a row)", retry_after=good)
