"""Sitemaps in a crawl, against the real services on test sites: found through robots.txt (or
/sitemap.xml), read within their limits, their URLs crawled at depth 0 from their own host only, and
their lastmod moving a stored page ahead of its schedule."""

from __future__ import annotations

import gzip
import signal
import zlib
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aio_pika
import pytest
import sqlalchemy as sa
import yaml
from redis.asyncio import Redis

from crawler import cli, connections
from crawler.config import CrawlConfig, load_config
from crawler.frontier.message import CrawlMessage
from crawler.monitor.status import status
from crawler.names import Names
from crawler.scheduler.running import scheduling
from crawler.settings import Settings
from crawler.sink import sql
from crawler.sink.database import Database
from crawler.sink.sitemaps import SitemapRead, SitemapStore
from crawler.worker import wiring
from tests.support.crawls import consumer, finish, seed
from tests.support.crawls import stored as stored_rows
from tests.support.fresh import FreshSite, Page, fresh_site, html, serving
from tests.support.services import env_for, queue_depth, run, settings_for
from tests.support.wait import until

XML = "application/xml"


def urlset(urls: list[str], lastmod: dict[str, datetime] | None = None) -> bytes:
    def entry(url: str) -> str:
        when = (lastmod or {}).get(url)
        return (
            f"<url><loc>{url}</loc>" + (f"<lastmod>{when.isoformat()}</lastmod>" if when else "") + "</url>"
        )

    body = "".join(entry(u) for u in urls)
    return (
        f'<?xml version="1.0" encoding="UTF-8"?>'
        f'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{body}</urlset>'
    ).encode()


def index(urls: list[str]) -> bytes:
    body = "".join(f"<sitemap><loc>{u}</loc></sitemap>" for u in urls)
    return (
        f'<?xml version="1.0" encoding="UTF-8"?>'
        f'<sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{body}</sitemapindex>'
    ).encode()


def xml_bomb(inflated: int) -> bytes:
    """A gzipped urlset of `inflated` bytes of entries that are no http(s) URL."""
    entry = b"<url><loc>ftp://a.test/" + b"x" * 2000 + b"</loc></url>"  # few entries: parsed fast
    packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    parts = [packer.compress(b'<?xml version="1.0"?><urlset>')]
    parts += [packer.compress(entry) for _ in range(inflated // len(entry))]
    return b"".join([*parts, packer.compress(b"</urlset>"), packer.flush()])


def configure(path: Path, *sites: FreshSite, **rules: Any) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "defaults": {"retry_delays": [0.2], "rate": 500, "burst": 100, **rules},
                "resolve": {s.host: s.ip for s in sites},
                "allow_private_networks": True,
                "domains": {s.host: {} for s in sites},
            }
        )
    )
    return path


def stored(database_url: str) -> dict[str, dict[str, Any]]:
    engine = sa.create_engine(sql.engine_url(database_url))
    try:
        with engine.connect() as conn:
            found = conn.execute(sa.select(sql.Page.__table__)).mappings().all()
            return {r["url"]: dict(r) for r in found}
    finally:
        engine.dispose()


def files(database_url: str, domain: str) -> dict[str, SitemapRead]:
    store_db = Database(database_url)
    store = SitemapStore(store_db)
    try:
        return {f.url.rsplit("/", 1)[-1]: f for f in store.files(domain)}
    finally:
        store_db.close()


def page(title: str) -> Page:
    return Page(html(title, f"text of {title}"))


