"""The exit pool, held in Redis so that every gateway replica sees one pool.

Choosing an exit is one Lua call: it reads the candidates' state and reserves the chosen one in a
single atomic step (Redis's own clock), so two replicas never both send a request to a domain
through one exit closer than min_interval, nor push an exit past its in-flight cap.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from redis.asyncio import Redis

from crawler.gateway.proxies import Exit, ProxiesConfig
from crawler.names import GW_INFLIGHT_GRACE, Names

# KEYS: none (all keys are built from the prefix: one Redis, not a cluster).
# ARGV: prefix, domain, min_interval_ms, session ('' for none), session_ttl_ms, request id,
#       hold_ms (how long the request may count as in flight), then id, cap for each candidate.
# Returns {1, exit id} or {0, ms to wait before asking again; -1 if no candidate is usable at all}.
_SELECT = """
local p, domain = ARGV[1], ARGV[2]
local interval, session = tonumber(ARGV[3]), ARGV[4]
local session_ttl, rid, hold = tonumber(ARGV[5]), ARGV[6], tonumber(ARGV[7])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local function state(id, cap)
  if redis.call('EXISTS', p .. ':gw:dead:' .. id) == 1 then return 'out', -1 end
  local cool = redis.call('PTTL', p .. ':gw:cool:' .. id .. ':' .. domain)
  if cool > 0 then return 'out', cool end
  local flying = p .. ':gw:inflight:' .. id
  redis.call('ZREMRANGEBYSCORE', flying, '-inf', now)
  if redis.call('ZCARD', flying) >= cap then return 'wait', 50 end
  local last = tonumber(redis.call('GET', p .. ':gw:last:' .. id .. ':' .. domain) or '-1')
  if last >= 0 and now - last < interval then return 'wait', interval - (now - last) end
  return 'ok', 0
end

local function take(id)
  local flying = p .. ':gw:inflight:' .. id
  redis.call('ZADD', flying, now + hold, rid)
  redis.call('PEXPIRE', flying, hold + 1000)
  redis.call('SET', p .. ':gw:last:' .. id .. ':' .. domain, now, 'PX', math.max(interval, 1) + 1000)
  if session ~= '' then redis.call('SET', p .. ':gw:sticky:' .. session, id, 'PX', session_ttl) end
  return {1, id}
end

