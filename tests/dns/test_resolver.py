"""The fleet's DNS cache against a real dnsmasq and the real Redis: answers, NXDOMAIN, failures."""

from __future__ import annotations

import ipaddress

import pytest
from redis.asyncio import Redis

from bench.dnsmasq import NameServer
from crawler.dns import HostResolver, SystemResolver
from crawler.errors import HostParked, NoSuchHost, ResolveFailed
from crawler.names import Names
from crawler.openweb import DnsConfig
from tests.support.dnsmasq import NAMES, TTL
from tests.support.wait import until


def dns_config(server: NameServer, **overrides: object) -> DnsConfig:
    return DnsConfig.model_validate({"nameservers": [server.spelled], **overrides})


async def test_a_host_is_looked_up_once_for_the_fleet_and_kept_for_its_ttl(
    nameserver: NameServer, redis: Redis, prefix: str
) -> None:
    config = dns_config(nameserver, max_ttl=3600)
    one, two = (HostResolver(redis, Names(prefix), config) for _ in range(2))  # two workers
    first = await one.resolve("a.test")
    assert first.addresses == (ipaddress.ip_address(NAMES["a.test"]),)
    again = await two.resolve("a.test")
    assert again.addresses == first.addresses
    assert (one.lookups, two.lookups) == (1, 0)
    assert nameserver.queries("a.test") == 1
    # Kept for the record's TTL, which dnsmasq sets.
    kept = await redis.pttl(Names(prefix).dns_key("a.test"))
    assert TTL * 1000 - 5000 < kept <= TTL * 1000


async def test_lookups_at_once_from_two_resolvers_send_one_query(
    nameserver: NameServer, redis: Redis, prefix: str
) -> None:
    import asyncio

    config = dns_config(nameserver)
    resolvers = [HostResolver(redis, Names(prefix), config) for _ in range(2)]
    answers = await asyncio.gather(*(r.resolve("b.test") for r in resolvers for _ in range(5)))
    assert {a.addresses for a in answers} == {(ipaddress.ip_address("127.0.0.22"),)}
    assert sum(r.lookups for r in resolvers) == 1
    assert nameserver.queries("b.test") == 1


@pytest.mark.parametrize(
    ("bounds", "low", "high"),
    [({"min_ttl": 900, "max_ttl": 3600}, 895, 900), ({"min_ttl": 0, "max_ttl": 60}, 55, 60)],
)
async def test_the_ttl_is_kept_within_its_floor_and_ceiling(
    nameserver: NameServer, redis: Redis, prefix: str, bounds: dict[str, float], low: float, high: float
) -> None:
    resolver = HostResolver(redis, Names(prefix), dns_config(nameserver, **bounds))
    resolved = await resolver.resolve("a.test")
    assert low < resolved.ttl <= high
    assert low * 1000 < await redis.pttl(Names(prefix).dns_key("a.test")) <= high * 1000


async def test_an_expired_answer_is_looked_up_again(
    nameserver: NameServer, redis: Redis, prefix: str
) -> None:
    resolver = HostResolver(redis, Names(prefix), dns_config(nameserver, min_ttl=0, max_ttl=0.3))
    await resolver.resolve("a.test")
    await until(lambda: redis.exists(Names(prefix).dns_key("a.test")), lambda n: n == 0, within=5, every=0.05)
    await until(lambda: resolver.resolve("a.test"), lambda _: resolver.lookups == 2, within=5, every=0.05)
    assert nameserver.queries("a.test") == 2


async def test_ipv6_addresses_are_answered_too(nameserver: NameServer, redis: Redis, prefix: str) -> None:
    resolved = await HostResolver(redis, Names(prefix), dns_config(nameserver)).resolve("six.test")
    assert resolved.addresses == (ipaddress.ip_address("::1"),)


async def test_nxdomain_is_an_error_of_its_own_not_retried_and_shared(
    nameserver: NameServer, redis: Redis, prefix: str
) -> None:
    config = dns_config(nameserver)
    one, two = (HostResolver(redis, Names(prefix), config) for _ in range(2))
    with pytest.raises(NoSuchHost, match=r"nope\.test: no such host") as caught:
        await one.resolve("nope.test")
    assert not caught.value.transient
    with pytest.raises(NoSuchHost):
        await two.resolve("nope.test")
    assert (one.lookups, two.lookups) == (1, 0)
    assert nameserver.queries("nope.test") == 1
    # No SOA in dnsmasq's answer: kept for negative_ttl.
    assert 290_000 < await redis.pttl(Names(prefix).dns_key("nope.test")) <= 300_000


@pytest.mark.parametrize(("host", "why"), [("x.dead.test", "timed out"), ("x.refused.test", "REFUSED")])
async def test_a_failure_is_retried_with_back_off_and_a_host_that_keeps_failing_is_parked(
    nameserver: NameServer, redis: Redis, prefix: str, host: str, why: str
) -> None:
    config = dns_config(nameserver, timeout=0.3, backoff=0.2, max_backoff=0.4, park_after=3, park_for=60)
    one, two = (HostResolver(redis, Names(prefix), config) for _ in range(2))
    with pytest.raises(ResolveFailed, match=why) as caught:
        await one.resolve(host)
    assert caught.value.transient and not isinstance(caught.value, HostParked)
    assert 0 < caught.value.retry_after <= 0.2
    with pytest.raises(ResolveFailed):  # backing off: the other worker does not ask either
        await two.resolve(host)
    assert two.lookups == 0

    async def fails() -> int:
        try:
            await two.resolve(host)
        except HostParked:
            return -1
        except ResolveFailed:
            pass
        return two.lookups

    # The second failure backs off longer (0.4 s), the third parks the host.
    await until(fails, lambda n: n == -1, within=10, every=0.05)
    assert one.lookups + two.lookups == 3
    with pytest.raises(HostParked, match="parked after 3 failures") as parked:
        await one.resolve(host)
    assert 55 < parked.value.retry_after <= 60
    assert await one.parked() == 1


async def test_an_answer_after_failures_ends_the_streak(
    nameserver: NameServer, redis: Redis, prefix: str
) -> None:
    names = Names(prefix)
    config = dns_config(nameserver, backoff=0.05, max_backoff=0.05, park_after=2)
    # A streak left by earlier failures (as the fleet would write it), its back-off over.
    await redis.set(names.dns_key("a.test"), "F 1 0 a.test: DNS timed out", px=60_000)
    await redis.zadd(names.dns_parked_key, {"a.test": 1})
    resolved = await HostResolver(redis, names, config).resolve("a.test")
    assert resolved.addresses == (ipaddress.ip_address("127.0.0.21"),)
    assert (await redis.get(names.dns_key("a.test"))).startswith(b"A ")
    assert await redis.zcard(names.dns_parked_key) == 0


async def test_without_nameservers_the_systems_resolver_answers(redis: Redis, prefix: str) -> None:
    resolver = HostResolver(redis, Names(prefix), DnsConfig())
    assert isinstance(resolver._upstream, SystemResolver)
    resolved = await resolver.resolve("localhost")  # from /etc/hosts
    assert ipaddress.ip_address("127.0.0.1") in resolved.addresses
    assert 299 < resolved.ttl <= 300  # getaddrinfo tells no TTL: default_ttl
