"""Fleet-wide politeness per domain: a token bucket in Redis, with back-off and pauses.

Every worker asks the same bucket, and the bucket keeps time by the Redis server's clock, so 3 workers
or 300 together stay within a domain's rate whatever their own clocks say.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

from redis.asyncio import Redis

from crawler.names import Names

# A taker may reserve a token due up to this far ahead and sleep until then; beyond it, it waits
# without reserving and asks again, so a rate edited in domains.yaml takes effect within about this.
HORIZON = 1.0
MIN_FACTOR = 1 / 64
SPACING = 1.0  # seconds: a domain's rate is halved at most this often

# Bucket hash fields: tokens, ts (last refill), factor (back-off, 1 = full rate), hit (when factor was
# last lowered), paused (no token before this time).
_STATE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local s = redis.call('HMGET', KEYS[1], 'tokens', 'ts', 'factor', 'hit', 'paused')
local base, burst, recovery = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
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
local tokens = tonumber(s[1]) or burst
local ts = tonumber(s[2]) or now
tokens = math.min(burst, tokens + math.max(0, now - ts) * rate)
"""

# KEYS[1] the bucket; ARGV rate, burst, recovery, HORIZON. Returns {grant, wait}. Public: a page's
# admission (crawler/worker/admission.py) runs it after its own checks, in the same round trip.
TAKE = (
    _STATE
    + """
local horizon = tonumber(ARGV[4])
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
redis.call('PEXPIRE', KEYS[1], math.ceil((burst / rate + recovery * 8 + wait) * 1000) + 60000)
return {grant, tostring(wait)}
"""
)

_SLOW_DOWN = (
    _STATE
    + """
local pause = tonumber(ARGV[4])
-- answers already on their way when the first push-back came in do not count again
if factor >= 1 or now - hit >= tonumber(ARGV[6]) then
  factor = math.max(tonumber(ARGV[5]), factor / 2)
  hit = now
end
if pause > 0 then paused = math.max(paused, now + pause) end
redis.call('HSET', KEYS[1], 'tokens', tokens, 'ts', now, 'factor', factor, 'hit', hit, 'paused', paused)
redis.call('PEXPIRE', KEYS[1], math.ceil((burst / rate + recovery * 8 + pause) * 1000) + 60000)
return tostring(factor)
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


class RateLimiter:
    """Token buckets shared by the fleet, one per domain."""

    def __init__(self, redis: Redis, names: Names) -> None:
        self._names = names
        self._take = redis.register_script(TAKE)
        self._slow_down = redis.register_script(_SLOW_DOWN)

    def _args(self, budget: Budget) -> list[float]:
        return [budget.rate, budget.burst, budget.recovery]

    def take_args(self, domain: str, budget: Budget) -> tuple[list[str], list[float]]:
        """The keys and arguments of one TAKE for `domain`, for a script that runs it inline."""
        return [self._names.bucket_key(domain)], [*self._args(budget), HORIZON]

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
            keys=[self._names.bucket_key(domain)], args=[*self._args(budget), pause, MIN_FACTOR, SPACING]
        )
        return float(factor)
