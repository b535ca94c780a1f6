"""Credits per API key, kept in Redis: what every replica charged, held against the key's budget."""

from __future__ import annotations

import hmac

from redis.asyncio import Redis

from crawler.gateway.proxies import ApiKey
from crawler.names import Names

# ARGV: key, now-relative expiry ms, request id, cap. Returns 1 if admitted.
_ADMIT = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[3]) then return 0 end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[1]), ARGV[2])
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[1]) + 1000)
return 1
"""


def find_key(keys: dict[str, ApiKey], presented: str) -> ApiKey | None:
    """The key whose secret is `presented`, compared in constant time; every key is compared."""
    found = None
    given = presented.encode()
    for secret, key in keys.items():
        if hmac.compare_digest(secret.encode(), given):
            found = key
    return found


class Ledger:
    """Credits charged per API key, fleet-wide; budgets checked before a fetch, charges after."""

    def __init__(self, redis: Redis, names: Names) -> None:
        self._redis = redis
        self._names = names
        self._admit = redis.register_script(_ADMIT)

    async def spent(self, key: ApiKey) -> float:
        """Credits `key` was charged so far."""
        return float(await self._redis.get(self._names.gw_credits_key(key.id)) or 0)

    async def affordable(self, key: ApiKey, price: float) -> bool:
        """False if charging `price` would pass the key's budget.

        Checked before the fetch: concurrent requests can pass the budget by at most their own
        prices, never by more.
        """
        return key.budget is None or await self.spent(key) + price <= key.budget

    async def charge(self, key: ApiKey, credits: float) -> None:
        """Charge an answer that counted."""
        if credits:
            await self._redis.incrbyfloat(self._names.gw_credits_key(key.id), credits)

    async def admit(self, key: ApiKey, request_id: str, hold: float) -> bool:
        """Count a request against the key's max_concurrency, fleet-wide; False if at the cap."""
        keys = [self._names.gw_key_inflight_key(key.id)]
        return (
            int(await self._admit(keys=keys, args=[int(hold * 1000), request_id, key.max_concurrency])) == 1
        )

    async def done(self, key: ApiKey, request_id: str) -> None:
        """The request no longer counts against the key's concurrency."""
        await self._redis.zrem(self._names.gw_key_inflight_key(key.id), request_id)
