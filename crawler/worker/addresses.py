"""Which address a request goes to, for the budget every host on that address shares (`per_ip:`)."""

from __future__ import annotations

import ipaddress
from collections.abc import Callable

from redis.asyncio import Redis

from crawler.config import CrawlConfig
from crawler.dns import HostResolver
from crawler.fetch.connect import AddressPolicy, IPAddress
from crawler.fetch.ratelimit import Budget
from crawler.frontier.urls import host_of
from crawler.names import Names


def host_resolver(config: CrawlConfig, redis: Redis, names: Names) -> HostResolver | None:
    """The fleet's DNS cache when domains.yaml names name servers or sets `per_ip:`; None leaves
    names to the system's resolver, uncached, as before."""
    if config.dns.nameservers is None and config.per_ip is None:
        return None
    return HostResolver(redis, names, config.dns)


class Addresses:
    """A request's address as its fetch resolves it (the `resolve` map, an IP literal, else the
    fleet's DNS cache), and the `per_ip:` budget it shares there."""

    def __init__(self, resolver: HostResolver, config: Callable[[], CrawlConfig]) -> None:
        self._resolver = resolver
        self._config = config  # the live configuration: per_ip may be edited mid-crawl

    async def share(self, url: str) -> tuple[str, Budget] | None:
        """`url`'s address and the budget of that address; None without `per_ip:`. NoSuchHost or
        ResolveFailed as the fetch itself would raise them."""
        config = self._config()
        per_ip = config.per_ip
        if per_ip is None:
            return None
        host = host_of(url)
        pinned = config.resolve.get(host)
        if pinned is not None:
            address = pinned
        else:
            try:
                address = str(ipaddress.ip_address(host.strip("[]")))
            except ValueError:
                address = self._allowed(config, (await self._resolver.resolve(host)).addresses)
        return address, Budget(per_ip.rate, per_ip.burst, config.defaults.backoff_recovery)

    @staticmethod
    def _allowed(config: CrawlConfig, addresses: tuple[IPAddress, ...]) -> str:
        # The fetch connects to the first address the guard allows; one refused is charged, not fetched.
        policy = AddressPolicy(config.allow_private_networks, config.allow_networks)
        return str(next((ip for ip in addresses if policy.refusal(ip) is None), addresses[0]))
