"""The fleet's status behind the console's views: one read serves every caller within a second."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from crawler.config import load_config
from crawler.service import status_reads
from crawler.service.control import Control
from tests.support.redis_server import PrivateRedis
from tests.support.services import settings_for
from tests.support.sites import shops, write_config


async def test_views_asked_together_share_one_read_of_the_status(
    amqp_url: str, prefix: str, sqlite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = settings_for(amqp_url, prefix, sqlite_url, write_config(tmp_path / "d.yaml", shops(3)))
    reads = 0
    real = status_reads.status

    async def counted(*args: Any) -> dict[str, Any]:
        nonlocal reads
        reads += 1
        return await real(*args)

    monkeypatch.setattr(status_reads, "status", counted)
    async with Control.open(settings, load_config(settings.config_path), "test") as control:
        found = await asyncio.gather(*(control.domains.listed() for _ in range(5)), control.fleet.view())
        assert reads == 1
        assert all(len(views) == 3 for views in found[:5])
        monkeypatch.setattr(status_reads, "STATUS_FRESH", 0.0)
        await control.domains.listed()
        assert reads == 2  # an older read is not served again


async def test_the_domains_view_reads_no_robots_txt_body(private_redis: PrivateRedis) -> None:
    import json

    from redis.asyncio import Redis as AsyncRedis

    from crawler.config import parse_config
    from crawler.names import Names
    from crawler.service.health import domain_health

    names = Names("robots-view")
    config = parse_config("domains: {" + ", ".join(f"d{i}.test: {{}}" for i in range(40)) + "}\n")
    body = "User-agent: *\n" + "Disallow: /private/\n" * 20_000  # ~400 KB each
    client = AsyncRedis.from_url(private_redis.url)
    try:
        for i in range(40):
            await client.set(names.robots_key(f"http://d{i}.test"), json.dumps({"body": body}))
        down = json.dumps({"unavailable": "robots.txt unavailable: HTTP 503"})
        await client.set(names.robots_key("http://d0.test:8080"), down)
        before = (await client.info("stats"))["total_net_output_bytes"]
        health = await domain_health(client, names, config, sorted(config.domains))
        sent = (await client.info("stats"))["total_net_output_bytes"] - before
    finally:
        await client.aclose()
    assert health["d1.test"].robots.state == "ok" and health["d1.test"].robots.origins == 1
    assert health["d0.test"].robots.state == "unavailable"
    assert health["d0.test"].robots.detail == "robots.txt unavailable: HTTP 503"
    # 40 bodies of ~400 KB were held; the view read a head of each (and the info call's own answer).
    assert sent < 200_000, f"{sent} bytes read from Redis to list 41 robots.txt"
