"""Refreshing a crawled site against the real services: conditional requests, change detection by
signature, gone pages, adaptive intervals, and the scheduler's claims."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Collection
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aio_pika
import pytest
import sqlalchemy as sa
import yaml
from redis.asyncio import Redis

from crawler import connections
from crawler.config import CrawlConfig, load_config
from crawler.frontier.message import CrawlMessage
from crawler.names import Names
from crawler.scheduler.running import scheduling
from crawler.scheduler.scheduler import Scheduler, Timing
from crawler.settings import Settings
from crawler.sink import sql
from crawler.sink.database import Database
from crawler.worker import wiring
from tests.support.fresh import FreshSite, Page, fresh_site, html, serving
from tests.support.services import run, settings_for
from tests.support.wait import until

HOUR = 3600.0


def rows(database_url: str) -> dict[str, dict[str, Any]]:
    engine = sa.create_engine(sql.engine_url(database_url))
    try:
        with engine.connect() as conn:
            found = conn.execute(sa.select(sql.Page.__table__)).mappings().all()
            return {r["url"]: dict(r) for r in found}
    finally:
        engine.dispose()


def configure(path: Path, site: FreshSite, **recrawl: Any) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "defaults": {"retry_delays": [0.2], "rate": 200, "burst": 50},
                "resolve": {site.host: site.ip},
                "allow_private_networks": True,
                "domains": {site.host: {"extract": {"heading": "h1"}, "recrawl": recrawl}},
            }
        )
    )
    return path


async def refresh_all(settings: Settings, config: CrawlConfig) -> dict[str, int]:
    """`crawler recrawl --all`, then the workers until the queues are empty."""
    async with (
        connections.broker(settings.amqp_url, "test scheduler") as connection,
        scheduling(settings, lambda: config, connection) as scheduler,
    ):
        await scheduler.make_due(sorted(config.domains))
        published = await scheduler.publish_due(sorted(config.domains))
    await wiring.consume(settings, config, burst=True)
    return published


@pytest.mark.timeout(120)
async def test_a_second_pass_asks_conditionally_and_tells_changed_unchanged_and_gone(
    tmp_path: Path, amqp_url: str, prefix: str, sqlite_url: str, redis: Redis
) -> None:
    site = fresh_site()
    site.pages["/"] = Page(html("home", "the shop", [f"/p/{i}" for i in range(1, 5)]))
    for i in range(1, 5):
        site.pages[f"/p/{i}"] = Page(html(f"p{i}", f"product {i}"))
    site.pages["/p/4"].validators = False  # told unchanged by its signature alone
    settings = settings_for(
        amqp_url, prefix, sqlite_url, configure(tmp_path / "d.yaml", site, every="1h", min="30m")
    )
    config = load_config(settings.config_path)
    with serving(site):
        await wiring.consume(settings, config, burst=True, seeds=[site.url()])
        first = rows(sqlite_url)
        assert {r["found"] for r in first.values()} == {"new"}
        assert all(r["fetch_interval"] == HOUR and r["signature"] for r in first.values())
        site.pages["/p/1"] = Page(html("p1 new", "product 1, cheaper", ["/p/5"]))  # changed, a new link
        site.pages["/p/5"] = Page(html("p5", "product 5"))
        site.pages["/p/2"].status = 410  # gone
        site.hits.clear()
        published = await refresh_all(settings, config)
    assert published == {site.host: 5}
    second = rows(sqlite_url)
    found = {url.rsplit("/", 1)[-1] or "/": r["found"] for url, r in second.items()}
    assert found == {
        "/": "not_modified",
        "1": "changed",
        "2": "gone",
        "3": "not_modified",
        "4": "same_signature",
        "5": "new",
    }
    # Each stored page asked once, conditionally where it had validators; the new page once.
    asked = {h.path: h for h in site.hits}
    assert len(site.hits) == 6 and asked["/p/5"].if_none_match is None
    assert asked["/p/3"].if_none_match == site.pages["/p/3"].etag and asked["/p/3"].status == 304
    assert asked["/p/4"].if_none_match is None and asked["/p/4"].status == 200
    p1, p2, p3, p4 = (second[site.url(f"/p/{i}")] for i in range(1, 5))
    assert p1["title"] == "p1 new" and p1["data"] == {"heading": "p1 new"}
    assert p1["fetch_interval"] == HOUR - 0.5 * (HOUR - 1800)  # changed: halfway back to min
    assert p3["fetch_interval"] == p4["fetch_interval"] == 1.5 * HOUR  # unchanged: half as long again
    assert (p3["title"], p3["status_code"], p3["changed_at"]) == (
        "p3",
        200,
        first[site.url("/p/3")]["changed_at"],
    )
    # Gone: the new status, the last content still readable, on its schedule until drop_after.
    assert (p2["status_code"], p2["title"], p2["gone"]) == (410, "p2", 1)
    assert p2["next_fetch_at"] is not None


async def stored_due(database_url: str, domain: str, n: int, due: datetime) -> None:
    """`n` stored pages of `domain`, due at `due`."""
    await asyncio.to_thread(sql.migrate, database_url)
    sink_db = Database(database_url)
    sink = sql.Sink(sink_db)
    try:
        await sink.store_many(
            [
                sql.PageRecord(
                    f"http://{domain}/p/{i}",
                    domain,
                    1,
                    1,
                    status_code=200,
                    fetch_interval=HOUR,
                    next_fetch_at=due,
                )
                for i in range(n)
            ]
        )
    finally:
        sink_db.close()


async def queued(amqp_url: str, queue: str) -> list[CrawlMessage]:
    """Every message in `queue`, taken off it."""
    out = []
    async with await aio_pika.connect(amqp_url) as connection:
        channel = await connection.channel()
        declared = await channel.get_queue(queue)
        while (message := await declared.get(fail=False)) is not None:
            out.append(CrawlMessage.decode(message.body))
            await message.ack()
    return out


@asynccontextmanager
async def two_schedulers(
    settings: Settings, config: CrawlConfig, clock: Callable[[], datetime] = lambda: datetime.now(UTC)
) -> AsyncIterator[tuple[Scheduler, Scheduler]]:
    """Two schedulers, a connection each, claiming 50 pages at a time, so that their claims interleave."""
    timing = Timing(batch=50)
    async with (
        connections.broker(settings.amqp_url, "test scheduler 1") as one,
        connections.broker(settings.amqp_url, "test scheduler 2") as two,
        scheduling(settings, lambda: config, one, timing=timing, clock=clock) as first,
        scheduling(settings, lambda: config, two, timing=timing, clock=clock) as second,
    ):
        yield first, second


def recrawling(tmp_path: Path, domain: str, rate: float = 1000) -> Path:
    path = tmp_path / "d.yaml"
    path.write_text(yaml.safe_dump({"domains": {domain: {"rate": rate, "recrawl": {"every": "1h"}}}}))
    return path


@pytest.mark.timeout(120)
@pytest.mark.parametrize("database_url", ["sqlite", "postgresql"], indirect=True)
async def test_two_schedulers_publish_each_due_page_once(
    tmp_path: Path, amqp_url: str, prefix: str, database_url: str
) -> None:
    settings = settings_for(amqp_url, prefix, database_url, recrawling(tmp_path, "a.test"))
    config = load_config(settings.config_path)
    await stored_due(database_url, "a.test", 600, datetime.now(UTC) - timedelta(minutes=5))
    async with two_schedulers(settings, config) as (first, second):
        published = await asyncio.gather(first.publish_due(), second.publish_due())
        again = await first.publish_due()  # all claimed: nothing left due
    assert sum(p.get("a.test", 0) for p in published) == 600 and again == {}
    urls = [m.url for m in await queued(amqp_url, Names(prefix).domain_queue("a.test"))]
    assert len(urls) == len(set(urls)) == 600
    assert all(m.refresh is not None for m in await queued(amqp_url, Names(prefix).domain_queue("a.test")))


@pytest.mark.timeout(120)
async def test_a_slow_domain_is_given_its_rate_and_a_lost_refresh_is_published_again_after_its_lease(
    tmp_path: Path, amqp_url: str, prefix: str, sqlite_url: str
) -> None:
    settings = settings_for(amqp_url, prefix, sqlite_url, recrawling(tmp_path, "a.test", rate=0.5))
    config = load_config(settings.config_path)
    await stored_due(sqlite_url, "a.test", 100, datetime.now(UTC) - timedelta(minutes=5))
    queue = Names(prefix).domain_queue("a.test")
    lease = 2.0
    async with (
        connections.broker(settings.amqp_url, "test scheduler") as connection,
        scheduling(settings, lambda: config, connection, timing=Timing(ahead=20, lease=lease)) as scheduler,
    ):
        # 0.5 pages/s for 20 s: 10 queued at a time, however many are due; the rest stays in the database.
        assert await scheduler.publish_due() == {"a.test": 10}
        assert await scheduler.publish_due() == {}  # its queue holds its 20 s already
        assert (await scheduler.backlog(["a.test"]))["a.test"].due == 90
        lost = {m.url for m in await queued(amqp_url, queue)}  # purged: those ten refreshes are lost
        await asyncio.to_thread(rescheduled, sqlite_url, None, lost)  # (the others done, off the schedule)
        assert await scheduler.publish_due() == {}  # leased: not published again while it lasts
        # Once their lease ends, the lost ones are due again, and published again.
        await until(scheduler.publish_due, lambda p: p.get("a.test") == 10, within=10 + lease, every=0.2)
        again = {m.url for m in await queued(amqp_url, queue)}
    assert again == lost


def rescheduled(database_url: str, due: datetime | None, but: Collection[str] = ()) -> None:
    """Every stored page due at `due` (None: off the schedule), but those at `but`."""
    engine = sa.create_engine(sql.engine_url(database_url))
    try:
        with engine.begin() as conn:
            page = sql.Page.__table__
            conn.execute(page.update().where(page.c.url.not_in(list(but))).values(next_fetch_at=due))
    finally:
        engine.dispose()


@pytest.mark.timeout(180)
async def test_crawl_recrawl_due_refreshes_until_done_and_counts_what_it_found(
    tmp_path: Path, amqp_url: str, prefix: str, sqlite_url: str
) -> None:
    site = fresh_site()
    site.pages["/"] = Page(html("home", "the shop", ["/a", "/b", "/c"]))
    for name in "abc":
        site.pages[f"/{name}"] = Page(html(name, f"page {name}"))
    config_path = configure(tmp_path / "d.yaml", site, every="1s", drop_after=1)
    settings = settings_for(amqp_url, prefix, sqlite_url, config_path)
    with serving(site):
        crawled = await asyncio.to_thread(run, "crawler", ["crawl", site.url()], settings)
        assert crawled.returncode == 0, crawled.stderr
        site.pages["/a"] = Page(html("a", "page a, edited"))
        del site.pages["/c"]  # gone: 404
        await until(lambda: due_now(sqlite_url), lambda n: n == 4, what="all four pages due")
        refreshed = await asyncio.to_thread(run, "crawler", ["crawl", "--recrawl", "due"], settings)
    assert refreshed.returncode == 0, refreshed.stderr
    head, row = refreshed.stdout.splitlines()[:2]
    assert head.split()[-4:] == ["changed", "304", "same", "gone"]
    assert row.split()[0] == site.host and row.split()[-4:] == ["1", "2", "0", "1"]
    after = rows(sqlite_url)
    gone = after[site.url("/c")]
    assert (gone["status_code"], gone["gone"], gone["next_fetch_at"]) == (404, 1, None)  # drop_after 1
    recrawled = await asyncio.to_thread(run, "crawler", ["recrawl", "--all"], settings)
    assert recrawled.returncode == 0, recrawled.stderr
    assert recrawled.stdout.split() == [site.host, "4", "published", "0", "still", "due"]


def due_now(database_url: str) -> int:
    now = datetime.now(UTC)
    return sum(
        1 for r in rows(database_url).values() if r["next_fetch_at"] and _utc(r["next_fetch_at"]) <= now
    )


def _utc(when: datetime) -> datetime:
    return when if when.tzinfo else when.replace(tzinfo=UTC)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("database_url", ["sqlite", "postgresql"], indirect=True)
async def test_sitemap_rounds_begin_once_per_recrawl_interval_per_origin_and_two_schedulers_share_them(
    tmp_path: Path, amqp_url: str, prefix: str, database_url: str
) -> None:
    settings = settings_for(amqp_url, prefix, database_url, recrawling(tmp_path, "a.test"))
    config = load_config(settings.config_path)
    await stored_due(database_url, "a.test", 3, datetime.now(UTC) + timedelta(hours=1))
    clock = [datetime.now(UTC)]
    queue = Names(prefix).domain_queue("a.test")
    async with two_schedulers(settings, config, lambda: clock[0]) as (first, second):
        # No origin read yet: a stored page's, once, whichever scheduler asks.
        assert sorted(await asyncio.gather(first.read_sitemaps(), second.read_sitemaps())) == [0, 1]
        [task] = await queued(amqp_url, queue)
        assert task.url == "http://a.test/robots.txt" and task.sitemap is not None and task.sitemap.find
        assert not task.sitemap.counted  # a round a crawl's seeds did not begin
        clock[0] += timedelta(minutes=59)
        assert await first.read_sitemaps() == 0  # within recrawl.every (1h)
        assert await first.read_sitemaps(every=True) == 1  # `crawler recrawl`: now, whatever the time
        clock[0] += timedelta(minutes=61)
        assert sorted(await asyncio.gather(first.read_sitemaps(), second.read_sitemaps())) == [0, 1]
    assert len(await queued(amqp_url, queue)) == 2
