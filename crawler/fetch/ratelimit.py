"""Fleet-wide politeness per domain: a token bucket in Redis, with back-off and pauses.

Every worker asks the same bucket, and the bucket keeps time by the Redis server's clock, so 3 workers
or 300 together stay within a domain's rate whatever their own clocks say.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from redis.asyncio import Redis
from redis.exceptions import RedisError

from crawler.config import Rules
from crawler.names import BUCKET_KEPT, Names

# A taker may reserve a token due up to this far ahead and sleep until then; beyond it, it waits
# without reserving and asks again, so a rate edited in domains.yaml takes effect within about this.
HORIZON = 1.0
MIN_FACTOR = 1 / 64
SPACING = 1.0  # seconds: a domain's rate is halved at most this often

# Bucket hash fields: tokens, ts (last refill), factor (back-off, 1 = full rate), hit (when factor was
# last lowered), paused (no token before this time). A bucket's nine ARGV, from offset `a`: rate, burst,
# recovery, HORIZON, BUCKET_KEPT, '1' if the caller asked this bucket within BUCKET_KEPT (so a missing
# one was lost, not expired), then its back-off as kept outside Redis (factor, hit, paused; '' if none):
# a bucket is never less cautious than that, so one Redis lost (or flushed) keeps its back-off and pause.
_BUCKET = """
local function bucket(key, a)
  local t = redis.call('TIME')
  local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
  local s = redis.call('HMGET', key, 'tokens', 'ts', 'factor', 'hit', 'paused')
  local b = {key = key, now = now, base = tonumber(ARGV[a + 1]), burst = tonumber(ARGV[a + 2])}
  b.recovery, b.horizon, b.kept = tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4]), tonumber(ARGV[a + 5]) * 1000
  b.factor, b.hit, b.paused = tonumber(s[3]) or 1, tonumber(s[4]) or now, tonumber(s[5]) or 0
  if b.factor < 1 then
    -- back-off recovers step by step: the factor doubles every `recovery` seconds since the last hit
    local steps = math.floor((now - b.hit) / b.recovery)
    if steps > 0 then
      b.factor = math.min(1, b.factor * 2 ^ steps)
      b.hit = b.hit + steps * b.recovery
    end
  end
  if ARGV[a + 7] ~= '' then
    local known, known_hit = tonumber(ARGV[a + 7]), tonumber(ARGV[a + 8])
    local known_steps = math.floor((now - known_hit) / b.recovery)
    if known_steps > 0 then
      known = math.min(1, known * 2 ^ known_steps)
      known_hit = known_hit + known_steps * b.recovery
    end
    if known < b.factor then b.factor, b.hit = known, known_hit end
    b.paused = math.max(b.paused, tonumber(ARGV[a + 9]))
  end
  b.rate = b.base * b.factor
  local tokens = tonumber(s[1])
  if tokens == nil then
    -- A lost bucket's takers may still be sleeping on tokens reserved up to `horizon` ahead: it starts
    -- as if all were taken, so its first grant is due once theirs are. A new (or expired) one is full.
    if ARGV[a + 6] == '1' then tokens = 1 - b.rate * b.horizon else tokens = b.burst end
  end
  local ts = tonumber(s[2]) or now
  b.tokens = math.min(b.burst, tokens + math.max(0, now - ts) * b.rate)
  return b
end
-- seconds until `b` may grant a token (reserving up to its horizon ahead), or -1 if it may now
local function blocked(b)
  if b.paused > b.now then return b.paused - b.now end
  if b.tokens >= 1 - b.rate * b.horizon then return -1 end
  return ((1 - b.rate * b.horizon) - b.tokens) / b.rate
end
-- takes a token `blocked` allowed; returns the seconds until it is due
local function take(b)
  b.tokens = b.tokens - 1
  if b.tokens < 0 then return -b.tokens / b.rate end
  return 0
end
local function save(b, held)
  redis.call('HSET', b.key, 'tokens', b.tokens, 'ts', b.now, 'factor', b.factor, 'hit', b.hit,
    'paused', b.paused)
  redis.call('PEXPIRE', b.key, math.ceil((b.burst / b.rate + b.recovery * 8 + held) * 1000 + b.kept))
end
"""

# KEYS[1] the bucket; ARGV[1..9] its nine. Returns {grant, wait, factor}: the factor is its back-off
# (1 = full rate). Public: a page's admission (crawler/worker/admission.py) runs it after its own
# checks, in the same round trip.
TAKE = (
    _BUCKET
    + """
local b = bucket(KEYS[1], 0)
local grant, wait = 0, blocked(b)
if wait < 0 then
  grant, wait = 1, take(b)
