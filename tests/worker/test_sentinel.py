"""Redis through Sentinel: its replica promoted mid-crawl, the crawl completes with every page stored
once and the domain's rate kept, checked from the site's request log and the sink."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path

import pytest

from bench.crash import max_in_window
from demo.site import serve
from tests.fetch.test_ratelimit import leaf_site
from tests.support.crawls import consumer, finish, stored
from tests.support.sentinel import SentinelRedis
from tests.support.services import run, settings_for
from tests.support.sites import after_requests, write_config


@pytest.mark.timeout(240)
async def test_a_replica_promoted_mid_crawl_is_ridden_out_politely(
    tmp_path: Path, amqp_url: str, prefix: str, sqlite_url: str, redis_sentinel: SentinelRedis
) -> None:
    rate, burst = 8, 2
    site = leaf_site("a.test", 90)
    config = write_config(tmp_path / "d.yaml", [site], rate=rate, burst=burst, prefetch=8)
    settings = replace(settings_for(amqp_url, prefix, sqlite_url, config), redis_url=redis_sentinel.url)
    before = redis_sentinel.master()
    with serve(site):
        seeded = await asyncio.to_thread(run, "crawler", ["seed", site.url()], settings)
        assert seeded.returncode == 0, seeded.stderr
        workers = [consumer(settings, "--burst") for _ in range(2)]
        assert await asyncio.to_thread(after_requests([site], 30).wait, 60)
        await asyncio.to_thread(redis_sentinel.failover)
        promoted_at = len(site.requests)
        await asyncio.to_thread(finish, *workers, timeout=150)
    assert redis_sentinel.master() != before
    rows = [r[0] for r in stored(sqlite_url)]
    times = [t for t, _ in site.requests]
    print(  # the figures docs/ha.md quotes
        f"\nreplica promoted after {promoted_at} of {len(times)} requests: {len(rows)} rows, "
        f"at most {max_in_window(times, 1.0)} requests in a second, {max_in_window(times, 10.0)} in 10 s"
    )
    assert promoted_at < len(times) - rate  # the crawl went on after the promotion
    assert set(rows) == {site.url(p) for p in site.routes}
    assert len(rows) == len(set(rows))
    assert max_in_window(times, 1.0) <= rate + burst + 1
    assert max_in_window(times, 10.0) <= 10 * rate + burst + 1
