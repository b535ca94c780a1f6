"""A request's address for its `per_ip:` budget: as the fetch would connect, against a real dnsmasq."""

from __future__ import annotations

import pytest
from redis.asyncio import Redis

from bench.dnsmasq import NameServer
from crawler.config import CrawlConfig
from crawler.dns import HostResolver
from crawler.errors import NoSuchHost
from crawler.fetch.ratelimit import Budget
from crawler.names import Names
from crawler.worker.addresses import Addresses, host_resolver


def config_for(nameserver: NameServer, **more: object) -> CrawlConfig:
    return CrawlConfig.model_validate(
        {
            "domains": {"a.test": {}},
            "resolve": {"pinned.test": "127.0.0.7"},
            "allow_networks": ["127.0.0.0/8"],
            "dns": {"nameservers": [nameserver.spelled]},
            **more,
        }
    )


async def test_the_address_is_what_the_fetch_connects_to(
    nameserver: NameServer, redis: Redis, prefix: str
) -> None:
    config = config_for(nameserver, per_ip={"rate": 3, "burst": 2})
    resolver = host_resolver(config, redis, Names(prefix))
    assert resolver is not None
    addresses = Addresses(resolver, lambda: config)
    share = Budget(3, 2, config.defaults.backoff_recovery)
    assert await addresses.share("http://a.test:8080/x") == ("127.0.0.21", share)  # by dnsmasq
    assert await addresses.share("http://pinned.test/") == ("127.0.0.7", share)  # the resolve map
    assert await addresses.share("http://127.0.0.9/") == ("127.0.0.9", share)  # an IP literal
    assert resolver.lookups == 1
    with pytest.raises(NoSuchHost, match=r"nope\.test: no such host"):
        await addresses.share("http://nope.test/")


async def test_without_per_ip_there_is_no_share_and_without_dns_no_resolver(
    nameserver: NameServer, redis: Redis, prefix: str
) -> None:
    config = config_for(nameserver)
    resolver = HostResolver(redis, Names(prefix), config.dns)
    assert await Addresses(resolver, lambda: config).share("http://a.test/") is None
    assert resolver.lookups == 0
    assert (
        host_resolver(CrawlConfig.model_validate({"domains": {"a.test": {}}}), redis, Names(prefix)) is None
    )
