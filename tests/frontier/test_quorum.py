"""A quorum frontier on the shared node: its queues, its two priority bands, the delivery limit, and
`crawler frontier migrate` switching a running crawl from classic queues to quorum ones."""

from __future__ import annotations

import asyncio
import itertools
import threading
from pathlib import Path

import aio_pika
import pytest
from redis.asyncio import Redis

from crawler.config import load_config
from crawler.frontier.client import routing
from crawler.frontier.dead import DeadLetter
from crawler.frontier.exchanges import declare, topology
from crawler.frontier.message import CrawlMessage
from crawler.names import Names
from crawler.settings import Settings
from crawler.worker import wiring
from demo.site import Reply, Route, Site, free_port, page, serve
from tests.support.crawls import consumer, rows, run_crawl, stopped, stored
from tests.support.services import queue_info, run, settings_for
from tests.support.sites import IPS, after_requests, reachable, shops, write_config
from tests.support.wait import until

DELIVERY_LIMIT = 3
QUORUM = {"queue_type": "quorum", "replicas": 3, "delivery_limit": DELIVERY_LIMIT}


async def depth(settings: Settings, queue: str) -> int:
    """Ready messages of `queue`, from a passive declare (the management API's lag ~5 s)."""
    async with await aio_pika.connect(settings.amqp_url) as connection:
        channel = await connection.channel()
        declared = await channel.declare_queue(queue, passive=True)
        return declared.declaration_result.message_count or 0


async def test_a_quorum_frontier_is_replicated_dead_letters_at_least_once_and_puts_seeds_first(
    tmp_path: Path, amqp_url: str, prefix: str, sqlite_url: str
) -> None:
    sites = shops(products=3, hosts=["a.test"])
    settings = settings_for(amqp_url, prefix, sqlite_url, write_config(tmp_path / "d.yaml", sites, QUORUM))
    config = load_config(settings.config_path)
    names = Names(prefix)
    await wiring.seed(settings, config, [sites[0].url()])
    main, first = names.domain_queue("a.test"), names.first_band("a.test")
    for name in (
        main,
        first,
        names.dead,
        names.unrouted,
        *(names.retry_queue(d) for d in config.retry_tiers),
    ):
        assert queue_info(amqp_url, name)["type"] == "quorum", name
    args = queue_info(amqp_url, main)["arguments"]
    assert isinstance(args, dict)
    assert args["x-dead-letter-strategy"] == "at-least-once"
    assert args["x-overflow"] == "reject-publish"
    assert args["x-delivery-limit"] == 3
    assert "x-max-priority" not in args  # RabbitMQ 3.10 refuses it on a quorum queue
    # The seed (priority 9) waits in the first band; a depth-1 link (priority 5) in the domain's queue.
    assert (await depth(settings, first), await depth(settings, main)) == (1, 0)
    async with routing(settings, config, "test") as router:
        routed = await router.route([sites[0].url("/product/1")], depth=1, claimant=b"test")
    assert len(routed.published) == 1
    assert (await depth(settings, first), await depth(settings, main)) == (1, 1)


async def test_a_message_returned_past_the_delivery_limit_reaches_the_dead_queue_with_its_reason(
    tmp_path: Path, amqp_url: str, prefix: str, sqlite_url: str
) -> None:
    sites = shops(products=1, hosts=["a.test"])
    settings = settings_for(amqp_url, prefix, sqlite_url, write_config(tmp_path / "d.yaml", sites, QUORUM))
    config = load_config(settings.config_path)
    names = Names(prefix)
    url = sites[0].url("/poison")
    async with await aio_pika.connect(amqp_url) as connection:
        channel = await connection.channel()
        await declare(channel, topology(config, names))
        exchange = await channel.get_exchange(names.frontier)
        await exchange.publish(aio_pika.Message(CrawlMessage(url, 1).encode()), "a.test")
        # A worker dying on it each time: delivered, never acked, its channel gone.
        for _ in range(DELIVERY_LIMIT + 1):
            dying = await connection.channel()
            queue = await dying.get_queue(names.domain_queue("a.test"))
            got = await until(lambda q=queue: q.get(no_ack=False, fail=False), what="the poison message")
            assert got is not None
            await dying.close()
        dead = await channel.get_queue(names.dead)
        letter = await until(lambda: dead.get(no_ack=False, fail=False), what="the dead letter", within=30)
        assert letter is not None
    found = DeadLetter.of(letter)
    assert (found.url, found.reason, found.domain) == (url, "delivery_limit", "a.test")
    assert await depth(settings, names.domain_queue("a.test")) == 0


