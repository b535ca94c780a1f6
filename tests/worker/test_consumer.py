"""The consumer end to end: real RabbitMQ, Redis, databases and test sites on 127.0.0.x."""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import replace
from pathlib import Path

import aio_pika
import pytest
import yaml
from redis.asyncio import Redis

from bench.crash import max_in_window
from crawler.config import load_config
from crawler.errors import CrawlerError, SinkError
from crawler.frontier.client import frontier
from crawler.frontier.concurrency import short_retries
from crawler.monitor.metrics import Metrics
from crawler.names import HEADER_REASON, Names
from crawler.sink.database import Database
from crawler.sink.sql import Sink
from crawler.worker import wiring
from crawler.worker.consumer import Consumer
from crawler.worker.tuning import Tuning
from demo.site import Reply, Route, Site, free_port, page, serve
from tests.support.crawls import consumer, finish, seed, stored
from tests.support.services import crawler_command, env_for, settings_for, unacked
from tests.support.sites import IPS, after_requests, reachable, shops, slow, write_config
from tests.support.wait import until


@pytest.mark.parametrize(
    ("database_url", "dedup"),
    [("sqlite", None), ("postgresql", None), ("sqlite", "compact"), ("postgresql", "bloom")],
    indirect=["database_url"],
)
async def test_two_consumer_processes_store_every_page_exactly_once(
    tmp_path: Path, amqp_url: str, prefix: str, database_url: str, dedup: str | None, redis: Redis
) -> None:
    sites = shops(products=25)
    settings = settings_for(amqp_url, prefix, database_url, write_config(tmp_path / "d.yaml", sites))
    settings = replace(settings, dedup=dedup)  # CRAWLER_DEDUP, for the seeding here and the workers
    with serve(*sites):
        await seed(settings, *(s.url() for s in sites))
        workers = [consumer(settings, "--burst", "--prefetch", "4") for _ in range(2)]
        await asyncio.to_thread(finish, *workers)
    rows = stored(database_url)
    assert sorted(r[0] for r in rows) == sorted(reachable(sites))  # each page once, no duplicate rows
    assert all(r[1] == 200 and r[2] is None for r in rows if not r[0].endswith("/missing"))
    assert all(r[1] == 404 for r in rows if r[0].endswith("/missing"))
    for site in sites:  # shared dedup: no page fetched twice by the fleet
        assert all(site.hits(path) == 1 for path in site.routes)
    layout = await redis.hget(Names(prefix).seen_meta_key, "layout")
    assert layout is not None and layout.decode().startswith(dedup or "plain")
    assert await redis.exists(Names(prefix).seen_key) == (dedup is None)


async def test_a_consumer_killed_mid_crawl_loses_nothing(
    tmp_path: Path, amqp_url: str, prefix: str, sqlite_url: str
) -> None:
    sites = shops(products=30)
    for site in sites:
        slow(site, 0.02)
    settings = settings_for(amqp_url, prefix, sqlite_url, write_config(tmp_path / "d.yaml", sites))
    with serve(*sites):
        await seed(settings, *(s.url() for s in sites))
        victim = consumer(settings, "--prefetch", "8")
        assert await asyncio.to_thread(after_requests(sites, 25).wait, 60)
        victim.send_signal(signal.SIGKILL)
        await asyncio.to_thread(victim.communicate, timeout=30)
        assert len(stored(sqlite_url)) < len(reachable(sites))  # it really died mid-crawl
        await asyncio.to_thread(finish, consumer(settings, "--burst"))
    rows = [r[0] for r in stored(sqlite_url)]
    assert sorted(rows) == sorted(reachable(sites))


