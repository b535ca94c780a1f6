"""The caps on hosts per crawl and per registered domain, fleet-wide in the real Redis."""

from __future__ import annotations

import asyncio

from redis.asyncio import Redis

from crawler.hosts import HostCaps
from crawler.names import Names


async def test_a_subdomain_generator_is_a_bounded_trap(redis: Redis, prefix: str) -> None:
    caps = HostCaps(redis, Names(prefix))
    trap = [f"s{i}.trap.test" for i in range(20)]
    verdicts = await caps.admit([*trap, "shop.test"], max_hosts=1000, per_domain=5, crawl="c1")
    assert [verdicts[h] for h in trap] == ["new"] * 5 + ["registered_domain"] * 15
    assert verdicts["shop.test"] == "new"
    again = await caps.admit(trap[:6], max_hosts=1000, per_domain=5, crawl="c1")
    assert list(again.values()) == ["known"] * 5 + ["registered_domain"]
    assert await caps.hosts_of("trap.test", crawl="c1") == 5
    # Another crawl has caps of its own.
    other = await caps.admit(trap[:6], max_hosts=1000, per_domain=5, crawl="c2")
    assert list(other.values()) == ["new"] * 5 + ["registered_domain"]


async def test_max_hosts_caps_a_crawl(redis: Redis, prefix: str) -> None:
    caps = HostCaps(redis, Names(prefix))
    hosts = [f"h{i}.test" for i in range(10)]
    verdicts = await caps.admit(hosts, max_hosts=4, per_domain=100)
    assert list(verdicts.values()) == ["new"] * 4 + ["max_hosts"] * 6
    assert await caps.known() == 4


async def test_the_caps_hold_across_workers_admitting_at_once(redis: Redis, prefix: str) -> None:
    workers = [HostCaps(redis, Names(prefix)) for _ in range(4)]
    batches = [[f"w{w}-{i}.trap.test" for i in range(10)] for w in range(4)]
    answers = await asyncio.gather(
        *(
            caps.admit(batch, max_hosts=1000, per_domain=7)
            for caps, batch in zip(workers, batches, strict=True)
        )
    )
    admitted = [h for verdicts in answers for h, v in verdicts.items() if v == "new"]
    assert len(admitted) == 7
    assert await workers[0].hosts_of("trap.test") == 7
