"""RabbitMQ's memory alarm mid-crawl, on a private node: publishers are blocked, the consumers hold
their work without growing (and still stop on SIGTERM), and the crawl resumes and completes once the
alarm clears, with nothing lost, no duplicate row and no page fetched twice but those returned."""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path

import httpx
import pytest

from bench.node import Node
from bench.procs import rss_mb
from crawler.names import CLOSE_WAIT
from crawler.sink.sql import migrate
from demo.site import Route, Site, free_port, page, serve
from tests.support.crawls import consumer, finish, seed, stored
from tests.support.services import settings_for
from tests.support.sites import IPS, write_config
from tests.support.wait import until

WIDTH = 16  # parallel chains per host
LENGTH = 25  # pages per chain
PREFETCH = 8
GRACE = 5.0  # seconds the consumer stopped under the alarm gets to finish its work
HOLD = 15  # seconds the blocked crawl is watched


def chains(host: str, port: int) -> Site:
    """A home page starting WIDTH chains of LENGTH pages: every page has one new link to publish."""
    routes: dict[str, Route] = {"/": page(f"{host} home", [f"/c/{k}/0" for k in range(WIDTH)])}
    for k in range(WIDTH):
        for j in range(LENGTH):
            links = [f"/c/{k}/{j + 1}"] if j + 1 < LENGTH else []
            routes[f"/c/{k}/{j}"] = page(f"{host} chain {k} page {j}", ["/", *links], price=f"{j}.00 EUR")
    return Site(host, IPS[host], port, routes)


def metric(port: int, name: str) -> float:
    """One sample of a consumer's /metrics."""
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5, trust_env=False).text
    line = next(ln for ln in text.splitlines() if ln.startswith(f"{name} "))
    return float(line.split()[1])


def requests(sites: list[Site]) -> int:
    return sum(len(s.requests) for s in sites)


@pytest.mark.timeout(300)
async def test_a_memory_alarm_blocks_publishers_and_the_crawl_resumes_when_it_clears(
    tmp_path: Path, rabbitmq_node: Node, prefix: str, sqlite_url: str
) -> None:
    hosts = ["a.test", "b.test"]
    port = free_port(*(IPS[h] for h in hosts))
    sites = [chains(h, port) for h in hosts]
    config = write_config(
        tmp_path / "d.yaml", sites, rate=8, burst=8, prefetch=PREFETCH, obey_robots=False, max_depth=LENGTH
    )
    settings = settings_for(rabbitmq_node.amqp_url, prefix, sqlite_url, config)
    expected = {s.url(p) for s in sites for p in s.routes}
    await asyncio.to_thread(migrate, sqlite_url)
    metrics_port = free_port("127.0.0.1")
    with serve(*sites):
        await seed(settings, *(s.url() for s in sites))
        stopped = consumer(settings, "--grace", str(GRACE))
        survivor = consumer(settings, "--metrics-port", str(metrics_port), "--metrics-addr", "127.0.0.1")
        workers = [stopped, survivor]
        try:
            await until(lambda: len(stored(sqlite_url)) >= 60, within=90, what="60 pages stored")
            await asyncio.to_thread(lambda: rabbitmq_node.set_memory_watermark(absolute=10_000_000))
            alarm_at = time.monotonic()
            # Blocked: pages in hand are stored, their links wait to be published, so nothing is
            # acked and nothing new is delivered: the sites see no more requests.
            await until(lambda: metric(metrics_port, "crawler_broker_blocked"), within=30, what="blocked")

            async def held_still() -> bool:
                before = requests(sites)
                await asyncio.sleep(2)
                return requests(sites) == before

            await until(held_still, within=60, what="the crawl held")
            held, rows_held = requests(sites), len(stored(sqlite_url))
            assert rows_held < len(expected)
            pids = [w.pid for w in workers]
            rss = [[rss_mb(pid) or 0.0 for pid in pids]]
            for _ in range(HOLD):
                await asyncio.sleep(1)
                rss.append([rss_mb(pid) or 0.0 for pid in pids])
            assert all(w.poll() is None for w in workers), "a consumer died under the alarm"
            assert requests(sites) == held, "fetching went on while publishing was blocked"
            assert len(stored(sqlite_url)) == rows_held
            growth = [max(r[i] for r in rss) - rss[0][i] for i in range(len(pids))]
            assert max(growth) < 5, f"consumers' RSS grew under the alarm: {growth} MB ({rss})"
            assert metric(metrics_port, "crawler_broker_blocked_seconds") >= HOLD

            # Stopped under the alarm: it exits after its grace, its held work goes back to the queue.
            stopping = time.monotonic()
            stopped.send_signal(signal.SIGTERM)
            _, stopped_log = await asyncio.to_thread(stopped.communicate, timeout=GRACE + 60)
            stop_took = time.monotonic() - stopping
            assert stopped.returncode == 0, stopped_log

            await asyncio.to_thread(lambda: rabbitmq_node.set_memory_watermark(fraction=0.4))
            blocked_for = time.monotonic() - alarm_at
            unblocked = lambda: metric(metrics_port, "crawler_broker_blocked") == 0  # noqa: E731
            await until(unblocked, within=30, what="unblocked")
            await until(lambda: {r[0] for r in stored(sqlite_url)} >= expected, within=150, what="every page")
        except BaseException as exc:
            for worker in workers:
                if worker.poll() is None:
                    worker.kill()
            logs = "".join(w.communicate()[1] for w in workers if w.stderr and not w.stderr.closed)
            raise AssertionError(f"{exc!r}\n{logs}") from None
        survivor.send_signal(signal.SIGTERM)
        (survivor_log,) = await asyncio.to_thread(finish, survivor, timeout=90)
    urls = [r[0] for r in stored(sqlite_url)]
    assert sorted(urls) == sorted(expected)  # every page, once: nothing lost, no duplicate row
    # Fetched again: what the stopped consumer held (a prefetch per domain queue), and the children
    # of the few pages whose links went out in the instant before RabbitMQ's blocked notice came
    # (the broker takes those after the alarm, and the pages, returned, route their links again).
    # Batches written while blocked would add one per page held (36 in all, before the publisher
    # waited for the unblock).
    refetched = sum(n - 1 for s in sites for p in s.routes if (n := s.hits(p)) > 1)
    assert refetched <= PREFETCH * len(hosts) + PREFETCH, refetched
    # Its grace, CLOSE_WAIT for the blocked channel, ~2 s for the connection; the rest is slack for a
    # loaded machine. Before CLOSE_WAIT it did not exit at all while the alarm lasted.
    assert stop_took < GRACE + CLOSE_WAIT + 30, stop_took
    for log in (stopped_log, survivor_log):
        assert "RabbitMQ blocks publishing on crawler-consume publisher" in log, log
        assert "(low on memory)" in log, log
    assert "RabbitMQ unblocked publishing on crawler-consume publisher" in survivor_log, survivor_log
    print(
        f"\nblocked {blocked_for:.0f}s holding {rows_held} rows and {held} requests; consumers' RSS "
        f"{rss[0]} -> {rss[-1]} MB; stopped under the alarm in {stop_took:.1f}s (grace {GRACE:g}s); "
        f"refetched {refetched}"
    )
