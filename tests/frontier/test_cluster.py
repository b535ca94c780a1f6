"""A quorum frontier on a 3-node RabbitMQ cluster of the test's own: the node two consumers are connected
to is SIGKILLed at 30 % of a crawl (then restarted as it was, or blank, as a replaced machine); the crawl
completes with every page stored once, and what was fetched again is counted."""

from __future__ import annotations

import asyncio
import re
import time
import uuid
from collections import Counter
from pathlib import Path

import httpx
import pytest

from crawler.names import Names
from demo.site import Site, serve
from tests.support.crawls import consumer, stopped, stored
from tests.support.rabbit_cluster import RabbitCluster
from tests.support.services import run, settings_for
from tests.support.sites import after_requests, reachable, shops, slow, write_config
from tests.support.wait import until

QUORUM = {"queue_type": "quorum", "replicas": 3}


def connected_node(cluster: RabbitCluster, live: int, pid: int) -> int | None:
    """The index of the node process `pid`'s consuming connection is on, once the management API
    lists it (its listing lags by a few seconds)."""
    base = cluster.management_url(live)
    with httpx.Client(timeout=10, trust_env=False) as api:
        listed = api.get(f"{base}api/connections").raise_for_status().json()
    for c in listed:
        name = (c.get("client_properties") or {}).get("connection_name", "")
        if name.startswith("crawler-consume ") and "publisher" not in name and name.endswith(f"pid {pid}"):
            return cluster.names.index(c["node"])
    return None


def _back(errors: list[tuple[int, str]]) -> list[str]:
    """How long each consumer's connection was away, as it logged it."""
    return re.findall(
        r"RabbitMQ connection \(crawler-consume\) back after ([0-9.]+)s", "".join(e for _, e in errors)
    )


def refetches(sites: list[Site]) -> int:
    """Requests for a page beyond its first (robots.txt aside)."""
    counts = Counter(s.url(path) for s in sites for _, path in s.requests if path != "/robots.txt")
    return sum(n - 1 for n in counts.values() if n > 1)


@pytest.mark.timeout(420)
@pytest.mark.parametrize("wipe", [False, True], ids=["restarted", "replaced-blank"])
async def test_the_node_the_consumers_use_killed_at_30_percent_loses_no_page(
    rabbit_ha: RabbitCluster, tmp_path: Path, prefix: str, sqlite_url: str, wipe: bool
) -> None:
    vhost = f"crawler-ha-{uuid.uuid4().hex[:8]}"
    await asyncio.to_thread(rabbit_ha.add_vhost, vhost)
    sites = shops(products=60, hosts=["a.test", "b.test"])
    for site in sites:
        slow(site, 0.01)
    config = write_config(tmp_path / "d.yaml", sites, QUORUM)
    settings = settings_for(rabbit_ha.url(vhost), prefix, sqlite_url, config)
    expected = reachable(sites)
    with serve(*sites):
        seeded = await asyncio.to_thread(run, "crawler", ["seed", *(s.url() for s in sites)], settings)
        assert seeded.returncode == 0, seeded.stderr
        workers = [consumer(settings, "--prefetch", "4") for _ in range(2)]
        try:
            assert await asyncio.to_thread(after_requests(sites, len(expected) * 3 // 10).wait, 90)
            victim = await until(
                lambda: asyncio.to_thread(connected_node, rabbit_ha, 0, workers[0].pid),
                lambda node: node is not None,
                what="the node of the first consumer's connection",
            )
            before = len(stored(sqlite_url))
            killed_at = time.monotonic()
            await asyncio.to_thread(rabbit_ha.kill, victim)
            await until(lambda: len(stored(sqlite_url)) > before + 2, within=60, what="pages stored again")
            failover = time.monotonic() - killed_at
            back = asyncio.create_task(asyncio.to_thread(rabbit_ha.restart, victim, wipe))
            await until(lambda: {r[0] for r in stored(sqlite_url)} >= expected, within=180, what="every page")
            await back
        finally:
            errors = stopped(workers)
    rows = [r[0] for r in stored(sqlite_url)]
    print(  # the figures docs/ha.md and bench/README.md quote
        f"\nnode {victim} killed after {before} of {len(expected)} pages stored "
        f"({'wiped' if wipe else 'kept'} data): pages stored again {failover:.1f}s after the kill, "
        f"consumers back on another node after {', '.join(_back(errors))}s, "
        f"{refetches(sites)} refetches, {len(rows) - len(set(rows))} duplicate rows"
    )
    for returncode, err in errors:
        assert returncode == 0 and "Traceback" not in err, err
    assert any("RabbitMQ connection (crawler-consume) lost" in err for _, err in errors), errors
    assert set(rows) == expected and len(rows) == len(set(rows))
    assert before < len(expected) * 0.8
    if wipe:  # a blank node holds no replica of what was declared before: grow them back onto it
        await asyncio.to_thread(rabbit_ha.grow, victim)
        members = await asyncio.to_thread(rabbit_ha.list_queues, vhost, "name", "members")
        domain = Names(prefix).domain_queue("a.test")
        assert any(q["name"] == domain and len(q["members"]) == 3 for q in members), members
    await asyncio.to_thread(rabbit_ha.delete_vhost, vhost)
