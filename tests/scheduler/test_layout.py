"""Recrawl of the domains the host layout serves, against the real services: a domains file's past the
line and discovered hosts, claimed in one, each within its share, and claimed once by two schedulers;
their rounds of sitemaps on schedule."""

from __future__ import annotations

import asyncio
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml

from crawler import connections
from crawler.config import load_config
from crawler.frontier.exchanges import host_queues
from crawler.monitor.status import status
from crawler.names import Names
from crawler.scheduler.running import scheduling
from crawler.scheduler.scheduler import Timing
from crawler.sink.database import Database
from crawler.sink.sitemaps import SitemapStore
from crawler.sink.sql import migrate
from crawler.worker import wiring
from demo.site import serve
from tests.hosts.test_layout import pages, sites
from tests.scheduler.test_recrawl import queued, rescheduled, rows, stored_due, two_schedulers
from tests.support.services import run, settings_for


def _all_due(database_url: str) -> None:
    rescheduled(database_url, datetime.now(UTC) - timedelta(minutes=5))


@pytest.mark.timeout(120)
async def test_a_domains_files_domains_and_discovered_hosts_recrawl_each_within_its_share(
    tmp_path: Path, amqp_url: str, prefix: str, sqlite_url: str
) -> None:
    served = sites(
        {
            "a.test": ("127.0.0.21", {"/": ["b.test/", "c.test/"]}),
            "b.test": ("127.0.0.61", {"/": ["b.test/1", "b.test/2"], "/1": [], "/2": []}),
            "c.test": ("127.0.0.62", {"/": ["c.test/1"], "/1": []}),
        }
    )
    (tmp_path / "shops.txt").write_text("b.test\nx.test\n")  # past the line: the host layout's
    config_path = tmp_path / "d.yaml"
    config_path.write_text(
        yaml.safe_dump(
            {
                "defaults": {"retry_delays": [0.2], "sitemaps": False, "recrawl": {"every": "1h"}},
                "resolve": {s.host: s.ip for s in served.values()},
                "allow_private_networks": True,
                "frontier": {"max_domain_queues": 2},
                "domains": {"a.test": {}},
                "domains_file": {"path": "shops.txt", "template": {"rate": 0.1, "burst": 5}},
                "discover": {"follow": "all", "allow": [".test"], "host": {"rate": 20, "burst": 5}},
            }
        )
    )
    settings = settings_for(amqp_url, prefix, sqlite_url, config_path)
    config = load_config(config_path)
    assert config.layout_domains == {"b.test", "x.test"} and config.discovered("c.test")
    with serve(*served.values()):
        crawled = await asyncio.to_thread(run, "crawler", ["crawl", served["a.test"].url()], settings)
        assert crawled.returncode == 0, crawled.stderr
        await asyncio.to_thread(_all_due, sqlite_url)
        for site in served.values():
            site.requests.clear()
        # b.test at 0.1 pages/s gets 2 refreshes in 20 s, whatever the layout's room; c.test at 20
        # pages/s gets all it has.
        timing = Timing(ahead=20)
        async with (
            connections.broker(settings.amqp_url, "test scheduler") as connection,
            scheduling(settings, lambda: config, connection, timing=timing) as scheduler,
        ):
            assert await scheduler.publish_due() == {"a.test": 1, "b.test": 2, "c.test": 2}
            assert await scheduler.publish_due() == {}  # b.test has had its share for 20 s
            assert await scheduler.read_backlog() == 1  # b.test's third page, still due
        assert (await status(settings, config))["discovered"]["due"] == 1
        await wiring.consume(settings, config, burst=True)
    assert sorted(pages(served["c.test"])) == ["/", "/1"]
    assert len(pages(served["b.test"])) == 2 and pages(served["a.test"]) == ["/"]
    found = Counter((r["domain"], r["found"]) for r in rows(sqlite_url).values())
    assert found == {
        ("a.test", "same_signature"): 1,
        ("b.test", "same_signature"): 2,
        ("b.test", "new"): 1,
        ("c.test", "same_signature"): 2,
    }
    # `crawler recrawl`: one pass, the host layout's domains in one row (120 s ahead: 12 for b.test).
    await asyncio.to_thread(_all_due, sqlite_url)
    recrawled = await asyncio.to_thread(run, "crawler", ["recrawl"], settings)
    assert recrawled.returncode == 0, recrawled.stderr
    assert [line.split() for line in recrawled.stdout.splitlines()] == [
        ["a.test", "1", "published", "0", "still", "due"],
        ["~layout", "5", "published", "0", "still", "due"],
    ]
    # A domains file's domain by name, and --all, as a listed domain's (the pages just published too),
    # its sitemaps read first.
    for queue in host_queues(config, Names(prefix)):
        await queued(amqp_url, queue.name)
    edited = yaml.safe_load(config_path.read_text())
    edited["domains_file"]["template"]["sitemaps"] = True
    config_path.write_text(yaml.safe_dump(edited))
    named = await asyncio.to_thread(run, "crawler", ["recrawl", "--domain", "b.test", "--all"], settings)
    assert [line.split() for line in named.stdout.splitlines()] == [
        ["b.test", "3", "published", "0", "still", "due"]
    ], named.stderr
    messages = []
    for queue in host_queues(config, Names(prefix)):
        messages += await queued(amqp_url, queue.name)
    assert sorted((m.url, m.sitemap is not None) for m in messages) == [
        (served["b.test"].url(path), path == "/robots.txt") for path in ("/", "/1", "/2", "/robots.txt")
    ]
    read = await asyncio.to_thread(run, "crawler", ["sitemaps", "b.test", "--read"], settings)
    assert "b.test: a round of reading its sitemaps began at 1 origin(s)" in read.stderr, read.stderr
    every = await asyncio.to_thread(run, "crawler", ["recrawl", "--all"], settings)
    assert [line.split() for line in every.stdout.splitlines()] == [
        ["a.test", "1", "published", "0", "still", "due"],
        ["~layout", "3", "published", "0", "still", "due"],  # b.test's: c.test is no configured domain
    ], every.stderr