local caps = {}
local order = {}
for i = 8, #ARGV, 2 do
  caps[ARGV[i]] = tonumber(ARGV[i + 1])
  order[#order + 1] = ARGV[i]
end

if session ~= '' then
  local stuck = redis.call('GET', p .. ':gw:sticky:' .. session)
  if stuck and caps[stuck] then
    local s, wait = state(stuck, caps[stuck])
    if s == 'ok' then return take(stuck) end
    if s == 'wait' then return {0, wait} end
    -- banned or dead: the session moves to another exit
  end
end

local best = -1
for _, id in ipairs(order) do
  local s, wait = state(id, caps[id])
  if s == 'ok' then return take(id) end
  if wait >= 0 and (best < 0 or wait < best) then best = wait end
end
return {0, best}
"""

# ARGV: prefix, exit id, domain, base_ms, max_ms, jitter (0..1), random (0..1). Returns cooldown ms.
_BAN = """
local p, id, domain = ARGV[1], ARGV[2], ARGV[3]
local base, most, jitter, r = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
local strikes_key = p .. ':gw:strikes:' .. id .. ':' .. domain
local strikes = redis.call('INCR', strikes_key)
redis.call('PEXPIRE', strikes_key, most * 4)
local ms = math.min(base * 2 ^ (strikes - 1), most)
ms = math.floor(ms * (1 - jitter + 2 * jitter * r))
redis.call('SET', p .. ':gw:cool:' .. id .. ':' .. domain, '1', 'PX', math.max(ms, 1))
return ms
"""

# ARGV: prefix, exit id, dead_after, dead_for_ms. Returns 1 if this failure made the exit dead.
_FAIL = """
local p, id = ARGV[1], ARGV[2]
local fails = redis.call('INCR', p .. ':gw:fails:' .. id)
redis.call('PEXPIRE', p .. ':gw:fails:' .. id, 3600000)
if fails < tonumber(ARGV[3]) or redis.call('EXISTS', p .. ':gw:dead:' .. id) == 1 then return 0 end
local deaths = redis.call('INCR', p .. ':gw:deaths:' .. id)
redis.call('PEXPIRE', p .. ':gw:deaths:' .. id, 86400000)
local ms = math.min(tonumber(ARGV[4]) * 2 ^ (deaths - 1), 3600000)
redis.call('SET', p .. ':gw:dead:' .. id, '1', 'PX', math.floor(ms))
redis.call('SET', p .. ':gw:fails:' .. id, 0)
return 1
"""


@dataclass(frozen=True, slots=True)
class Choice:
    """An exit reserved for one request (release it when done), or how long to wait for one."""

    exit: Exit | None
    request_id: str
    wait: float  # seconds; < 0 when no candidate can serve (all dead or cooling down)


class Pool:
    """Selection, bans and health of the exits of one proxies.yaml, shared through Redis."""

    def __init__(self, redis: Redis, names: Names, config: ProxiesConfig) -> None:
        self._redis = redis
        self._names = names
        self.config = config
        self._select = redis.register_script(_SELECT)
        self._ban = redis.register_script(_BAN)
        self._fail = redis.register_script(_FAIL)

    def candidates(self, country: str | None, premium: bool) -> list[Exit]:
        """Exits of the wanted country and tier, in random order (so load spreads)."""
        tier = "premium" if premium else "datacenter"
        found = [
            e
            for e in self.config.exits
            if e.tier == tier and (country is None or e.country == country.upper())
        ]
        random.shuffle(found)
        return found

    async def choose(
        self, exits: Sequence[Exit], domain: str, session: str | None, deadline: float
    ) -> Choice:
        """Reserve an exit for a request to `domain` now, or say how long until one is free."""
        rid = uuid.uuid4().hex
        hold_ms = int((deadline + GW_INFLIGHT_GRACE) * 1000)
        args: list[str | int] = [
            self._names.prefix,
            domain,
            int(self.config.min_interval * 1000),
            session or "",
            int(self.config.session_ttl * 1000),
            rid,
            hold_ms,
        ]
        for e in exits:
            args += [e.id, e.max_inflight]
        found, value = await self._select(args=args)
        if int(found) == 1:
            chosen = value.decode() if isinstance(value, bytes) else str(value)
            return Choice(next(e for e in exits if e.id == chosen), rid, 0.0)
        return Choice(None, rid, int(value) / 1000)

    async def release(self, exit: Exit, request_id: str) -> None:
        """The request is done: it no longer counts against the exit's in-flight cap."""
        await self._redis.zrem(self._names.gw_inflight_key(exit.id), request_id)

    async def banned(self, exit: Exit, domain: str) -> float:
        """The target banned `exit`: cool the pair down (exponential, jittered); the seconds."""
        c = self.config.cooldown
        args: list[str | int | float] = [
            self._names.prefix,
            exit.id,
            domain,
            int(c.base * 1000),
            int(c.max * 1000),
            c.jitter,
            random.random(),
        ]
        return int(await self._ban(args=args)) / 1000

    async def answered(self, exit: Exit, domain: str) -> None:
        """The target answered through `exit`: its ban streak for the domain and its failures end."""
        async with self._redis.pipeline(transaction=False) as pipe:
            pipe.delete(self._names.gw_strikes_key(exit.id, domain))
            pipe.delete(self._names.gw_fails_key(exit.id), self._names.gw_deaths_key(exit.id))
            await pipe.execute()

    async def proxy_failed(self, exit: Exit) -> bool:
        """The proxy itself failed (refused, 407, tunnel); True if the exit is now dead."""
        args: list[str | int] = [
            self._names.prefix,
            exit.id,
            self.config.dead_after,
            int(self.config.dead_for * 1000),
        ]
        return int(await self._fail(args=args)) == 1

    async def dead(self) -> list[Exit]:
        """Exits marked dead now."""
        flags = await self._redis.mget([self._names.gw_dead_key(e.id) for e in self.config.exits])
        return [e for e, flag in zip(self.config.exits, flags, strict=True) if flag]

    async def revive(self, exit: Exit) -> None:
        """A probe got through `exit`: it is alive again."""
        await self._redis.delete(
            self._names.gw_dead_key(exit.id),
            self._names.gw_fails_key(exit.id),
            self._names.gw_deaths_key(exit.id),
        )
