"""The exit pool, held in Redis so that every gateway replica sees one pool.

A request costs two Lua calls: `reserve` (admit it against its key's budget and concurrency, then
choose an exit and reserve it) and `settle` (release the exit, record the answer, ban or failure,
charge, and release the key). Each reads and writes in one atomic step on Redis's own clock, so two
replicas never send a request to a domain through one exit closer than min_interval, nor push an
exit past its in-flight cap or a key past its concurrency or its budget: a request's price is
reserved when it is admitted and charged, or released, when it is settled.

A replica renews its entry in the fleet's set of replicas every few seconds (`beat`). A request's
in-flight entries name their replica, so one killed mid-request frees its key's concurrency and its
exits' caps once its entry lapses (GW_REPLICA_TTL), not only when each request's hold ends.

Keys are kept apart: a ban cools an (exit, domain) pair for the key that met it; the pair cools for
every key only once bans came from ban_quorum keys, and an exit is marked dead only once failures
came from as many, so one key cannot take exits away from the others.
"""

from __future__ import annotations

import random
import secrets
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from redis.asyncio import Redis

from crawler.gateway.proxies import ApiKey, Exit, ProxiesConfig
from crawler.names import (
    GW_DEAD_MOST,
    GW_DEATHS_TTL,
    GW_FAILS_TTL,
    GW_INFLIGHT_GRACE,
    GW_REPLICA_TTL,
    GW_REPLICAS_KEPT,
    GW_STRIKES_KEPT,
    Names,
)

# KEYS: the API key's in-flight set, its credits, [the session's sticky key,] then for each
#       candidate: its dead flag, (exit, domain) cooldown for every key, the same for this key,
#       in-flight set, (exit, domain) last send.
# ARGV: admit (1 on a request's first call: budget and concurrency are checked and it is counted),
#       request ("id|price", its member of the in-flight sets), key hold ms, key cap, budget ('' for
#       none), price, min_interval ms, session (1/0), session_ttl ms, exit hold ms, then id, cap for
#       each candidate; the last key is the fleet's set of replicas.
# Returns {1, exit id}; {0, ms to wait before asking again, -1 if no candidate is usable at all};
#         {-2} the budget is spent; {-3} the key is at its concurrency cap (neither counted).
_RESERVE = """
local admit, rid = ARGV[1] == '1', ARGV[2]
local interval, has_session = tonumber(ARGV[7]), ARGV[8] == '1'
local session_ttl, hold = tonumber(ARGV[9]), tonumber(ARGV[10])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

-- A member "replica/request|price" of a replica whose entry lapsed is a request that replica can
-- no longer settle (killed or cut off); a replica never seen (none beat yet) is taken as alive.
local replicas, lapsed = KEYS[#KEYS], {}
local function gone(member)
  local r = string.match(member, '^([^/|]+)/')
  if not r then return false end
  if lapsed[r] == nil then
    local until_ms = redis.call('ZSCORE', replicas, r)
    lapsed[r] = until_ms ~= false and tonumber(until_ms) < now
  end
  return lapsed[r]
end
-- Only a set at its cap is searched for them: the common case stays two calls.
local function count(set, cap)
  redis.call('ZREMRANGEBYSCORE', set, '-inf', now)
  local n = redis.call('ZCARD', set)
  if n < cap then return n end
  for _, member in ipairs(redis.call('ZRANGE', set, 0, -1)) do
    if gone(member) then
      redis.call('ZREM', set, member)
      n = n - 1
    end
  end
  return n
end

if admit then
  local in_flight = count(KEYS[1], ARGV[5] ~= '' and 0 or tonumber(ARGV[4]))
  if ARGV[5] ~= '' then
    -- What the key's requests in flight reserved counts as spent until they settle.
    local spent = tonumber(redis.call('GET', KEYS[2]) or '0')
    for _, member in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
      spent = spent + (tonumber(string.match(member, '|([^|]*)$')) or 0)
    end
    if spent + tonumber(ARGV[6]) > tonumber(ARGV[5]) + 1e-9 then return {-2} end
  end
  if in_flight >= tonumber(ARGV[4]) then return {-3} end
  local key_hold = tonumber(ARGV[3])
  redis.call('ZADD', KEYS[1], now + key_hold, rid)
  redis.call('PEXPIRE', KEYS[1], key_hold + 1000)
end

local base = has_session and 3 or 2
local index, caps = {}, {}
local n = 0
for i = 11, #ARGV, 2 do
  n = n + 1
  index[ARGV[i]] = n
  caps[n] = tonumber(ARGV[i + 1])
end
local function k(i, which) return KEYS[base + (i - 1) * 5 + which] end

local function state(i)
  if redis.call('EXISTS', k(i, 1)) == 1 then return 'out', -1 end
  local cool = math.max(redis.call('PTTL', k(i, 2)), redis.call('PTTL', k(i, 3)))
  if cool > 0 then return 'out', cool end
  if count(k(i, 4), caps[i]) >= caps[i] then return 'wait', 50 end
  local last = tonumber(redis.call('GET', k(i, 5)) or '-1')
  if last >= 0 and now - last < interval then return 'wait', interval - (now - last) end
  return 'ok', 0
end

local function take(i)
  local id = ARGV[9 + 2 * i]
  redis.call('ZADD', k(i, 4), now + hold, rid)
  redis.call('PEXPIRE', k(i, 4), hold + 1000)
  redis.call('SET', k(i, 5), now, 'PX', math.max(interval, 1) + 1000)
  if has_session then redis.call('SET', KEYS[3], id, 'PX', session_ttl) end
  return {1, id}
end

if has_session then
  local stuck = redis.call('GET', KEYS[3])
  local i = stuck and index[stuck]
  if i then
    local s, wait = state(i)
    if s == 'ok' then return take(i) end
    if s == 'wait' then return {0, wait} end
    -- banned or dead: the session moves to another exit
  end
end

local best = -1
for i = 1, n do
  local s, wait = state(i)
  if s == 'ok' then return take(i) end
  if wait >= 0 and (best < 0 or wait < best) then best = wait end
end
return {0, best}
"""

