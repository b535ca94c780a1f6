"""The soak's ledger (bench/ledger.py) against the real services: every URL a crawl discovered is a
row, a message in some queue or a dead letter; one that is nowhere is named, with its last trace."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aio_pika
from redis.asyncio import Redis

from bench.ledger import take
from crawler.config import load_config
from crawler.frontier.urls import fingerprint
from crawler.names import Names
from crawler.sink.sql import migrate
from demo.site import serve
from tests.support.crawls import consumer, finish, seed
from tests.support.services import settings_for
from tests.support.sites import reachable, shops, write_config


async def test_the_ledger_accounts_for_every_url_and_names_one_that_was_lost(
    tmp_path: Path, amqp_url: str, prefix: str, sqlite_url: str
) -> None:
    sites = shops(products=6, hosts=["a.test", "b.test"])
    config_path = write_config(tmp_path / "d.yaml", sites)
    settings = settings_for(amqp_url, prefix, sqlite_url, config_path)
    config = load_config(str(config_path))
    names = Names(prefix)
    log = tmp_path / "consume.log"
    await asyncio.to_thread(migrate, sqlite_url)
    with serve(*sites):
        await seed(settings, sites[0].url())
        # b.test is not crawled: its home, linked from a.test's pages, stays queued, as a crawl
        # stopped half-way leaves it.
        worker = consumer(settings, "--burst", "--domains", "a.test", "--trace")
        (err,) = await asyncio.to_thread(finish, worker, timeout=120)
    log.write_text(err)
    expected = [*sorted(reachable(sites[:1])), sites[1].url()]
    ledger = await take(amqp_url, settings.redis_url, names, sqlite_url, config, expected, [log])
    assert ledger.ok, ledger.text()
    assert ledger.rows == len(expected) - 1 and ledger.queued[names.domain_queue("b.test")] == 1, (
        ledger.text()
    )
    assert ledger.discovered == len(expected)

    # A page stored after a Redis loss whose rebuild came first is not in the seen-set: its row
    # accounts for it.
    async with Redis.from_url(settings.redis_url) as redis:
        assert await redis.hdel(names.seen_key, fingerprint(sites[0].url("/product/1"))) == 1
    ledger = await take(amqp_url, settings.redis_url, names, sqlite_url, config, expected, [log])
    assert ledger.ok and ledger.rows_not_discovered == 1, ledger.text()

    # b.test's message taken and acked by nobody's worker: lost, and named with its trace.
    async with await aio_pika.connect(amqp_url) as connection:
        channel = await connection.channel()
        queue = await channel.get_queue(names.domain_queue("b.test"))
        message = await queue.get()
        await message.ack()
    gone = message.body.decode()
    ledger = await take(amqp_url, settings.redis_url, names, sqlite_url, config, expected, [log])
    assert not ledger.ok and ledger.lost == 1, ledger.text()
    ((url, last),) = ledger.missing
    assert url == sites[1].url() and url in gone
    assert last.startswith(tuple("0123456789")) and "routed " + url in last, last  # who routed it
    assert f"lost {url}" in ledger.text()
