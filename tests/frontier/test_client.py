"""The frontier client: a reset that starts a crawl afresh."""

from __future__ import annotations

from pathlib import Path

import aio_pika
from redis.asyncio import Redis

from crawler.config import load_config
from crawler.frontier.client import reset
from crawler.names import Names
from crawler.worker import wiring
from demo.site import Site, page
from tests.support.services import settings_for
from tests.support.sites import IPS, write_config


def sites() -> list[Site]:
    return [Site(h, IPS[h], 8080, {"/": page("home", [])}) for h in ("a.test", "b.test")]  # only named


async def test_reset_purges_the_work_queues_and_forgets_what_was_seen(
    tmp_path: Path, amqp_url: str, prefix: str, sqlite_url: str, redis: Redis
) -> None:
    settings = settings_for(amqp_url, prefix, sqlite_url, write_config(tmp_path / "d.yaml", sites()))
    config = load_config(settings.config_path)
    routed = await wiring.seed(settings, config, ["http://a.test:8080/", "http://b.test:8080/"])
    assert len(routed.published) == 2
    names = Names(prefix)
    async with await aio_pika.connect(amqp_url) as connection:
        channel = await connection.channel()
        depth = await channel.declare_queue(names.domain_queue("a.test"), passive=True)
        assert depth.declaration_result.message_count == 1
    assert await redis.exists(names.seen_meta_key)  # the dedup store remembers the seeds
    await reset(settings, config)
    async with await aio_pika.connect(amqp_url) as connection:
        channel = await connection.channel()
        for queue in (names.domain_queue("a.test"), names.domain_queue("b.test")):
            declared = await channel.declare_queue(queue, passive=True)
            assert declared.declaration_result.message_count == 0
    # Seeding again routes both seeds anew: nothing is remembered as seen.
    again = await wiring.seed(settings, config, ["http://a.test:8080/", "http://b.test:8080/"])
    assert len(again.published) == 2