# KEYS: the API key's in-flight set, its credits, then (when an exit was used) the exit's in-flight
#       set, the key's (exit, domain) ban streak, the key's (exit, domain) cooldown, the (exit,
#       domain) cooldown for every key, the keys that met bans there, the exit's failure streak, its
#       death streak, its dead flag, the keys it failed.
# ARGV: outcome (answered | banned | failed | none), request ("id|price"), final (1: the request is
#       over), price charged ('0' unless answered), cooldown base ms, max ms, jitter (0..1), random
#       (0..1), strikes kept (x max), dead_after, dead_for ms, fails ttl ms, deaths ttl ms, longest
#       death ms, key id, quorum (keys whose bans or failures act for every key).
# Returns {cooldown ms imposed (0 for none), 1 if this failure made the exit dead, 1 if the cooldown
#          holds for every key}.
_SETTLE = """
local outcome, rid = ARGV[1], ARGV[2]
local cooled, died, fleet = 0, 0, 0
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local key_id, quorum = ARGV[15], tonumber(ARGV[16])
local function witness(set, window)
  redis.call('ZADD', set, now, key_id)
  redis.call('ZREMRANGEBYSCORE', set, '-inf', now - window)
  redis.call('PEXPIRE', set, window)
  return redis.call('ZCARD', set) >= quorum
end
if #KEYS > 2 then
  redis.call('ZREM', KEYS[3], rid)
  if outcome == 'answered' then
    redis.call('DEL', KEYS[4], KEYS[8], KEYS[9])
    redis.call('ZREM', KEYS[7], key_id)
    redis.call('ZREM', KEYS[11], key_id)
  elseif outcome == 'banned' or outcome == 'failed' then
    local base, most = tonumber(ARGV[5]), tonumber(ARGV[6])
    local jitter, r = tonumber(ARGV[7]), tonumber(ARGV[8])
    local strikes = redis.call('INCR', KEYS[4])
    redis.call('PEXPIRE', KEYS[4], most * tonumber(ARGV[9]))
    local ms = math.min(base * 2 ^ (strikes - 1), most)
    cooled = math.max(math.floor(ms * (1 - jitter + 2 * jitter * r)), 1)
    redis.call('SET', KEYS[5], '1', 'PX', cooled)
    if witness(KEYS[7], most) then
      redis.call('SET', KEYS[6], '1', 'PX', cooled)
      fleet = 1
    end
    if outcome == 'failed' then
      local fails = redis.call('INCR', KEYS[8])
      redis.call('PEXPIRE', KEYS[8], tonumber(ARGV[12]))
      local several = witness(KEYS[11], tonumber(ARGV[12]))
      if fails >= tonumber(ARGV[10]) and several and redis.call('EXISTS', KEYS[10]) == 0 then
        local deaths = redis.call('INCR', KEYS[9])
        redis.call('PEXPIRE', KEYS[9], tonumber(ARGV[13]))
        local dead_ms = math.min(tonumber(ARGV[11]) * 2 ^ (deaths - 1), tonumber(ARGV[14]))
        redis.call('SET', KEYS[10], '1', 'PX', math.floor(dead_ms))
        redis.call('SET', KEYS[8], 0)
        redis.call('DEL', KEYS[11])
        died = 1
      end
    end
  end
end
if ARGV[3] == '1' then
  -- Removing the request from its key releases what it reserved; an answer is charged with it.
  if redis.call('ZREM', KEYS[1], rid) == 1 and tonumber(ARGV[4]) > 0 then
    redis.call('INCRBYFLOAT', KEYS[2], ARGV[4])
  end
end
return {cooled, died, fleet}
"""

