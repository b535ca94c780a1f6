"""Fleet-wide politeness per domain: a token bucket in Redis, with back-off and pauses.

Every worker asks the same bucket, and the bucket keeps time by the Redis server's clock, so 3 workers
or 300 together stay within a domain's rate whatever their own clocks say.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass

from redis.asyncio import Redis

from crawler.names import BUCKET_KEPT, Names

# A taker may reserve a token due up to this far ahead and sleep until then; beyond it, it waits
# without reserving and asks again, so a rate edited in domains.yaml takes effect within about this.
HORIZON = 1.0
MIN_FACTOR = 1 / 64
SPACING = 1.0  # seconds: a domain's rate is halved at most this often

# Bucket hash fields: tokens, ts (last refill), factor (back-off, 1 = full rate), hit (when factor was
# last lowered), paused (no token before this time). ARGV: rate, burst, recovery, HORIZON, BUCKET_KEPT,
# and '1' if the caller asked this bucket within BUCKET_KEPT (so a missing one was lost, not expired).
_STATE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local s = redis.call('HMGET', KEYS[1], 'tokens', 'ts', 'factor', 'hit', 'paused')
local base, burst, recovery = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local horizon, kept = tonumber(ARGV[4]), tonumber(ARGV[5]) * 1000
local factor = tonumber(s[3]) or 1
local hit = tonumber(s[4]) or now
local paused = tonumber(s[5]) or 0
if factor < 1 then
  -- back-off recovers step by step: the factor doubles every `recovery` seconds since the last hit
  local steps = math.floor((now - hit) / recovery)
  if steps > 0 then
    factor = math.min(1, factor * 2 ^ steps)
    hit = hit + steps * recovery
  end
end
local rate = base * factor
local tokens = tonumber(s[1])
if tokens == nil then
  -- A lost bucket's takers may still be sleeping on tokens reserved up to `horizon` ahead: it starts
  -- as if all were taken, so its first grant is due once theirs are. A new (or expired) one is full.
  if ARGV[6] == '1' then tokens = 1 - rate * horizon else tokens = burst end
end
local ts = tonumber(s[2]) or now
tokens = math.min(burst, tokens + math.max(0, now - ts) * rate)
"""

# KEYS[1] the bucket; ARGV as _STATE's. Returns {grant, wait}. Public: a page's admission
# (crawler/worker/admission.py) runs it after its own checks, in the same round trip.
TAKE = (
    _STATE
    + """
local grant, wait = 0, 0
if paused > now then
  wait = paused - now
elseif tokens >= 1 - rate * horizon then
  tokens = tokens - 1
  grant = 1
  if tokens < 0 then wait = -tokens / rate end
else
  wait = ((1 - rate * horizon) - tokens) / rate
end
redis.call('HSET', KEYS[1], 'tokens', tokens, 'ts', now, 'factor', factor, 'hit', hit, 'paused', paused)
redis.call('PEXPIRE', KEYS[1], math.ceil((burst / rate + recovery * 8 + wait) * 1000 + kept))
return {grant, tostring(wait)}
"""
)
TAKE_ARGS = 6  # ARGV entries TAKE reads; a script that runs it inline puts its own after them

# ARGV as _STATE's, then the pause, MIN_FACTOR and SPACING.
_SLOW_DOWN = (
    _STATE
    + """
local pause = tonumber(ARGV[7])
-- answers already on their way when the first push-back came in do not count again
if factor >= 1 or now - hit >= tonumber(ARGV[9]) then
  factor = math.max(tonumber(ARGV[8]), factor / 2)
  hit = now
end
if pause > 0 then paused = math.max(paused, now + pause) end
redis.call('HSET', KEYS[1], 'tokens', tokens, 'ts', now, 'factor', factor, 'hit', hit, 'paused', paused)
redis.call('PEXPIRE', KEYS[1], math.ceil((burst / rate + recovery * 8 + pause) * 1000 + kept))
return tostring(factor)
"""
)