@pytest.mark.timeout(120)
@pytest.mark.parametrize("database_url", ["sqlite", "postgresql"], indirect=True)
async def test_two_schedulers_claim_each_of_the_layouts_due_pages_once(
    tmp_path: Path, amqp_url: str, prefix: str, database_url: str
) -> None:
    config_path = tmp_path / "d.yaml"
    config_path.write_text(
        yaml.safe_dump(
            {
                "defaults": {"recrawl": {"every": "1h"}},
                "domains": {"a.test": {}},
                "discover": {"follow": "all", "host": {"rate": 100, "burst": 5}},
            }
        )
    )
    settings = settings_for(amqp_url, prefix, database_url, config_path)
    config = load_config(config_path)
    past = datetime.now(UTC) - timedelta(minutes=5)
    for i in range(20):
        await stored_due(database_url, f"h{i}.test", 30, past)
    async with two_schedulers(settings, config) as (first, second):
        published: Counter[str] = Counter()
        while any(passes := await asyncio.gather(first.publish_due(), second.publish_due())):
            for p in passes:
                published.update(p)
    assert published == {f"h{i}.test": 30 for i in range(20)}
    urls = []
    for queue in host_queues(config, Names(prefix)):
        urls += [m.url for m in await queued(amqp_url, queue.name) if m.refresh is not None]
    assert len(urls) == len(set(urls)) == 600