Attempted = Literal["answered", "banned", "failed", "none"]


@dataclass(frozen=True, slots=True)
class Reservation:
    """An exit reserved for one request, how long to wait for one, or why the key was refused."""

    exit: Exit | None
    wait: float  # seconds (a cooldown's end at the soonest); < 0 when every candidate is dead
    refused: Literal["budget", "concurrency"] | None = None


@dataclass(frozen=True, slots=True)
class Settled:
    """What settling a request's attempt did to its exit."""

    cooldown: float  # seconds the (exit, domain) pair now rests for the key; 0 for none
    died: bool  # this failure marked the exit dead
    fleet: bool = False  # the cooldown holds for every key (bans came from ban_quorum keys)


# KEYS: the fleet's set of replicas (member: replica id, score: ms its entry lapses at).
# ARGV: replica id, ms to live from now (<= 0: lapsed now, as a replica that stops), ms kept lapsed.
_BEAT = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[2])
redis.call('ZADD', KEYS[1], now + (ttl > 0 and ttl or -1), ARGV[1])
-- A lapsed entry is kept while a request of its replica may still be counted somewhere.
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - tonumber(ARGV[3]))
redis.call('PEXPIRE', KEYS[1], math.max(ttl, 0) + tonumber(ARGV[3]))
"""


def member(request_id: str, price: float) -> str:
    """A request's member of the in-flight sets: its id and the price its key reserved for it."""
    return f"{request_id}|{price!r}"