# ARGV as _STATE's. Writes nothing: the factor after recovery, and the seconds the domain is held.
_PEEK = (
    _STATE
    + """
return {tostring(factor), tostring(math.max(0, paused - now))}
"""
)


Taken = tuple[int, float]
"""What one ask of a bucket answered: granted (1) or not (0), and the seconds to wait."""


@dataclass(frozen=True, slots=True)
class Budget:
    """A domain's allowance: `rate` requests per second, `burst` at once, back-off recovery time."""

    rate: float
    burst: int
    recovery: float


@dataclass(frozen=True, slots=True)
class Backoff:
    """A domain's back-off now: the share of its rate it may use (1: all of it), and the seconds no
    request may start (a pause it was asked for, e.g. by a Retry-After)."""

    factor: float = 1.0
    held: float = 0.0


class RateLimiter:
    """Token buckets shared by the fleet, one per domain."""

    def __init__(self, redis: Redis, names: Names, clock: Callable[[], float] = time.monotonic) -> None:
        self._names = names
        self._take = redis.register_script(TAKE)
        self._slow_down = redis.register_script(_SLOW_DOWN)
        self._peek = redis.register_script(_PEEK)
        self._redis = redis
        self._clock = clock
        self._asked: dict[str, float] = {}  # domain -> when this process last asked its bucket

    def _args(self, domain: str, budget: Budget) -> list[float | str]:
        now = self._clock()
        asked = self._asked.get(domain)
        self._asked[domain] = now
        # Asked since it would have expired: a missing bucket was lost (a flush, a restart) with
        # reservations outstanding. Wrong only on the safe side (a held admission asks no bucket).
        lost = "1" if asked is not None and now - asked < BUCKET_KEPT else "0"
        return [budget.rate, budget.burst, budget.recovery, HORIZON, BUCKET_KEPT, lost]

    def take_args(self, domain: str, budget: Budget) -> tuple[list[str], list[float | str]]:
        """The keys and arguments of one TAKE for `domain`, for a script that runs it inline."""
        return [self._names.bucket_key(domain)], self._args(domain, budget)

    async def acquire(self, domain: str, budget: Callable[[], Budget], taken: Taken | None = None) -> float:
        """Wait until this worker may send one request to `domain`; return the seconds waited.

        `budget` is asked again each time round, so an edited rate reaches requests already waiting.
        `taken` is the answer of a TAKE already run for this request (by its admission), used first.
        """
        waited = 0.0
        while True:
            if taken is None:
                keys, args = self.take_args(domain, budget())
                grant, wait = await self._take(keys=keys, args=args)
            else:
                (grant, wait), taken = taken, None
            seconds = max(0.0, float(wait))
            if seconds:
                await asyncio.sleep(seconds)
                waited += seconds
            if int(grant):
                return waited

    async def slow_down(self, domain: str, budget: Budget, pause: float = 0.0) -> float:
        """The domain pushed back (429, 503): halve its rate fleet-wide, and pause it if asked."""
        factor = await self._slow_down(
            keys=[self._names.bucket_key(domain)],
            args=[*self._args(domain, budget), pause, MIN_FACTOR, SPACING],
        )
        return float(factor)

    async def backoffs(self, budgets: dict[str, Budget]) -> dict[str, Backoff]:
        """Each domain's back-off now, read in one round trip and changing nothing."""
        domains = sorted(budgets)
        async with self._redis.pipeline(transaction=False) as pipe:
            for d in domains:
                b = budgets[d]
                args: list[float | str] = [b.rate, b.burst, b.recovery, HORIZON, BUCKET_KEPT, "0"]
                await self._peek(keys=[self._names.bucket_key(d)], args=args, client=pipe)
            answers: list[list[bytes]] = await pipe.execute()
        return {
            d: Backoff(float(factor), round(float(held), 3))
            for d, (factor, held) in zip(domains, answers, strict=True)
        }