async def test_a_page_answering_503_waits_in_a_quorum_delay_tier_and_is_stored_after(
    tmp_path: Path, amqp_url: str, prefix: str, sqlite_url: str
) -> None:
    port = free_port(IPS["a.test"])
    flaky: Route = lambda count: Reply(503) if count == 0 else page("back", [])  # noqa: E731
    site = Site("a.test", IPS["a.test"], port, {"/": page("home", ["/flaky"]), "/flaky": flaky})
    config = write_config(tmp_path / "d.yaml", [site], QUORUM, retry_delays=[0.3])
    settings = settings_for(amqp_url, prefix, sqlite_url, config)
    with serve(site):
        await run_crawl(settings, site.url())
    assert rows(sqlite_url)[site.url("/flaky")] == (200, None, 2)  # the second attempt, after the tier


def held_after(sites: list[Site], n: int, gate: threading.Event) -> None:
    """Make every request after the sites' first `n` wait until `gate` is set (at most 60 s)."""
    served = itertools.count()

    def held(route: Route) -> Route:
        def answer(count: int) -> Reply:
            if next(served) >= n:
                gate.wait(60)
            return route(count) if callable(route) else route

        return answer

    for site in sites:
        site.routes = {path: held(route) for path, route in site.routes.items()}


@pytest.mark.timeout(240)
async def test_migrate_mid_crawl_switches_classic_queues_to_quorum_and_loses_nothing(
    tmp_path: Path, amqp_url: str, prefix: str, sqlite_url: str, redis: Redis
) -> None:
    sites = shops(products=60, hosts=["a.test", "b.test"])
    classic = write_config(tmp_path / "classic.yaml", sites)
    quorum = write_config(tmp_path / "quorum.yaml", sites, QUORUM)
    settings = settings_for(amqp_url, prefix, sqlite_url, classic)
    expected = reachable(sites)
    # The crawl holds at 30 % until the migration pauses its first domain: however slow the machine,
    # the queues are re-made with the rest of the crawl in them.
    gate = threading.Event()
    held_after(sites, len(expected) * 3 // 10, gate)
    with serve(*sites):
        await wiring.seed(settings, load_config(classic), [s.url() for s in sites])
        workers = [consumer(settings, "--prefetch", "4") for _ in range(2)]
        try:
            assert await asyncio.to_thread(after_requests(sites, len(expected) * 3 // 10).wait, 60)
            migrating = asyncio.create_task(
                asyncio.to_thread(
                    run, "crawler", ["frontier", "migrate", "-v", "--config", str(quorum)], settings, 60
                )
            )
            await until(lambda: redis.smembers(Names(prefix).paused_key), within=60, what="a domain paused")
            halfway = len(stored(sqlite_url))
            gate.set()
            migrated = await migrating
            assert migrated.returncode == 0, migrated.stderr
            assert "re-made as quorum" in migrated.stdout
            await until(lambda: {r[0] for r in stored(sqlite_url)} >= expected, within=120, what="every page")
        finally:
            gate.set()
            errors = stopped(workers)
    rows = [r[0] for r in stored(sqlite_url)]
    for returncode, err in errors:
        assert returncode == 0 and "Traceback" not in err, err
    assert halfway < len(expected)  # migrated mid-crawl
    assert set(rows) == expected and len(rows) == len(set(rows))
    names = Names(prefix)
    for queue in (names.domain_queue("a.test"), names.dead, names.retry_queue(0.2)):
        assert queue_info(amqp_url, queue)["type"] == "quorum", queue
    again = await asyncio.to_thread(
        run, "crawler", ["frontier", "migrate", "--config", str(quorum)], settings
    )
    assert again.returncode == 0 and "re-made" not in again.stdout, again.stdout
