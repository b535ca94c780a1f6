"""The guard and connection pinning on what the fleet's DNS cache answers, against a real dnsmasq."""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from typing import Any

import pytest
from redis.asyncio import Redis

from bench.dnsmasq import NameServer
from crawler.config import parse_config
from crawler.dns import HostResolver
from crawler.errors import NoSuchHost, Refused
from crawler.fetch import AiohttpFetcher, HttpFetcher
from crawler.fetch.connect import AddressPolicy, GuardedBackend
from crawler.fetch.fetcher import BoundedFetcher
from crawler.names import Names
from crawler.openweb import DnsConfig
from demo.site import Site, free_port, page, serve

LOOPBACK = ipaddress.ip_network("127.0.0.0/8")


def resolver_for(server: NameServer, redis: Redis, prefix: str) -> HostResolver:
    return HostResolver(redis, Names(prefix), DnsConfig.model_validate({"nameservers": [server.spelled]}))


@pytest.mark.parametrize(
    ("host", "refused"),
    [
        ("evil.test", "evil.test resolves to 169.254.169.254 (link-local: the cloud metadata service)"),
        ("inside.test", "inside.test resolves to 10.0.0.1 (private)"),
    ],
)
async def test_the_guard_refuses_a_name_that_resolves_to_a_refused_address(
    nameserver: NameServer, redis: Redis, prefix: str, host: str, refused: str
) -> None:
    guard = GuardedBackend(
        {}, AddressPolicy(allow_networks=[LOOPBACK]), resolver=resolver_for(nameserver, redis, prefix)
    )
    with pytest.raises(Refused) as caught:
        await guard.allowed(host, 80)
    assert refused in str(caught.value)
    assert await guard.allowed("a.test", 80) == [ipaddress.ip_address("127.0.0.21")]


@pytest.mark.parametrize("make", [AiohttpFetcher, HttpFetcher])
async def test_fetches_connect_to_what_the_name_resolves_to_and_nothing_else(
    nameserver: NameServer,
    redis: Redis,
    prefix: str,
    fetchers: list[BoundedFetcher],
    make: Callable[..., BoundedFetcher],
) -> None:
    port = free_port("127.0.0.21")
    site = Site("a.test", "127.0.0.21", port, {"/": page("home", [])})  # type: ignore[dict-item]
    config = parse_config("allow_networks: [127.0.0.0/8]\ndomains: {a.test: {}}")
    resolver = resolver_for(nameserver, redis, prefix)
    fetcher: Any = make(config, resolver=resolver)
    fetchers.append(fetcher)
    rules = config.rules_for("a.test")
    with serve(site):
        answer = await fetcher.fetch(f"http://a.test:{port}/", rules)
        assert answer.status_code == 200 and b"home" in answer.body
        with pytest.raises(Refused, match=r"evil\.test resolves to 169\.254\.169\.254"):
            await fetcher.fetch(f"http://evil.test:{port}/", rules)
        with pytest.raises(NoSuchHost, match=r"nope\.test: no such host") as caught:
            await fetcher.fetch(f"http://nope.test:{port}/", rules)
        assert not caught.value.transient
    assert site.hits("/") == 1
    assert resolver.lookups == 3  # each name once