async def test_a_consumer_killed_behind_a_hanging_fetch_refetches_only_what_was_in_flight(
    tmp_path: Path, amqp_url: str, prefix: str, sqlite_url: str
) -> None:
    # /hang, first in the queue, answers only once the consumer is dead: every other delivery of
    # its channel finishes behind it, and /fail spends its attempts there too.
    pages = [f"/p/{i}" for i in range(30)]
    released = threading.Event()

    def hang(count: int) -> Reply:
        if count == 0:
            released.wait(90)
        return page("slow", [])

    host = "a.test"
    routes: dict[str, Route] = {"/": page("home", ["/hang", "/fail", *pages])}
    routes.update({p: page(p, []) for p in pages})
    routes["/hang"] = hang
    routes["/fail"] = Reply(500)
    site = Site(host, IPS[host], free_port(IPS[host]), routes)
    retry_delays = [0.2, 0.4]
    config = write_config(tmp_path / "d.yaml", [site], timeout=60, retry_delays=retry_delays)
    settings = settings_for(amqp_url, prefix, sqlite_url, config)
    queue = Names(prefix).domain_queue(host)
    with serve(site):
        await seed(settings, site.url())
        victim = consumer(settings, "--prefetch", "8")
        try:
            # Everything but /hang stored (/fail after its last attempt), and acked: /hang alone is out.
            await until(lambda: site.hits("/fail"), lambda n: n == len(retry_delays) + 1, what="/fail")
            await until(lambda: len(stored(sqlite_url)), lambda n: n == len(pages) + 2, what="rows stored")
            await until(lambda: unacked(amqp_url, queue), lambda n: n == 1, within=30, what="acked")
        finally:
            victim.send_signal(signal.SIGKILL)
            await asyncio.to_thread(victim.communicate, timeout=30)
            released.set()
        await asyncio.to_thread(finish, consumer(settings, "--burst"))
    requests = Counter(path for _, path in site.requests)
    # The one delivery in flight at the kill is the one fetched again.
    assert {p: n for p, n in requests.items() if n > 1 and p != "/fail"} == {"/hang": 2}
    assert requests["/fail"] == len(retry_delays) + 1  # one lineage of attempts, across the crash
    assert sorted(r[0] for r in stored(sqlite_url)) == sorted(site.url(p) for p in routes)


async def test_sigterm_finishes_in_flight_work_and_exits_0(
    tmp_path: Path, amqp_url: str, prefix: str, sqlite_url: str
) -> None:
    sites = shops(products=30, hosts=["a.test"])
    slow(sites[0], 0.05)
    settings = settings_for(amqp_url, prefix, sqlite_url, write_config(tmp_path / "d.yaml", sites))
    with serve(*sites):
        await seed(settings, sites[0].url())
        worker = consumer(settings, "--prefetch", "4")
        assert await asyncio.to_thread(after_requests(sites, 10).wait, 60)
        worker.send_signal(signal.SIGTERM)
        await asyncio.to_thread(finish, worker)
        fetched = {sites[0].url(path) for _, path in sites[0].requests if path != "/robots.txt"}
        # Every page it fetched before stopping was stored: in-flight work was finished, not dropped.
        assert fetched <= {r[0] for r in stored(sqlite_url)}
        await asyncio.to_thread(finish, consumer(settings, "--burst"))
    assert sorted(r[0] for r in stored(sqlite_url)) == sorted(reachable(sites))


async def test_garbage_messages_are_set_aside_and_the_crawl_goes_on(
    tmp_path: Path, amqp_url: str, prefix: str, sqlite_url: str
) -> None:
    sites = shops(products=5, hosts=["a.test"])
    settings = settings_for(amqp_url, prefix, sqlite_url, write_config(tmp_path / "d.yaml", sites))
    names = Names(prefix)
    garbage = [
        b"not json",
        b"[1, 2]",
        b'{"v": 1}',
        b'{"v": 99, "url": "http://a.test/"}',
        json.dumps({"v": 1, "url": "http://b.test/elsewhere"}).encode(),
        b"\xff\xfe not utf-8",
        b'{"v": true, "url": "http://a.test/"}',  # true == 1 in Python: still not a version
        b'{"v": 1, "url": "http://a.test/", "depth": 99999999999999999999}',
        b'{"v": 1, "url": "file:///etc/passwd"}',
        b'{"v": 1, "url": "http://a.test/' + b"x" * 100_000 + b'"}',  # oversized
    ]
    with serve(*sites):
        await seed(settings, sites[0].url())
        async with await aio_pika.connect(amqp_url) as connection:
            channel = await connection.channel()
            for body in garbage:
                await channel.default_exchange.publish(
                    aio_pika.Message(body), routing_key=names.domain_queue("a.test")
                )
            await asyncio.to_thread(finish, consumer(settings, "--burst"))
            dead = await channel.get_queue(names.dead)
            aside = []
            while (message := await dead.get(fail=False)) is not None:
                aside.append(message)
                await message.ack()
    assert sorted(m.body for m in aside) == sorted(garbage)
    assert {m.headers[HEADER_REASON] for m in aside} == {"invalid"}
    assert sorted(r[0] for r in stored(sqlite_url)) == sorted(reachable(sites))


