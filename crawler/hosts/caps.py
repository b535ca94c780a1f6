"""Per-crawl caps on hosts, fleet-wide in Redis: hosts per crawl, and hosts per registered domain (so
a generator of subdomains is a trap of bounded size)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from redis.asyncio import Redis

from crawler.hosts.registered import registered_domain
from crawler.names import Names

HostVerdict = Literal["known", "new", "max_hosts", "registered_domain"]
_VERDICTS: tuple[HostVerdict, ...] = ("known", "new", "max_hosts", "registered_domain")

# KEYS[1] the crawl's hosts (set), KEYS[2] its hosts per registered domain (hash). ARGV[1] max_hosts,
# ARGV[2] hosts per registered domain, then host and registered domain pairs. One verdict per host
# (an index into _VERDICTS); a host refused is not counted, so it may be admitted once others go.
_ADMIT = """
local max_hosts, per_domain = tonumber(ARGV[1]), tonumber(ARGV[2])
local count = redis.call('SCARD', KEYS[1])
local out = {}
for i = 3, #ARGV, 2 do
  local host, domain = ARGV[i], ARGV[i + 1]
  if redis.call('SISMEMBER', KEYS[1], host) == 1 then
    out[#out + 1] = 0
  elseif count >= max_hosts then
    out[#out + 1] = 2
  elseif tonumber(redis.call('HGET', KEYS[2], domain) or '0') >= per_domain then
    out[#out + 1] = 3
  else
    redis.call('SADD', KEYS[1], host)
    redis.call('HINCRBY', KEYS[2], domain, 1)
    count = count + 1
    out[#out + 1] = 1
  end
end
return out
"""


class HostCaps:
    """Admits hosts to a crawl within its caps: max_hosts in all, max_hosts_per_domain per registered
    domain. Every worker asks the same keys, so the caps hold fleet-wide."""

    def __init__(self, redis: Redis, names: Names) -> None:
        self._names = names
        self._admit = redis.register_script(_ADMIT)
        self._redis = redis

    async def admit(
        self, hosts: Sequence[str], *, max_hosts: int, per_domain: int, crawl: str | None = None
    ) -> dict[str, HostVerdict]:
        """Each canonical host's verdict, all in one round trip: `known` (admitted before), `new`
        (admitted now), or the cap that refuses it."""
        unique = list(dict.fromkeys(hosts))
        if not unique:
            return {}
        names = self._names.for_crawl(crawl)
        args: list[str | int] = [max_hosts, per_domain]
        for host in unique:
            args += [host, registered_domain(host)]
        answers = await self._admit(keys=[names.hosts_key, names.registered_key], args=args)
        return {host: _VERDICTS[int(a)] for host, a in zip(unique, answers, strict=True)}

    async def known(self, crawl: str | None = None) -> int:
        """How many hosts the crawl has admitted."""
        return int(await self._redis.scard(self._names.for_crawl(crawl).hosts_key))

    async def hosts_of(self, domain: str, crawl: str | None = None) -> int:
        """How many hosts of the registered domain `domain` the crawl has admitted."""
        found = await self._redis.hget(self._names.for_crawl(crawl).registered_key, domain)
        return int(found or 0)
