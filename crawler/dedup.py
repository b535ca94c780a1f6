"""The dedup store: fingerprints of routed URLs in Redis, shared by every process of a crawl."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from redis.asyncio import Redis

# A fingerprint's value is its claimant while its publish is unconfirmed, then DONE. A claimant
# that comes back (a redelivered page) may publish its pending links again; nobody else may.
DONE = b"+"
_CLAIM = """
local out = {}
for i = 2, #ARGV do
  local fp = ARGV[i]
  if redis.call('HSETNX', KEYS[1], fp, ARGV[1]) == 1 then
    out[#out + 1] = 1
  elseif redis.call('HGET', KEYS[1], fp) == ARGV[1] then
    out[#out + 1] = 1
  else
    out[#out + 1] = 0
  end
end
return out
"""


class SeenStore:
    """Which canonical URLs were already routed, keyed by fingerprint."""

    def __init__(self, redis: Redis, key: str) -> None:
        self._redis = redis
        self._key = key
        self._claim = redis.register_script(_CLAIM)

    async def claim(self, fingerprints: Sequence[bytes], claimant: bytes) -> list[bool]:
        """For each fingerprint, True if `claimant` should publish it (unseen, or its own pending)."""
        if not fingerprints:
            return []
        result: list[Any] = await self._claim(keys=[self._key], args=[claimant, *fingerprints])
        return [bool(x) for x in result]

    async def confirm(self, fingerprints: Sequence[bytes]) -> None:
        """Mark fingerprints published for good."""
        if fingerprints:
            await self._redis.hset(self._key, mapping=dict.fromkeys(fingerprints, DONE))

    async def release(self, fingerprints: Sequence[bytes]) -> None:
        """Forget fingerprints whose publish failed, so they can be routed again."""
        if fingerprints:
            await self._redis.hdel(self._key, *fingerprints)

    async def count(self) -> int:
        """How many URLs were routed."""
        return int(await self._redis.hlen(self._key))