@pytest.mark.timeout(120)
async def test_robots_txt_names_a_gzipped_index_whose_sitemaps_list_300_pages_no_link_reaches(
    tmp_path: Path,
    amqp_url: str,
    prefix: str,
    sqlite_url: str,
    redis: Redis,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    site, other = fresh_site("a.test", "127.0.0.21"), fresh_site("b.test", "127.0.0.22")
    site.pages["/"] = page("home")  # links to nothing
    xml_pages = [site.url(f"/x/{i}") for i in range(150)]
    text_pages = [site.url(f"/t/{i}") for i in range(150)]
    for url in xml_pages + text_pages:
        site.pages[url.split(str(site.port), 1)[1]] = page(url.rsplit("/", 2)[-2] + url.rsplit("/", 1)[-1])
    # A sitemap may list its own host's URLs only: b.test is configured, and still dropped.
    foreign = [other.url(f"/p/{i}") for i in range(3)]
    other.pages.update({f"/p/{i}": page(f"b{i}") for i in range(3)})
    site.pages["/robots.txt"] = Page(
        f"User-agent: *\nAllow: /\nSitemap: {site.url('/sitemaps/index.xml.gz')}\n",
        content_type="text/plain",
    )
    site.pages["/sitemaps/index.xml.gz"] = Page(
        gzip.compress(index([site.url("/sitemaps/x.xml"), site.url("/sitemaps/t.txt")])),
        content_type="application/x-gzip",
    )
    site.pages["/sitemaps/x.xml"] = Page(urlset(xml_pages + foreign), content_type=XML)
    text = "\n".join(text_pages).encode()
    site.pages["/sitemaps/t.txt"] = Page(text, content_type="text/plain")
    config_path = configure(tmp_path / "d.yaml", site, other, max_depth=0)
    settings = settings_for(amqp_url, prefix, sqlite_url, config_path)
    config = load_config(settings.config_path)
    with serving(site), serving(other):
        await wiring.consume(settings, config, burst=True, seeds=[site.url()])
    rows = stored(sqlite_url)
    assert set(rows) == {site.url(), *xml_pages, *text_pages}  # max_depth 0: nothing but the sitemaps'
    assert all(r["status_code"] == 200 and r["depth"] == 0 for r in rows.values())
    assert other.hits == []
    read = files(sqlite_url, site.host)
    assert {name: f.outcome for name, f in read.items()} == {
        "index.xml.gz": "read",
        "x.xml": "read",
        "t.txt": "read",
    }
    assert read["index.xml.gz"].kind == "sitemapindex" and read["index.xml.gz"].counts == {"sitemaps": 2}
    assert read["x.xml"].counts == {"discovered": 150, "other_host": 3}
    assert (read["t.txt"].kind, read["t.txt"].counts) == ("text", {"discovered": 150})
    # Each file asked once, and not /sitemap.xml: robots.txt named the sitemaps.
    paths = [h.path for h in site.hits]
    assert paths.count("/sitemaps/x.xml") == 1 and "/sitemap.xml" not in paths
    # What `crawler status` and `crawler sitemaps` say of it, from the same readings.
    mapped = next(d for d in (await status(settings, config))["domains"] if d["domain"] == site.host)
    assert mapped["sitemaps"] == {
        "files": 3, "discovered": 300, "known": 0, "modified": 0, "dropped": {"other_host": 3}
    }  # fmt: skip
    for key, value in env_for(settings).items():
        monkeypatch.setenv(key, value)
    assert cli.main(["sitemaps", site.host]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[0] == f"{site.host}: 3 sitemap file(s): 300 discovered, 3 other_host, 2 sitemaps"
    assert any(line.strip().startswith("read") and line.endswith("/sitemaps/x.xml") for line in printed)


@pytest.mark.timeout(120)
async def test_a_gzip_bomb_and_a_50001_url_sitemap_stop_at_their_limits_and_the_crawl_goes_on(
    tmp_path: Path, amqp_url: str, prefix: str, sqlite_url: str, redis: Redis
) -> None:
    site = fresh_site("a.test", "127.0.0.21")
    site.pages["/"] = Page(html("home", "home", ["/next"]))
    site.pages["/next"] = page("next")
    site.pages["/listed"] = page("listed")
    bomb = xml_bomb(64 * 1024 * 1024)  # 64 MiB of entries no crawl can use, ~200 KB gzipped
    site.pages["/bomb.xml.gz"] = Page(bomb, content_type="application/gzip")
    many = [site.url("/listed")] + [site.url(f"/m/{i}") for i in range(50_000)]
    # Answered once the home's link has been fetched: otherwise, on a busy machine, the sitemap's
    # first 1,000 URLs can be prefetched before the home's link is queued and fill the quota of 5.
    site.pages["/big.xml"] = Page(urlset(many), content_type=XML, after="/next")
    config_path = configure(
        tmp_path / "d.yaml", site, sitemaps=[site.url("/bomb.xml.gz"), site.url("/big.xml")], max_pages=5
    )
    settings = settings_for(amqp_url, prefix, sqlite_url, config_path)
    config = load_config(settings.config_path)
    with serving(site):
        await wiring.consume(settings, config, burst=True, seeds=[site.url()])
    rows = stored(sqlite_url)
    assert {site.url(), site.url("/next"), site.url("/listed")} <= set(rows)
    read = files(sqlite_url, site.host)
    cut = read["bomb.xml.gz"]
    assert (cut.outcome, cut.note) == ("read", "more than 52428800 bytes uncompressed")
    assert cut.counts["unreadable: not http(s)"] > 25_000  # read up to the cap, every one dropped
    big = read["big.xml"]
    assert big.outcome == "read" and big.note == "more than 50000 URLs"
    assert sum(big.counts.values()) == 50_000  # the 50,001st was never read


@pytest.mark.timeout(120)
async def test_lastmod_moves_a_page_ahead_of_its_schedule_and_an_unchanged_sitemap_is_not_parsed(
    tmp_path: Path, amqp_url: str, prefix: str, database_url: str, redis: Redis
) -> None:
    site = fresh_site("a.test", "127.0.0.21")
    site.pages["/"] = page("home")
    site.pages["/a"], site.pages["/b"] = page("a"), page("b")
    old = datetime(2020, 1, 1, tzinfo=UTC)
    listed = [site.url("/a"), site.url("/b")]
    site.pages["/sitemap.xml"] = Page(urlset(listed, dict.fromkeys(listed, old)), content_type=XML)
    config_path = configure(tmp_path / "d.yaml", site, recrawl={"every": "1d"})
    settings = settings_for(amqp_url, prefix, database_url, config_path)
    config = load_config(settings.config_path)
    with serving(site):
        await wiring.consume(settings, config, burst=True, seeds=[site.url()])
        first = stored(database_url)
        assert set(first) == {site.url(), *listed}
        # /a changes and its sitemap says so; neither page is due for a day.
        site.pages["/a"] = page("a, new")
        moved = datetime.now(UTC) + timedelta(seconds=1)
        site.pages["/sitemap.xml"] = Page(
            urlset(listed, {listed[0]: moved, listed[1]: old}), content_type=XML
        )
        site.hits.clear()
        assert await recrawl(settings, config) == 0  # nothing due
        second = stored(database_url)
        assert second[listed[0]]["title"] == "a, new" and second[listed[0]]["found"] == "changed"
        assert second[listed[1]]["fetched_at"] == first[listed[1]]["fetched_at"]
        assert [h.path for h in site.hits if h.path in ("/a", "/b")] == ["/a"]
        assert files(database_url, site.host)["sitemap.xml"].counts == {"known": 2, "modified": 1}
        # The same sitemap again: a 304 to its validators, nothing parsed, nothing refreshed.
        site.hits.clear()
        await recrawl(settings, config)
        assert [(h.path, h.status) for h in site.hits if h.path != "/robots.txt"] == [("/sitemap.xml", 304)]
    third = files(database_url, site.host)["sitemap.xml"]
    assert third.outcome == "not_modified" and third.counts == {"known": 2, "modified": 1}


@pytest.mark.timeout(120)
async def test_a_sitemap_behind_robots_disallow_is_not_fetched(
    tmp_path: Path, amqp_url: str, prefix: str, sqlite_url: str, redis: Redis
) -> None:
    site = fresh_site("a.test", "127.0.0.21")
    site.pages["/"] = page("home")
    site.pages["/private/p"] = page("private")
    site.pages["/robots.txt"] = Page(
        f"User-agent: *\nDisallow: /private/\nSitemap: {site.url('/private/sitemap.xml')}\n",
        content_type="text/plain",
    )
    site.pages["/private/sitemap.xml"] = Page(urlset([site.url("/private/p")]), content_type=XML)
    settings = settings_for(amqp_url, prefix, sqlite_url, configure(tmp_path / "d.yaml", site))
    with serving(site):
        await wiring.consume(settings, load_config(settings.config_path), burst=True, seeds=[site.url()])
    assert set(stored(sqlite_url)) == {site.url()}
    assert not any(h.path.startswith("/private/") for h in site.hits)
    assert files(sqlite_url, site.host)["sitemap.xml"].outcome == "disallowed"


@pytest.mark.timeout(150)
def test_a_second_crawl_reads_its_unchanged_sitemap_whole_and_fetches_every_page_again(
    tmp_path: Path, amqp_url: str, prefix: str, sqlite_url: str
) -> None:
    site = fresh_site("a.test", "127.0.0.21")
    site.pages["/"] = Page(html("home", "home", ["/linked"]))
    site.pages["/linked"] = page("linked")
    only = [f"/only/{i}" for i in range(4)]  # no link reaches them: the sitemap alone lists them
    site.pages.update({path: page(path) for path in only})
    site.pages["/robots.txt"] = Page(
        f"User-agent: *\nAllow: /\nSitemap: {site.url('/pages.xml')}\nSitemap: {site.url('/gone.xml')}\n",
        content_type="text/plain",
    )
    site.pages["/pages.xml"] = Page(urlset([site.url(p) for p in only]), content_type=XML)
    settings = settings_for(amqp_url, prefix, sqlite_url, configure(tmp_path / "d.yaml", site))
    wanted = {"/", "/linked", *only}
    with serving(site):
        for crawl in ("first", "second"):
            site.hits.clear()
            result = run("crawler", ["crawl", site.url()], settings)
            assert result.returncode == 0, result.stderr
            fetched = {h.path for h in site.hits if h.status == 200}
            assert wanted <= fetched, f"the {crawl} crawl missed {sorted(wanted - fetched)}"
            # A sitemap that is not there is no failure of the crawl's (a guessed /sitemap.xml seldom is).
            assert "sitemap task failed" not in result.stderr, result.stderr
        asked = site.requests_of("/pages.xml")
        assert [(h.if_none_match, h.status) for h in asked] == [(None, 200)]  # asked whole, not 304
    read = files(sqlite_url, site.host)
    assert (read["pages.xml"].outcome, read["gone.xml"].outcome) == ("read", "missing")


async def recrawl(settings: Settings, config: CrawlConfig) -> int:
    """`crawler recrawl` (its sitemaps read first), then the workers until the queues are empty."""
    async with (
        connections.broker(settings.amqp_url, "test scheduler") as connection,
        scheduling(settings, lambda: config, connection) as scheduler,
    ):
        await scheduler.read_sitemaps(sorted(config.domains), every=True)
        published = await scheduler.publish_due(sorted(config.domains))
    await wiring.consume(settings, config, burst=True)
    return sum(published.values())


@pytest.mark.timeout(180)
async def test_a_worker_killed_mid_sitemap_leaves_it_to_another_that_routes_every_url(
    tmp_path: Path, amqp_url: str, prefix: str, sqlite_url: str, redis: Redis
) -> None:
    site = fresh_site("a.test", "127.0.0.21")
    site.pages["/"] = page("home")
    listed = [site.url(f"/p/{i}") for i in range(20_000)]
    site.pages["/sitemap.xml"] = Page(gzip.compress(urlset(listed)), content_type="application/gzip")
    # Pages wait for their tokens: the queue holds what the sitemap routed.
    config_path = configure(tmp_path / "d.yaml", site, rate=2, burst=1, max_pages=100_000)
    settings = settings_for(amqp_url, prefix, sqlite_url, config_path)
    queue = Names(prefix).domain_queue(site.host)
    with serving(site):
        first = consumer(settings)
        try:
            await seed(settings, site.url())
            await until(lambda: queue_depth(amqp_url, queue), lambda n: n > 2_000, 60, "routing begun")
            first.send_signal(signal.SIGKILL)
        finally:
            first.communicate()
        assert "sitemap.xml" not in files(sqlite_url, site.host)  # killed mid-file
        second = consumer(settings)
        try:
            await until(lambda: files(sqlite_url, site.host), lambda f: "sitemap.xml" in f, 90, "read")
        finally:
            second.send_signal(signal.SIGTERM)
        finish(second)
    queued = await drain(amqp_url, queue)
    done = {url for url, _, _ in stored_rows(sqlite_url)}
    assert set(listed) <= queued | done  # every URL routed; none lost with the first worker
    assert [h.path for h in site.hits].count("/sitemap.xml") == 2  # read again, whole


async def drain(amqp_url: str, queue: str) -> set[str]:
    """The URLs of the messages in `queue`, taken out of it."""
    urls = set()
    async with await aio_pika.connect(amqp_url) as connection:
        channel = await connection.channel()
        await channel.set_qos(prefetch_count=1000)
        declared = await channel.declare_queue(queue, passive=True)
        while (message := await declared.get(fail=False, no_ack=True)) is not None:
            urls.add(CrawlMessage.decode(message.body).url)
    return urls
