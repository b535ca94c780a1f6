"""A consumer cut off the network for longer than the AMQP heartbeat, in its own network namespace:
what it held goes to the other consumer, and its own work on those deliveries is neither stored nor
acked; a delivery whose channel closes mid-fetch is dropped the same way."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest
import sqlalchemy as sa

from crawler.config import load_config
from crawler.connections import AMQP_HEARTBEAT
from crawler.frontier import client
from crawler.frontier.parking import Parking
from crawler.frontier.router import Router
from crawler.frontier.settling import Settling
from crawler.monitor.metrics import Metrics
from crawler.names import Names
from crawler.sink.database import Database
from crawler.sink.sql import Sink, engine_url, migrate
from crawler.worker import wiring
from crawler.worker.pipeline import Pipeline
from demo.site import Reply, Route, Site, serve
from tests.support import netns
from tests.support.crawls import consumer, seed, stored
from tests.support.services import crawler_command, env_for, queue_depth, settings_for
from tests.support.sites import reachable, shops, write_config
from tests.support.wait import until

CUT = 90.0  # seconds the link stays down: the figure, well past what the heartbeat allows
HELD = 4  # deliveries the cut-off consumer is fetching when the link goes down (its prefetch)
AFTER = "/missing?seeded=after-the-cut"  # a page only the reconnected consumer is left to crawl


def through(ns: netns.Netns, url: str, port: int) -> str:
    """`url` with its host and port replaced by a relay the namespace reaches."""
    parts = urlsplit(url)
    host, relay = ns.expose(parts.hostname or "localhost", parts.port or port)
    user = f"{parts.username}@" if parts.username else ""
    if parts.password:
        user = f"{parts.username}:{parts.password}@"
    return urlunsplit(parts._replace(netloc=f"{user}{host}:{relay}"))


def ended(process: subprocess.Popen[str], timeout: float = 60) -> tuple[int, str]:
    """Wait for a process told to stop (killed past `timeout`): its exit code and its stderr, if piped."""
    try:
        _, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        _, err = process.communicate()
    return process.returncode, err or ""


def fetched_at(database_url: str, urls: list[str]) -> dict[str, object]:
    """When each of `urls` was last stored."""
    engine = sa.create_engine(engine_url(database_url))
    try:
        with engine.connect() as conn:
            rows = conn.execute(sa.text("SELECT url, fetched_at FROM pages")).all()
            return {r[0]: r[1] for r in rows if r[0] in urls}
    finally:
        engine.dispose()


@pytest.fixture
def held_site() -> Iterator[tuple[Site, threading.Event, list[str]]]:
    """A shop whose product pages wait to answer until the event is set; the paths held so far."""
    site = shops(products=30, hosts=["a.test"])[0]
    gate = threading.Event()
    held: list[str] = []

    def holding(path: str, route: Route) -> Route:
        def answer(count: int) -> Reply:
            if not gate.is_set():
                held.append(path)
                gate.wait(300)
            return route(count) if callable(route) else route

        return answer

    site.routes = {p: holding(p, r) if p.startswith("/product/") else r for p, r in site.routes.items()}
    try:
        yield site, gate, held
    finally:
        gate.set()  # no server thread is left waiting


@pytest.mark.timeout(480)
async def test_a_consumer_cut_off_past_the_heartbeat_loses_nothing_and_stores_nothing_twice(
    tmp_path: Path,
    amqp_url: str,
    prefix: str,
    pg_url: str,
    held_site: tuple[Site, threading.Event, list[str]],
) -> None:
    site, gate, held = held_site
    # A fetch deadline past the cut: what ends the held fetches is the lost connection, not a timeout.
    crawl = {"rate": 50, "timeout": CUT + 90}
    settings = settings_for(amqp_url, prefix, pg_url, write_config(tmp_path / "d.yaml", [site], **crawl))
    names = Names(prefix)
    log_path = tmp_path / "cut-off.log"
    with netns.namespace() as ns, serve(site), log_path.open("w") as log:
        # The consumer in the namespace reaches every service, and the site, through the veth.
        inside = replace(
            settings,
            amqp_url=through(ns, amqp_url, 5672),
            redis_url=through(ns, settings.redis_url, 6379),
            database_url=through(ns, pg_url, 5432),
            config_path=str(write_config(tmp_path / "ns.yaml", [replace(site, ip=ns.host_ip)], **crawl)),
        )
        ns.expose(site.ip, site.port, same_port=True)
        await seed(settings, site.url())
        cut_off = subprocess.Popen(
            ns.command(crawler_command("crawler-consume", "--prefetch", str(HELD))),
            env=env_for(inside),
            stdout=subprocess.DEVNULL,
            stderr=log,
            text=True,
        )
        other: subprocess.Popen[str] | None = None
        ends: list[tuple[int, str]] = []  # exit codes and stderrs: the other consumer, then this one
        try:
            await until(lambda: len(held) >= HELD, within=60, what="the cut-off consumer fetching")
            held_urls = [site.url(p) for p in held]
            assert len(held) == HELD, held  # its prefetch: nothing more was delivered to it

            ns.cut()
            cut_at = time.monotonic()
            gate.set()  # the site answers; the answers wait on the far side of the cut
            other = consumer(settings, "--prefetch", str(HELD))
            # The broker gives up on the cut-off consumer after its heartbeat and hands what it held
            # to the other one: the whole site is stored while the link is still down.
            await until(
                lambda: {r[0] for r in stored(pg_url)} == reachable([site]),
                within=CUT - 5,
                every=0.5,
                what="every page stored by the other consumer during the cut",
            )
            handed_over = time.monotonic() - cut_at
            assert handed_over < CUT
            by_the_other = fetched_at(pg_url, held_urls)
            # The cut-off consumer finds out by itself too (three heartbeat timeouts without a frame)
            # and drops its held deliveries, stored by the other one meanwhile.
            await until(
                lambda: log_path.read_text().count("its channel closed") >= HELD,
                within=CUT - (time.monotonic() - cut_at),
                every=0.5,
                what="the cut-off consumer dropping its held deliveries during the cut",
            )
            noticed = time.monotonic() - cut_at
            assert "RabbitMQ connection (crawler-consume) lost" in log_path.read_text()
            # The fault lasts CUT seconds: a duration, not a wait for a condition.
            await asyncio.sleep(CUT - (time.monotonic() - cut_at))
            ns.mend()
            mended_at = time.monotonic()
            await until(
                lambda: "RabbitMQ connection (crawler-consume) back" in log_path.read_text(),
                within=60,
                what="the cut-off consumer reconnecting",
            )
            reconnected = time.monotonic() - mended_at
            # Back for good: alone now, it crawls a page seeded after the cut.
            other.send_signal(signal.SIGTERM)
            ends.append(await asyncio.to_thread(ended, other))
            await seed(settings, site.url(AFTER))
            await until(
                lambda: site.url(AFTER) in {r[0] for r in stored(pg_url)},
                within=60,
                what="the reconnected consumer crawling a page seeded after the cut",
            )
        finally:
            for process in (other, cut_off):
                if process is not None and process.poll() is None:
                    process.send_signal(signal.SIGTERM)
                    ends.append(await asyncio.to_thread(ended, process))
            sys.stderr.write(f"the cut-off consumer's log:\n{log_path.read_text()}")
        tiers = load_config(settings.config_path).retry_tiers
        for queue in [names.domain_queue("a.test"), *(names.retry_queue(t) for t in tiers)]:
            assert await queue_depth(amqp_url, queue) == 0, queue  # nothing left, nothing parked

    text = log_path.read_text()
    assert [code for code, _ in ends] == [0, 0], ends
    assert "Traceback" not in ends[0][1], ends[0][1]
    assert "Traceback" not in text and "will retry" not in text and "cannot park" not in text, text
    assert text.count("its channel closed") == HELD, text  # each held delivery dropped once
    assert all(f"{url}: its channel closed" in text for url in held_urls), text
    rows = stored(pg_url)
    want = sorted([*reachable([site]), site.url(AFTER)])
    assert sorted(r[0] for r in rows) == want  # 0 lost, 0 duplicate rows
    assert fetched_at(pg_url, held_urls) == by_the_other  # not stored again by the cut-off one
    # The site's request log: each page fetched once, but the HELD fetched twice (once each side).
    pages = [path for _, path in site.requests if path != "/robots.txt"]
    refetched = sorted(p for p in set(pages) if pages.count(p) > 1)
    assert refetched == sorted(held)
    assert all(pages.count(p) == 2 for p in held)
    assert len(pages) == len(want) + HELD
    print(
        f"\ncut {CUT:g}s, heartbeat {AMQP_HEARTBEAT}s: the site stored by the other consumer "
        f"{handed_over:.1f}s into the cut; the cut-off one dropped its {HELD} held deliveries "
        f"{noticed:.1f}s into it and reconnected {reconnected:.1f}s after the link came back; "
        f"{len(rows)} rows, 0 lost, 0 duplicate, {HELD} refetches"
    )


async def test_a_delivery_whose_channel_closed_mid_fetch_is_neither_stored_nor_acked_nor_parked(
    tmp_path: Path, amqp_url: str, prefix: str, sqlite_url: str
) -> None:
    # The channel closes while the page is fetched, and nothing cancels the work: what is left of it
    # (store, route, retry copy, ack) must not happen. The broker has the message back.
    site = shops(products=3, hosts=["a.test"])[0]
    fetching, closed = threading.Event(), threading.Event()

    def slow_home(count: int) -> Reply:
        fetching.set()
        closed.wait(30)
        return Reply(503, b"busy")  # a failure the pipeline would otherwise park as a retry

    site.routes["/"] = slow_home
    settings = settings_for(amqp_url, prefix, sqlite_url, write_config(tmp_path / "d.yaml", [site]))
    config = load_config(settings.config_path)
    names = Names(prefix)
    migrate(sqlite_url)
    metrics = Metrics()
    with serve(site):
        await seed(settings, site.url())
        async with client.frontier(settings, "test", config) as f:
            sink_db = Database(sqlite_url)
            sink = Sink(sink_db)
            fetcher = wiring.make_fetcher(config)
            try:
                parts = wiring.parts(f, names, config, sink, fetcher, metrics)
                publisher = await f.connection.channel(publisher_confirms=True)
                frontier = await publisher.get_exchange(names.frontier)
                retry = await publisher.get_exchange(names.retry)
                dead = await publisher.get_exchange(names.dead)
                settling = Settling(parts.seen, parts.crawls)
                pipeline = Pipeline(
                    parts.live,
                    parts.visitor,
                    parts.quota,
                    parts.cost,
                    Router(config, frontier, parts.seen, parts.quota, scope=parts.live.scope),
                    parts.writes,
                    Parking(retry, dead, "test"),
                    metrics,
                    short_retry_wait=0.01,
                    settling=settling,
                )
                delivery = await f.connection.channel()
                queue = await delivery.get_queue(names.domain_queue("a.test"))
                message = await queue.get()
                settling.delivered(message)

                async def close_mid_fetch() -> None:
                    assert await asyncio.to_thread(fetching.wait, 30)
                    await delivery.close()
                    closed.set()

                await asyncio.gather(pipeline.handle("a.test", message), close_mid_fetch())
            finally:
                closed.set()
                await fetcher.aclose()
                sink_db.close()
        assert site.hits("/") == 1
        assert stored(sqlite_url) == []  # not stored
        tiers = [names.retry_queue(t) for t in config.retry_tiers]
        assert [await queue_depth(amqp_url, q) for q in tiers] == [0] * len(tiers)  # not parked
        assert await queue_depth(amqp_url, names.domain_queue("a.test")) == 1  # back, for anyone
    lost = metrics.registry.get_sample_value("crawler_errors_total", {"domain": "a.test", "kind": "lost"})
    assert lost == 1