@pytest.mark.parametrize("domains", [["nope.test"], ["a.test", "zzz.test"]])
def test_unknown_domains_are_refused(tmp_path: Path, domains: list[str]) -> None:
    sites = shops(products=1, hosts=["a.test"])
    settings = settings_for(
        "amqp://guest:guest@localhost:5672/", "x", "sqlite://", write_config(tmp_path / "d.yaml", sites)
    )
    result = subprocess.run(
        crawler_command("crawler-consume", "--domains", ",".join(domains)),
        env=env_for(settings),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert "not configured in domains.yaml" in result.stderr


def classed_site(n: int) -> Site:
    """Leaf pages in three classes, /low/, /mid/ and /high/, each class a third of them."""
    port = free_port(IPS["a.test"])
    routes = {f"/{c}/{i}": page(f"{c} {i}", []) for i in range(n) for c in ("low", "mid", "high")}
    return Site("a.test", IPS["a.test"], port, routes)  # type: ignore[arg-type]


async def test_a_backlog_is_fetched_by_priority_with_prefetch_1(
    tmp_path: Path, amqp_url: str, prefix: str, sqlite_url: str
) -> None:
    site = classed_site(170)  # 510 URLs
    rules = [{"match": "^/high/", "priority": 9}, {"match": "^/mid/", "priority": 5}]
    config = write_config(tmp_path / "d.yaml", [site], rate=10_000, burst=1000, priority=1, priorities=rules)
    settings = settings_for(amqp_url, prefix, sqlite_url, config)
    classes = ("low", "mid", "high")
    urls = [site.url(f"/{classes[i % 3]}/{i // 3}") for i in range(510)]  # queued interleaved
    loaded = load_config(settings.config_path)
    async with frontier(settings, "test") as f, f.router(loaded) as router:
        routed = await router.route(urls, depth=1, claimant=b"test")
        assert len(routed.published) == 510
    with serve(site):
        await asyncio.to_thread(finish, consumer(settings, "--burst", "--prefetch", "1"))
    order = [p.split("/")[1] for _, p in site.requests if p != "/robots.txt"]
    assert len(order) == 510
    rank = {"high": 2, "mid": 1, "low": 0}
    assert [rank[c] for c in order] == sorted((rank[c] for c in order), reverse=True)


async def test_edits_of_domains_yaml_reach_a_running_consumer(
    tmp_path: Path, amqp_url: str, prefix: str, sqlite_url: str
) -> None:
    sites = shops(products=40, hosts=["a.test"])
    path = write_config(tmp_path / "d.yaml", sites, rate=1, burst=1)
    settings = settings_for(amqp_url, prefix, sqlite_url, path)
    log = tmp_path / "worker.log"
    with serve(*sites), log.open("w") as sink:
        await seed(settings, sites[0].url())
        worker = subprocess.Popen(
            crawler_command("crawler-consume"), env=env_for(settings), stderr=sink, stdout=sink, text=True
        )
        await until(lambda: len(sites[0].requests) >= 3, every=0.02)
        good = path.read_text()
        path.write_text(good + "\nsurprise: true\n")  # an invalid edit: refused, the old rules stay
        await until(lambda: "refused" in log.read_text(), every=0.02)
        assert "surprise" in log.read_text() and worker.poll() is None
        path.write_text(write_config(tmp_path / "new.yaml", sites, rate=200, burst=10).read_text())
        edited = time.monotonic()
        await until(lambda: len(sites[0].requests) >= 43, within=60, every=0.02)  # 40 s left at rate 1
        # Faster than rate 1 (burst 1) allows: 3 requests within a second, in the site's own log.
        after = [t for t, _ in sites[0].requests if t >= edited]
        assert max_in_window(after, 1.0) >= 3
        worker.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(worker.wait, 60) == 0
    assert "configuration reloaded" in log.read_text()


async def test_a_failing_store_or_publish_is_tried_three_times() -> None:
    calls: list[int] = []

    def failing(times: int) -> Callable[[], Awaitable[str]]:
        async def call() -> str:
            calls.append(1)
            if len(calls) <= times:
                raise SinkError("database away")
            return "stored"

        return call

    assert await short_retries(SinkError, failing(2), 0.001) == "stored"
    assert len(calls) == 3
    calls.clear()
    with pytest.raises(SinkError):
        await short_retries(SinkError, failing(3), 0.001)
    assert len(calls) == 3
    calls.clear()
    with pytest.raises(SinkError):  # not the kind it retries: raised at once
        await short_retries(ValueError, failing(1), 0.001)
    assert len(calls) == 1


def many_domains(count: int) -> tuple[Site, dict[str, object]]:
    """One server answering for `count` domains (an index and one page each), and their domains.yaml."""
    port = free_port(IPS["a.test"])
    site = Site("any", IPS["a.test"], port, {"/": page("index", ["/p1"]), "/p1": page("p1", ["/"])})
    domains = [f"d{i:03d}.test" for i in range(count)]
    config = {
        "defaults": {"rate": 10_000, "burst": 1_000, "obey_robots": False, "prefetch": 4},
        "resolve": dict.fromkeys(domains, site.ip),
        "allow_private_networks": True,
        "domains": {d: {} for d in domains},
    }
    return site, config


async def test_one_consumer_serves_hundreds_of_domain_queues_over_several_connections(
    tmp_path: Path,
    amqp_url: str,
    prefix: str,
    sqlite_url: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # 200 queues on 4 connections, and 2 prefetched a queue, not the configured 4.
    tuning = Tuning(channels_per_connection=64, max_prefetched=400)
    site, config = many_domains(200)
    path = tmp_path / "d.yaml"
    path.write_text(yaml.safe_dump(config))
    settings = settings_for(amqp_url, prefix, sqlite_url, path)
    domains = sorted(load_config(path).domains)
    caplog.set_level(logging.INFO, logger="crawler.frontier.subscriptions")
    with serve(site):
        stats = (
            await wiring.consume(
                settings,
                load_config(path),
                burst=True,
                seeds=[f"http://{d}:{site.port}/" for d in domains],
                tuning=tuning,
            )
        ).stats
    expected = {f"http://{d}:{site.port}{p}" for d in domains for p in ("/", "/p1")}
    rows = stored(sqlite_url)
    assert sorted(r[0] for r in rows) == sorted(expected)  # every domain crawled, each page once
    assert all(s.ok == 2 for s in stats.values()) and len(stats) == 200
    consuming = [r.getMessage() for r in caplog.records if r.getMessage().startswith("consuming")]
    assert consuming and all(
        "(200 domain queues) on 4 connection(s), prefetch up to 2 " in m for m in consuming
    )
    async with await aio_pika.connect(amqp_url) as connection:  # drained, and nobody consumes any more
        channel = await connection.channel()
        for d in domains:
            declared = await channel.declare_queue(Names(prefix).domain_queue(d), passive=True)
            assert (
                declared.declaration_result.message_count,
                declared.declaration_result.consumer_count,
            ) == (0, 0)


async def test_more_domains_than_a_connection_takes_are_a_clear_error_without_more_connections(
    tmp_path: Path, amqp_url: str, prefix: str, sqlite_url: str
) -> None:
    _, config = many_domains(3)
    path = tmp_path / "d.yaml"
    path.write_text(yaml.safe_dump(config))
    settings = settings_for(amqp_url, prefix, sqlite_url, path)
    loaded = load_config(path)
    sink_db = Database(sqlite_url)
    sink = Sink(sink_db)
    fetcher = wiring.make_fetcher(loaded)
    try:
        async with frontier(settings, "test") as f:
            parts = wiring.parts(f, settings.names, loaded, sink, fetcher, Metrics())
            worker = Consumer(
                parts,
                f,
                None,
                label="test",
                burst=True,
                tuning=Tuning(channels_per_connection=2),
            )
            with pytest.raises(CrawlerError, match="room for 2 more; give this consumer fewer domains"):
                await worker.run()
    finally:
        await fetcher.aclose()
        sink_db.close()
