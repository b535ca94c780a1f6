"""A crawl's wiring: the domains and seeds it accepts, and a reset that starts it afresh."""

from __future__ import annotations

import re
from pathlib import Path

import aio_pika
import pytest
from redis.asyncio import Redis

from crawler.config import load_config
from crawler.errors import BadURL, ConfigError
from crawler.names import Names
from crawler.worker import wiring
from demo.site import Site, page
from tests.support.services import settings_for
from tests.support.sites import IPS, write_config


def sites() -> list[Site]:
    return [Site(h, IPS[h], 8080, {"/": page("home", [])}) for h in ("a.test", "b.test")]  # only named


def test_check_domains_takes_all_or_the_named_known_ones(tmp_path: Path) -> None:
    config = load_config(write_config(tmp_path / "d.yaml", sites()))
    assert wiring.check_domains(config, None) == ["a.test", "b.test"]
    assert wiring.check_domains(config, [" B.test ", ""]) == ["b.test"]
    with pytest.raises(ConfigError, match=re.escape("not configured in domains.yaml: z.test")):
        wiring.check_domains(config, ["a.test", "z.test"])


def test_check_seeds_canonicalises_and_refuses_other_hosts(tmp_path: Path) -> None:
    config = load_config(write_config(tmp_path / "d.yaml", sites()))
    assert wiring.check_seeds(config, ["HTTP://A.test:8080/#top"]) == ["http://a.test:8080/"]
    with pytest.raises(BadURL, match=re.escape("http://elsewhere.test/: its host is in no domain")):
        wiring.check_seeds(config, ["http://a.test:8080/", "http://elsewhere.test/"])


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
    await wiring.reset(settings, config)
    async with await aio_pika.connect(amqp_url) as connection:
        channel = await connection.channel()
        for queue in (names.domain_queue("a.test"), names.domain_queue("b.test")):
            declared = await channel.declare_queue(queue, passive=True)
            assert declared.declaration_result.message_count == 0
    # Seeding again routes both seeds anew: nothing is remembered as seen.
    again = await wiring.seed(settings, config, ["http://a.test:8080/", "http://b.test:8080/"])
    assert len(again.published) == 2