@pytest.mark.timeout(120)
@pytest.mark.parametrize("database_url", ["sqlite", "postgresql"], indirect=True)
async def test_the_layouts_sitemaps_are_read_again_on_schedule_once_per_origin(
    tmp_path: Path, amqp_url: str, prefix: str, database_url: str
) -> None:
    (tmp_path / "shops.txt").write_text("b.test\nc.test\n")
    config_path = tmp_path / "d.yaml"
    config_path.write_text(
        yaml.safe_dump(
            {
                "defaults": {"recrawl": {"every": "1h"}, "sitemaps": False},
                "frontier": {"max_domain_queues": 1},
                "domains": {"a.test": {}},
                "domains_file": {"path": "shops.txt", "template": {"sitemaps": True}},
                "discover": {"follow": "all"},
            }
        )
    )
    settings = settings_for(amqp_url, prefix, database_url, config_path)
    config = load_config(config_path)
    start = datetime.now(UTC)
    await stored_due(database_url, "a.test", 1, start + timedelta(hours=1))
    database = Database(database_url)
    try:
        for host in ("b.test", "c.test", "d.test"):  # d.test: discovered, `sitemaps: false`
            SitemapStore(database).note_origin(f"http://{host}", host, None, start)
    finally:
        database.close()
    clock = [start + timedelta(minutes=59)]
    async with two_schedulers(settings, config, lambda: clock[0]) as (first, second):
        assert await asyncio.gather(first.read_sitemaps(), second.read_sitemaps()) == [0, 0]
        clock[0] = start + timedelta(minutes=61)
        assert sum(await asyncio.gather(first.read_sitemaps(), second.read_sitemaps())) == 2
        assert await first.read_sitemaps() == 0
    tasks = []
    for queue in host_queues(config, Names(prefix)):
        tasks += await queued(amqp_url, queue.name)
    assert sorted(t.url for t in tasks if t.sitemap and t.sitemap.find and not t.sitemap.counted) == [
        "http://b.test/robots.txt",
        "http://c.test/robots.txt",
    ]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("database_url", ["sqlite", "postgresql"], indirect=True)
async def test_origins_not_yet_due_never_stand_before_one_that_is(
    tmp_path: Path, amqp_url: str, prefix: str, database_url: str
) -> None:
    (tmp_path / "shops.txt").write_text("b.test\n")
    config_path = tmp_path / "d.yaml"
    config_path.write_text(
        yaml.safe_dump(
            {
                "defaults": {"sitemaps": False},
                "frontier": {"max_domain_queues": 1},
                "domains": {"a.test": {}},
                "domains_file": {
                    "path": "shops.txt",
                    "template": {"recrawl": {"every": "1h"}, "sitemaps": True},
                },
                "discover": {"follow": "all", "host": {"recrawl": {"every": "1d"}, "sitemaps": True}},
            }
        )
    )
    settings = settings_for(amqp_url, prefix, database_url, config_path)
    config = load_config(config_path)
    start = datetime.now(UTC)
    migrate(database_url)
    database = Database(database_url)
    try:
        store = SitemapStore(database)
        for i in range(3):  # discovered hosts, read daily, noted before b.test
            store.note_origin(f"http://d{i}.test", f"d{i}.test", None, start)
        store.note_origin("http://b.test", "b.test", None, start + timedelta(minutes=10))
    finally:
        database.close()
    clock = [start + timedelta(hours=2)]
    async with (
        connections.broker(settings.amqp_url, "test scheduler") as connection,
        scheduling(
            settings, lambda: config, connection, timing=Timing(batch=2), clock=lambda: clock[0]
        ) as one,
    ):
        # Two at a time: the first claim looks at two of the daily hosts and finds them not due.
        assert [await one.read_sitemaps() for _ in range(3)] == [0, 1, 0]
        clock[0] = start + timedelta(days=1, minutes=1)
        assert [await one.read_sitemaps() for _ in range(3)] == [2, 2, 0]  # b.test again, and the 3 hosts
    tasks = []
    for queue in host_queues(config, Names(prefix)):
        tasks += await queued(amqp_url, queue.name)
    assert Counter(t.url for t in tasks if t.sitemap and t.sitemap.find) == {
        "http://b.test/robots.txt": 2,
        **{f"http://d{i}.test/robots.txt": 1 for i in range(3)},
    }