class Pool:
    """Selection, bans, health and the per-key ledger of one proxies.yaml, shared through Redis."""

    def __init__(self, redis: Redis, names: Names, config: ProxiesConfig) -> None:
        self._redis = redis
        self._names = names
        self.config = config
        self._reserve = redis.register_script(_RESERVE)
        self._settle = redis.register_script(_SETTLE)
        self._beat = redis.register_script(_BEAT)
        # Random, so a restart is a new replica; its requests' ids begin with it (`request_id`).
        self.replica = secrets.token_hex(8)

    def request_id(self) -> str:
        """A new request's id, naming this replica: the request stops counting once the replica lapses."""
        return f"{self.replica}/{uuid.uuid4().hex}"

    async def beat(self) -> None:
        """Renew this replica's entry: its requests in flight count while it stays renewed."""
        await self._beat_for(GW_REPLICA_TTL)

    async def leave(self) -> None:
        """Lapse this replica's entry now (it stops): its unsettled requests free their slots at once."""
        await self._beat_for(0)

    async def _beat_for(self, ttl: float) -> None:
        args: list[str | int] = [self.replica, int(ttl * 1000), int(GW_REPLICAS_KEPT * 1000)]
        await self._beat(keys=[self._names.gw_replicas_key()], args=args)

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

    async def reserve(
        self,
        key: ApiKey,
        request_id: str,
        price: float,
        exits: Sequence[Exit],
        domain: str,
        session: str | None,
        hold: float,
        *,
        admit: bool,
    ) -> Reservation:
        """Reserve an exit for a request to `domain` now, or say how long until one is free.

        With `admit` (the request's first call) the key's budget and concurrency are checked and
        the request counted against them first; `settle(..., final=True)` uncounts it. Left unsettled
        (its replica killed), it stops counting `hold` (its timeout) + GW_INFLIGHT_GRACE seconds on.
        """
        n = self._names
        hold_ms = int((hold + GW_INFLIGHT_GRACE) * 1000)
        keys = [n.gw_key_inflight_key(key.id), n.gw_credits_key(key.id)]
        if session:
            keys.append(n.gw_sticky_key(key.id, session))
        args: list[str | int | float] = [
            1 if admit else 0,
            member(request_id, price),
            hold_ms,
            key.max_concurrency,
            "" if key.budget is None else repr(key.budget),
            repr(price),
            int(self.config.min_interval * 1000),
            1 if session else 0,
            int(self.config.session_ttl * 1000),
            hold_ms,
        ]
        for e in exits:
            keys += [
                n.gw_dead_key(e.id),
                n.gw_cool_key(e.id, domain),
                n.gw_key_cool_key(key.id, e.id, domain),
                n.gw_inflight_key(e.id),
                n.gw_last_key(e.id, domain),
            ]
            args += [e.id, e.max_inflight]
        keys.append(n.gw_replicas_key())
        answer = await self._reserve(keys=keys, args=args)
        code = int(answer[0])
        if code == 1:
            chosen = answer[1].decode() if isinstance(answer[1], bytes) else str(answer[1])
            return Reservation(next(e for e in exits if e.id == chosen), 0.0)
        if code == -2:
            return Reservation(None, -1.0, "budget")
        if code == -3:
            return Reservation(None, -1.0, "concurrency")
        return Reservation(None, int(answer[1]) / 1000)

    async def settle(
        self,
        key: ApiKey,
        request_id: str,
        exit: Exit | None,
        domain: str,
        outcome: Attempted,
        price: float,
        *,
        final: bool,
    ) -> Settled:
        """Release `exit` and record its `outcome` for `domain`: an answer ends the key's ban and the
        exit's failure streaks and charges `price`; a ban or failure cools the pair down for the key
        (exponential, jittered), for every key once ban_quorum keys met bans there; failures in a
        row from as many keys mark the exit dead. `final` uncounts the request from its key and
        releases the price it reserved (charged if it was answered)."""
        n = self._names
        keys = [n.gw_key_inflight_key(key.id), n.gw_credits_key(key.id)]
        if exit is not None:
            keys += [
                n.gw_inflight_key(exit.id),
                n.gw_strikes_key(key.id, exit.id, domain),
                n.gw_key_cool_key(key.id, exit.id, domain),
                n.gw_cool_key(exit.id, domain),
                n.gw_banners_key(exit.id, domain),
                n.gw_fails_key(exit.id),
                n.gw_deaths_key(exit.id),
                n.gw_dead_key(exit.id),
                n.gw_failers_key(exit.id),
            ]
        c = self.config.cooldown
        args: list[str | int | float] = [
            outcome,
            member(request_id, price),
            1 if final else 0,
            repr(price) if outcome == "answered" else "0",
            int(c.base * 1000),
            int(c.max * 1000),
            c.jitter,
            random.random(),
            GW_STRIKES_KEPT,
            self.config.dead_after,
            int(self.config.dead_for * 1000),
            int(GW_FAILS_TTL * 1000),
            int(GW_DEATHS_TTL * 1000),
            int(GW_DEAD_MOST * 1000),
            key.id,
            self.config.quorum,
        ]
        cooled, died, fleet = await self._settle(keys=keys, args=args)
        return Settled(int(cooled) / 1000, int(died) == 1, int(fleet) == 1)

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