end
save(b, wait)
return {grant, tostring(wait), tostring(b.factor)}
"""
)
TAKE_ARGS = 9  # ARGV entries TAKE reads; a script that runs it inline puts its own after them

# A host's token and its IP address's together, or neither: KEYS[1] the host's bucket with ARGV[1..9],
# and the address's bucket last of the keys (KEYS[#KEYS]) with the last nine ARGV, so a script that
# runs it inline may put its own keys and arguments between. Returns {grant, wait, factor} as TAKE
# does, with the host's back-off.
TAKE_PAIR = (
    _BUCKET
    + """
local host = bucket(KEYS[1], 0)
local ip = bucket(KEYS[#KEYS], #ARGV - 9)
local grant, wait = 0, math.max(blocked(host), blocked(ip))
if blocked(host) < 0 and blocked(ip) < 0 then
  local due_host, due_ip = take(host), take(ip)
  grant, wait = 1, math.max(due_host, due_ip)
  -- the request goes when both tokens are due: the bucket whose token was due first counts it then,
  -- so its next token is not due a whole interval after a request that had not gone yet
  host.tokens = host.tokens - (wait - due_host) * host.rate
  ip.tokens = ip.tokens - (wait - due_ip) * ip.rate
end
save(host, wait)
save(ip, wait)
return {grant, tostring(wait), tostring(host.factor)}
"""
)

# KEYS[1] the bucket; ARGV[1..9] its nine, then the pause, MIN_FACTOR and SPACING. Returns the back-off
# now: factor, hit, paused.
_SLOW_DOWN = (
    _BUCKET
    + """
local b = bucket(KEYS[1], 0)
local pause = tonumber(ARGV[10])
-- answers already on their way when the first push-back came in do not count again
if b.factor >= 1 or b.now - b.hit >= tonumber(ARGV[12]) then
  b.factor = math.max(tonumber(ARGV[11]), b.factor / 2)
  b.hit = b.now
end
if pause > 0 then b.paused = math.max(b.paused, b.now + pause) end
save(b, pause)
return {tostring(b.factor), tostring(b.hit), tostring(b.paused)}
"""
)

# Each key is a bucket, its nine ARGV in key order; then the seconds the request is going after its
# token was due, and the seconds of that a server cannot tell. If no bucket granted a token since that
# is due before the request goes, each counts it now: its tokens are what they would have been, and the
# request goes at once (0). Else its own token is left unused and it takes a fresh one of each bucket,
# due after those: it goes in the seconds returned. Decided in one step, so no grant falls in between.
_LATE = (
    _BUCKET
    + """
local late, unseen = tonumber(ARGV[#ARGV - 1]), tonumber(ARGV[#ARGV])
local buckets, after = {}, false
for k = 1, #KEYS do
  local b = bucket(KEYS[k], (k - 1) * 9)
  buckets[k] = b
  if b.tokens - late * b.rate < -unseen * b.rate then after = true end
end
local wait = 0
if after then
  local dues = {}
  for k, b in ipairs(buckets) do
    dues[k] = math.max(take(b), b.paused - b.now)
    wait = math.max(wait, dues[k])
  end
  -- as TAKE_PAIR: a bucket whose token was due first counts the request when it goes
  for k, b in ipairs(buckets) do b.tokens = b.tokens - (wait - dues[k]) * b.rate end
else
  for _, b in ipairs(buckets) do b.tokens = b.tokens - late * b.rate end
end
for _, b in ipairs(buckets) do save(b, wait + late) end
return tostring(wait)
"""
)

# As _SLOW_DOWN's first nine. Writes nothing: the factor after recovery, and the seconds it is held.
_PEEK = (
    _BUCKET
    + """
local b = bucket(KEYS[1], 0)
return {tostring(b.factor), tostring(math.max(0, b.paused - b.now))}
"""
)


Taken = tuple[int, float]
"""What one ask of a bucket answered: granted (1) or not (0), and the seconds to wait."""

# Seconds a request may reach the wire after its token was due before its buckets are told: below
# this, a server cannot tell (and the bench's politeness check allows it); above, the next request
# would come that much closer than its rate allows.
LATE_MIN = 0.02
LATE_TRIES = 3  # a request late again after being told late is told again, this many times in all
_NEVER_HELD = 1e9  # `_LATE`'s seconds a server cannot tell, when the request has gone already


@dataclass(frozen=True, slots=True)
class Token:
    """A request's leave to go: the seconds it waited for it, and when it was due (monotonic)."""

    waited: float
    due: float


@dataclass(frozen=True, slots=True)
class Budget:
    """A domain's allowance: `rate` requests per second, `burst` at once, back-off recovery time."""

    rate: float
    burst: int
    recovery: float


def budget(rules: Rules, crawl_delay: float | None) -> Budget:
    """The domain's allowance; a robots.txt Crawl-delay caps the rate and allows no burst."""
    if crawl_delay:
        return Budget(min(rules.rate, 1 / crawl_delay), 1, rules.backoff_recovery)
    return Budget(rules.rate, rules.burst, rules.backoff_recovery)


@dataclass(frozen=True, slots=True)
class Backoff:
    """A domain's back-off now: the share of its rate it may use (1: all of it), and the seconds no
    request may start (a pause it was asked for, e.g. by a Retry-After)."""

    factor: float = 1.0
    held: float = 0.0


Kept = tuple[float, float, float]
"""A domain's back-off as its bucket last had it: factor, when it was lowered, no token before (Unix
seconds of the Redis server's clock; 0: not held). What the fleet keeps of it outside Redis."""


class RateLimiter:
    """Token buckets shared by the fleet: one per domain (or host), and one per IP address."""

    def __init__(
        self,
        redis: Redis,
        names: Names,
        clock: Callable[[], float] = time.monotonic,
        kept: Callable[[str], Kept | None] = lambda domain: None,
    ) -> None:
        """`kept` gives a domain's back-off as kept outside Redis (none: no bucket is restored)."""
        self._names = names
        self._kept = kept
        self._take = redis.register_script(TAKE)
        self._take_pair = redis.register_script(TAKE_PAIR)
        self._slow_down = redis.register_script(_SLOW_DOWN)
        self._late = redis.register_script(_LATE)
        self._peek = redis.register_script(_PEEK)
        self._redis = redis
        self._clock = clock
        # bucket key -> when this process last asked it, oldest first: one a host and one an address
        # of the open web, so those older than BUCKET_KEPT (which say nothing more) are dropped.
        self._asked: OrderedDict[str, float] = OrderedDict()
        self._counting: set[asyncio.Task[None]] = set()  # late requests' counts, not waited on

    def _args(
        self, key: str, budget: Budget, domain: str | None = None, horizon: float = HORIZON
    ) -> list[float | str]:
        """A bucket's nine arguments; a domain's carry its back-off kept outside Redis."""
        now = self._clock()
        asked = self._asked.get(key)
        self._asked[key] = now
        self._asked.move_to_end(key)
        while now - next(iter(self._asked.values())) >= BUCKET_KEPT:
            self._asked.popitem(last=False)
        # Asked since it would have expired: a missing bucket was lost (a flush, a restart) with
        # reservations outstanding. Wrong only on the safe side (a held admission asks no bucket).
        lost = "1" if asked is not None and now - asked < BUCKET_KEPT else "0"
        kept = None if domain is None else self._kept(domain)
        known: list[float | str] = ["", "", ""] if kept is None else list(kept)
        return [budget.rate, budget.burst, budget.recovery, horizon, BUCKET_KEPT, lost, *known]

    def take_args(
        self, domain: str, budget: Budget, horizon: float = HORIZON
    ) -> tuple[list[str], list[float | str]]:
        """The keys and arguments of one TAKE for `domain`, for a script that runs it inline; with
        `horizon` 0 it grants only a token due now (a taker that will not sleep on one)."""
        key = self._names.bucket_key(domain)
        return [key], self._args(key, budget, domain, horizon)

    def take_pair_args(
        self, domain: str, budget: Budget, address: str, per_ip: Budget, horizon: float = HORIZON
    ) -> tuple[list[str], list[float | str]]:
        """The keys and arguments of one TAKE_PAIR for `domain` on `address`: the host's first, the
        address's last (a script running it inline puts its own between); `horizon` as take_args'."""
        host = self._names.bucket_key(domain)
        ip = self._names.ip_bucket_key(address)
        return [host, ip], [
            *self._args(host, budget, domain, horizon),
            *self._args(ip, per_ip, None, horizon),
        ]

    async def acquire(
        self,
        domain: str,
        budget: Callable[[], Budget],
        taken: Taken | None = None,
        ip: tuple[str, Budget] | None = None,
    ) -> float:
        """Wait until this worker may send one request to `domain`; return the seconds waited."""
        return (await self.token(domain, budget, taken, ip)).waited

    async def token(
        self,
        domain: str,
        budget: Callable[[], Budget],
        taken: Taken | None = None,
        ip: tuple[str, Budget] | None = None,
        taken_at: float | None = None,
        horizon: float = HORIZON,
    ) -> Token:
        """Wait until this worker may send one request to `domain`: the token, for `sending`.

        `budget` is asked again each time round, so an edited rate reaches requests already waiting.
        `taken` is the answer of a TAKE already run for this request (by its admission, at monotonic
        `taken_at`), used first. `ip`: the address the request goes to and its budget, which every
        host on it shares; its token and the domain's are taken together or not at all. `horizon`
        0: no token is reserved ahead, so one asked for after an earlier request went late is due
        after it (a host the crawl found, whose few pages must each keep their distance).
        """
        waited = 0.0
        while True:
            # A token is due `wait` after the script ran: reckoned from the ask, which is earlier, so
            # `sending` may think a request later than it is, never less late.
            asked = self._clock() if taken_at is None else taken_at
            if taken is not None:
                (grant, wait), taken = taken, None
            elif ip is not None:
                keys, args = self.take_pair_args(domain, budget(), *ip, horizon)
                grant, wait, _ = await self._take_pair(keys=keys, args=args)
            else:
                keys, args = self.take_args(domain, budget(), horizon)
                grant, wait, _ = await self._take(keys=keys, args=args)
            taken_at = None
            seconds = max(0.0, float(wait))
            if seconds:
                await asyncio.sleep(seconds)
                waited += seconds
            if int(grant):
                return Token(waited, asked + seconds)

    async def sending(
        self, domain: str, budget: Budget, token: Token, ip: tuple[str, Budget] | None = None
    ) -> None:
        """Return when a request with `token` may go: at once if on time; late by more than LATE_MIN
        (its admission long before, a busy event loop), once its buckets count it (`went_late`)."""
        due = token.due
        for _ in range(LATE_TRIES):
            asked = self._clock()
            late = asked - due
            if late < LATE_MIN:
                return
            wait = await self.went_late(domain, budget, late, ip)
            if wait:
                await asyncio.sleep(wait)
            due = asked + wait  # reckoned from the ask, so never thought less late than it is
        late = self._clock() - due
        if late >= LATE_MIN:
            # Still late (the event loop resumed it late): counted as it goes, not held any longer.
            counting = asyncio.create_task(self._count_late(domain, budget, late, ip))
            self._counting.add(counting)
            counting.add_done_callback(self._counting.discard)

    async def counted(self) -> None:
        """Return once the counts of late requests sent without waiting on them have landed."""
        await asyncio.gather(*self._counting)

    async def _count_late(
        self, domain: str, budget: Budget, late: float, ip: tuple[str, Budget] | None
    ) -> None:
        keys, args = self._buckets(domain, budget, ip)
        with contextlib.suppress(RedisError):  # best effort: the request has gone either way
            await self._late(keys=keys, args=[*args, late, _NEVER_HELD])

    async def went_late(
        self, domain: str, budget: Budget, late: float, ip: tuple[str, Budget] | None = None
    ) -> float:
        """A request is going `late` seconds after its token was due (a new connection, a busy event
        loop): the seconds it must wait first (0: none, its buckets count it now), so the requests
        granted meanwhile keep their distance from it at the server, and the next ones too."""
        keys, args = self._buckets(domain, budget, ip)
        return float(await self._late(keys=keys, args=[*args, late, LATE_MIN]))

    def _buckets(
        self, domain: str, budget: Budget, ip: tuple[str, Budget] | None
    ) -> tuple[list[str], list[float | str]]:
        """The keys and arguments of a request's buckets: its domain's, and its address's if any."""
        return self.take_args(domain, budget) if ip is None else self.take_pair_args(domain, budget, *ip)

    async def slow_down(self, domain: str, budget: Budget, pause: float = 0.0) -> Kept:
        """The domain pushed back (429, 503): halve its rate fleet-wide, and pause it if asked; its
        back-off now, for the fleet to keep outside Redis."""
        key = self._names.bucket_key(domain)
        factor, hit, paused = await self._slow_down(
            keys=[key], args=[*self._args(key, budget, domain), pause, MIN_FACTOR, SPACING]
        )
        return float(factor), float(hit), float(paused)

    async def backoffs(self, budgets: dict[str, Budget]) -> dict[str, Backoff]:
        """Each domain's back-off now, read in one round trip and changing nothing."""
        domains = sorted(budgets)
        async with self._redis.pipeline(transaction=False) as pipe:
            for d in domains:
                b = budgets[d]
                args: list[float | str] = [b.rate, b.burst, b.recovery, HORIZON, BUCKET_KEPT, "0", "", "", ""]
                await self._peek(keys=[self._names.bucket_key(d)], args=args, client=pipe)
            answers: list[list[bytes]] = await pipe.execute()
        return {
            d: Backoff(float(factor), round(float(held), 3))
            for d, (factor, held) in zip(domains, answers, strict=True)
        }
