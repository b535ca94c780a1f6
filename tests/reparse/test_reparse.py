"""`crawler reparse` against the real services: an archived crawl read again after its extraction
changed, with no request to the site; stopped (in process, and by SIGTERM) and resumed; links routed
or not, within their crawl's limits; missing records."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aio_pika
import pytest
import sqlalchemy as sa
import yaml
from redis.asyncio import Redis

from bench import documents as files
from crawler import cli
from crawler.archive import Archive, Exchange
from crawler.config import load_config
from crawler.dedup.near import NearIndexes
from crawler.frontier.crawls import CrawlState
from crawler.reparse.run import Progress, Reparser
from crawler.service import Control, NewCrawl
from crawler.settings import Settings
from crawler.sink import sql
from crawler.sink.database import Database
from crawler.sink.reparsed import ReparseStore, Selection
from crawler.sink.tables import CONTENT
from crawler.worker import wiring
from tests.scheduler.test_recrawl import rows
from tests.support.fresh import FreshSite, Page, fresh_site, serving
from tests.support.services import crawler_command, drain, env_for, queue_depth, settings_for
from tests.support.wait import until

N = 40
HTML = "text/html; charset=utf-8"


def page(i: int) -> Page:
    body = (
        f"<!doctype html><html><head><title>p{i}</title></head><body><h1>product {i}</h1>"
        f"<span class='price'>{i}.50</span><div data-next='/hidden/{i}'></div></body></html>"
    )
    return Page(body)


def site_of() -> FreshSite:
    site = fresh_site("a.test", "127.0.0.33")
    links = "".join(f"<a href='/p/{i}'>p{i}</a>" for i in range(N))
    site.pages["/"] = Page(
        f"<!doctype html><html><head><title>home</title></head><body>{links}</body></html>"
    )
    site.pages.update({f"/p/{i}": page(i) for i in range(N)})
    return site


def configure(path: Path, host: str, ip: str, **rules: Any) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "defaults": {"retry_delays": [0.2], "rate": 500, "burst": 100, "sitemaps": False},
                "resolve": {host: ip},
                "allow_private_networks": True,
                "domains": {host: {"archive": True, "obey_robots": False, **rules}},
            }
        )
    )
    return path


def query(database_url: str, text: str) -> list[Any]:
    engine = sa.create_engine(sql.engine_url(database_url))
    try:
        with engine.begin() as conn:
            result = conn.execute(sa.text(text))
            return list(result) if result.returns_rows else []
    finally:
        engine.dispose()


async def crawled(tmp_path: Path, amqp_url: str, prefix: str, database_url: str, site: FreshSite) -> Settings:
    """The site crawled with `archive: true`, extracting the heading only, then its extraction edited:
    the price too, and a parse hook's field and links."""
    path = configure(tmp_path / "d.yaml", site.host, site.ip, extract={"heading": "h1"}, history={"keep": 10})
    settings = settings_for(amqp_url, prefix, database_url, path)
    await wiring.consume(settings, load_config(path), burst=True, seeds=[site.url()])
    configure(
        path,
        site.host,
        site.ip,
        extract={"heading": "h1", "price": {"css": ".price", "type": "float"}},
        parse="tests.reparse.hooks:hidden_links",
        history={"keep": 10},
    )
    return settings


async def archived(settings: Settings, pages: list[tuple[str, str, str | None]], depth: int = 1) -> None:
    """Pages (url, body, crawl) written to the archive and stored as a crawl with `archive: true`
    would leave them, without one: a run long enough to stop, or pages of several crawls."""
    now = datetime.now(UTC)
    await answers(
        settings,
        [(Exchange(u, 200, [("Content-Type", HTML)], b.encode(), [], now), c) for u, b, c in pages],
        depth,
    )


async def answers(settings: Settings, exchanges: list[tuple[Exchange, str | None]], depth: int = 1) -> None:
    """Answers (and the crawl of each) archived, and their pages' rows stored pointing at them."""
    await asyncio.to_thread(sql.migrate, settings.database_url)
    sink_db = Database(settings.database_url)
    sink = sql.Sink(sink_db)
    try:
        async with Archive(settings.archive_dir, max_bytes=1 << 30, prefix="test") as archive:
            for i in range(0, len(exchanges), 500):
                some = exchanges[i : i + 500]
                written = await asyncio.gather(*(archive.write(e) for e, _ in some))
                records = [
                    sql.PageRecord(
                        e.url,
                        e.url.split("/")[2],
                        depth,
                        1,
                        e.url,
                        e.status,
                        dict(e.headers)["Content-Type"],
                        crawl=crawl,
                        rendered=e.rendered is not None,
                        archived=a,
                    )
                    for (e, crawl), a in zip(some, written, strict=True)
                ]
                await sink.store_many(records)
    finally:
        sink_db.close()


def run_row(database_url: str) -> tuple[int, int, int, int, bool]:
    """The only run's pages, changed, failed, links, and whether it finished."""
    [(pages, changed, failed, links, finished)] = query(
        database_url, "SELECT pages, changed, failed, links, finished_at FROM reparses"
    )
    return pages, changed, failed, links, finished is not None


@pytest.mark.timeout(120)
async def test_reparse_after_editing_extract_updates_every_row_asks_the_site_nothing_and_routes_new_links(
    tmp_path: Path,
    amqp_url: str,
    prefix: str,
    sqlite_url: str,
    redis: Redis,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    site = site_of()
    with serving(site):
        settings = await crawled(tmp_path, amqp_url, prefix, sqlite_url, site)
        before = rows(sqlite_url)
        assert before[site.url("/p/3")]["data"] == {"heading": "product 3"}
        requests = len(site.hits)
        for key, value in env_for(settings).items():
            monkeypatch.setenv(key, value)
        async with await aio_pika.connect(amqp_url) as connection:
            channel = await connection.channel()
            feed = await channel.declare_queue(exclusive=True)
            await feed.bind(settings.names.changes, "#")
            assert await asyncio.to_thread(cli.main, ["reparse", "--workers", "2"]) == 0
            published = await drain(channel, feed.name)
        assert len(site.hits) == requests  # nothing fetched
    # Every version the run made reached the change feed, saying what changed.
    news = [json.loads(m.body) for m in published]
    assert sorted(n["url"] for n in news) == sorted(site.url(p) for p in site.pages)
    assert {(m.type, n["kind"], n["version"]) for m, n in zip(published, news, strict=True)} == {
        ("reparse", "reparse", 2)
    }
    by_url = {n["url"]: n for n in news}
    assert by_url[site.url("/p/3")]["changes"]["price"] == {"old": None, "new": 3.5}
    printed = capsys.readouterr().out
    assert f"{N + 1} pages read again: {N + 1} changed" in printed and f"{N} links routed" in printed
    after = rows(sqlite_url)
    for i in range(N):
        row = after[site.url(f"/p/{i}")]
        assert row["data"] == {"heading": f"product {i}", "price": i + 0.5, "next": f"/hidden/{i}"}
        assert row["fetched_at"] == before[site.url(f"/p/{i}")]["fetched_at"]  # not fetched again
        assert row["version"] == 2
    kinds = query(sqlite_url, "SELECT kind, count(*) FROM page_versions GROUP BY kind ORDER BY kind")
    assert kinds == [("new", N + 1), ("reparse", N + 1)]
    # The hook's links were never seen: routed into the domain's queue, to be crawled.
    assert await queue_depth(amqp_url, settings.names.domain_queue(site.host)) == N
    # The same command again: a new run, finding nothing new to change or route.
    assert await asyncio.to_thread(cli.main, ["reparse", "--workers", "1"]) == 0
    assert f"{N + 1} pages read again: 0 changed" in capsys.readouterr().out
    assert await queue_depth(amqp_url, settings.names.domain_queue(site.host)) == N
    assert len(query(sqlite_url, "SELECT id FROM reparses WHERE finished_at IS NOT NULL")) == 2


@pytest.mark.timeout(120)
async def test_a_stopped_reparse_resumes_after_its_last_batch_and_reads_each_page_once(
    tmp_path: Path, amqp_url: str, prefix: str, database_url: str, redis: Redis
) -> None:
    site = site_of()
    with serving(site):
        settings = await crawled(tmp_path, amqp_url, prefix, database_url, site)
    config = load_config(settings.config_path)
    store_db = Database(database_url)
    store = ReparseStore(store_db)
    try:
        selection = Selection((site.host,))
        stop = asyncio.Event()
        reports: list[Progress] = []

        def stopping(progress: Progress) -> None:
            reports.append(progress)
            stop.set()  # as Ctrl-C does, after the first batch (the next one is being read: dropped)

        reparser = Reparser(config, store, settings.archive_dir, selection, workers=1, links=None, batch=15)
        first = await reparser.run(stop, stopping)
        assert (first.done, first.total, first.resumed) == (15, N + 1, False)
        assert run_row(database_url) == (15, 15, 0, 0, False)
        again = await Reparser(
            config, store, settings.archive_dir, selection, workers=2, links=None, batch=15
        ).run(asyncio.Event(), reports.append)
    finally:
        store_db.close()
    assert (again.done, again.changed, again.resumed) == (N + 1, N + 1, True)
    assert run_row(database_url) == (N + 1, N + 1, 0, 0, True)  # one run, each page counted once
    assert all("price" in (r["data"] or {}) for r in rows(database_url).values() if r["url"] != site.url())
    assert query(database_url, "SELECT count(*) FROM page_versions WHERE kind = 'reparse'") == [(N + 1,)]


@pytest.mark.timeout(120)
async def test_sigterm_finishes_the_batch_under_way_exits_143_and_the_same_command_resumes(
    tmp_path: Path, amqp_url: str, prefix: str, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    host, total = "b.test", 1_500  # three batches of 500; 2 ms a page in the parse hook
    path = configure(tmp_path / "d.yaml", host, "127.0.0.34", extract={"heading": "h1"})
    settings = settings_for(amqp_url, prefix, pg_url, path)
    body = "<!doctype html><html><head><title>t</title></head><body><h1>page {}</h1></body></html>"
    await archived(settings, [(f"http://{host}/p/{i}", body.format(i), None) for i in range(total)])
    configure(path, host, "127.0.0.34", extract={"heading": "h1"}, parse="tests.reparse.hooks:slow")
    command = crawler_command("crawler", "reparse", "--no-links", "--workers", "1")
    process = subprocess.Popen(
        command, env=env_for(settings), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        await until(
            lambda: query(pg_url, "SELECT pages FROM reparses"),
            lambda found: found and found[0][0] > 0,
            within=60,
            what="the first batch committed",
            every=0.05,
        )
        process.send_signal(signal.SIGTERM)
        _, err = await asyncio.to_thread(process.communicate, timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 143, err
    assert "SIGTERM: finishing the batch under way" in err and "the same command resumes" in err
    pages, changed, failed, _, finished = run_row(pg_url)
    assert 500 <= pages < total and pages % 500 == 0 and (changed, failed, finished) == (pages, 0, False)
    slow = "SELECT count(*) FROM pages WHERE CAST(data AS TEXT) LIKE '%slow%'"
    assert query(pg_url, slow) == [(pages,)]  # the rows were committed with the cursor
    for key, value in env_for(settings).items():
        monkeypatch.setenv(key, value)
    assert await asyncio.to_thread(cli.main, ["reparse", "--no-links", "--workers", "2"]) == 0
    assert run_row(pg_url) == (total, total, 0, 0, True)  # the same run, each page once
    assert query(pg_url, slow) == [(total,)]


@pytest.mark.timeout(120)
async def test_no_links_routes_nothing_and_missing_records_are_counted_with_one_warning_per_file(
    tmp_path: Path,
    amqp_url: str,
    prefix: str,
    sqlite_url: str,
    redis: Redis,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    site = site_of()
    with serving(site):
        settings = await crawled(tmp_path, amqp_url, prefix, sqlite_url, site)
    broken = [site.url("/p/7"), site.url("/p/8")]
    [(file,)] = query(
        sqlite_url, f"SELECT DISTINCT warc_file FROM pages WHERE url IN ('{broken[0]}', '{broken[1]}')"
    )
    # One row points past its record's start, the other at its first 100 bytes only: neither reads.
    query(sqlite_url, f"UPDATE pages SET warc_offset = warc_offset + 3 WHERE url = '{broken[0]}'")
    query(sqlite_url, f"UPDATE pages SET warc_length = 100 WHERE url = '{broken[1]}'")
    for key, value in env_for(settings).items():
        monkeypatch.setenv(key, value)
    assert await asyncio.to_thread(cli.main, ["reparse", "--no-links", "--domain", site.host]) == 0
    out = capsys.readouterr()
    assert (
        f"{N + 1} pages read again: {N - 1} changed" in out.out and "2 unreadable, 0 links routed" in out.out
    )
    warnings = [line for line in out.err.splitlines() if "unreadable" in line and "left as they are" in line]
    assert len(warnings) == 1 and file in warnings[0] and "2 page(s)" in warnings[0], out.err
    after = rows(sqlite_url)
    assert [after[url]["data"] for url in broken] == [{"heading": "product 7"}, {"heading": "product 8"}]
    assert after[site.url("/p/9")]["data"]["price"] == 9.5
    assert await queue_depth(amqp_url, settings.names.domain_queue(site.host)) == 0
    assert run_row(sqlite_url)[:3] == (N + 1, N - 1, 2)
    # A domain that is not configured is refused in one line.
    assert await asyncio.to_thread(cli.main, ["reparse", "--domain", "nope.test"]) == 2
    assert "not configured in domains.yaml: nope.test" in capsys.readouterr().err


@pytest.mark.timeout(120)
async def test_links_go_to_their_pages_crawl_within_its_limits_and_none_for_a_cancelled_crawl(
    tmp_path: Path,
    amqp_url: str,
    prefix: str,
    sqlite_url: str,
    redis: Redis,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    host = "c.test"
    path = configure(tmp_path / "d.yaml", host, "127.0.0.35", extract={"heading": "h1"})
    settings = settings_for(amqp_url, prefix, sqlite_url, path)
    crawls: dict[str, str] = {}
    async with Control.open(settings, load_config(path), "test") as control:
        # Each crawl's seed is its first page, queued (never fetched here): one message per crawl.
        for name, max_depth in (("open", None), ("shallow", 1), ("gone", None)):
            new = NewCrawl([f"http://{host}/{name}/0"], max_depth=max_depth)
            crawls[name] = (await control.crawls.create(new)).id
        await control.crawls.cancel(crawls["gone"])
    queue = settings.names.domain_queue(host)
    assert await queue_depth(amqp_url, queue) == 3
    # Their pages stored at depth 1, each linking to a page never seen: depth 2, past shallow's limit.
    body = "<!doctype html><html><body><h1>{0}</h1><a href='/new/{0}'>new</a></body></html>"
    pages = [
        (f"http://{host}/{n}/{i}", body.format(f"{n}{i}"), c) for n, c in crawls.items() for i in range(3)
    ]
    await archived(settings, pages)
    for key, value in env_for(settings).items():
        monkeypatch.setenv(key, value)
    assert await asyncio.to_thread(cli.main, ["reparse", "--crawl", crawls["open"], "--workers", "1"]) == 0
    assert (
        "3 pages read again: 3 changed, 0 not pages (redirects, errors, not HTML), 0 unreadable, 3 links"
        in (capsys.readouterr().out)
    )
    assert await asyncio.to_thread(cli.main, ["reparse", "--workers", "1"]) == 0
    assert "9 pages read again: 6 changed" in capsys.readouterr().out  # the open crawl's links: seen
    assert await queue_depth(amqp_url, queue) == 3 + 3
    state = CrawlState(redis, settings.names)
    assert (await state.counts(crawls["open"]))[host]["routed"] == 1 + 3  # counted as its worker counts
    assert (await state.counts(crawls["shallow"]))[host]["routed"] == 1


@pytest.mark.timeout(60)
async def test_only_what_the_crawl_extracted_is_read_again_a_rendered_page_from_its_dom(
    tmp_path: Path,
    amqp_url: str,
    prefix: str,
    sqlite_url: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    host = "d.test"
    path = configure(tmp_path / "d.yaml", host, "127.0.0.36", extract={"heading": "h1"})
    settings = settings_for(amqp_url, prefix, sqlite_url, path)
    now, site = datetime.now(UTC), f"http://{host}"

    def doc(heading: str) -> bytes:
        return f"<!doctype html><html><body><h1>{heading}</h1></body></html>".encode()

    html = [("Content-Type", HTML)]
    await answers(
        settings,
        [
            (Exchange(f"{site}/plain", 200, html, doc("plain"), [], now), None),
            (
                Exchange(f"{site}/moved", 301, [*html, ("Location", "/plain")], b"", [], now, truncated=True),
                None,
            ),
            (Exchange(f"{site}/gone", 404, html, doc("not found"), [], now), None),
            (
                Exchange(
                    f"{site}/a.pdf", 200, [("Content-Type", "application/pdf")], b"", [], now, truncated=True
                ),
                None,
            ),
            # Rendered (render_js): the DOM is what the crawl read, with or without the document as sent.
            (Exchange(f"{site}/app", 200, html, doc("shell"), [], now, rendered=doc("rendered")), None),
            (Exchange(f"{site}/dom", 200, html, b"", [], now, raw=False, rendered=doc("DOM only")), None),
            # A domain crawled once, no longer in domains.yaml: no extraction of its own to run now.
            (Exchange("http://e.test/", 200, html, doc("elsewhere"), [], now), None),
        ],
    )
    for key, value in env_for(settings).items():
        monkeypatch.setenv(key, value)
    assert await asyncio.to_thread(cli.main, ["reparse", "--no-links", "--since", "2999-01-01"]) == 0
    assert "0 pages read again: 0 changed" in capsys.readouterr().out  # none fetched since
    assert await asyncio.to_thread(cli.main, ["reparse", "--no-links", "--workers", "1"]) == 0
    printed = capsys.readouterr()
    assert "7 pages read again: 3 changed, 4 not pages" in printed.out
    assert "e.test is no longer in domains.yaml: its pages are left as they are" in printed.err
    data = {url.removeprefix(site): row["data"] for url, row in rows(sqlite_url).items()}
    assert data == {
        "/plain": {"heading": "plain"},
        "/moved": None,
        "/gone": None,
        "/a.pdf": None,
        "/app": {"heading": "rendered"},
        "/dom": {"heading": "DOM only"},
        "http://e.test/": None,
    }


@pytest.mark.timeout(120)
async def test_reparse_with_content_on_fills_the_content_of_an_archived_crawl(
    tmp_path: Path, amqp_url: str, prefix: str, sqlite_url: str, redis: Redis
) -> None:
    # No site serves these hosts: the archive is all there is.
    host = "c.test"
    path = configure(tmp_path / "d.yaml", host, "127.0.0.35")
    settings = settings_for(amqp_url, prefix, sqlite_url, path)
    article = (Path(__file__).parent.parent / "content" / "pages" / "article.html").read_bytes()
    german = (
        "<html><body><article><h1>Menschenrechte</h1>"
        + "<p>Alle Menschen sind frei und gleich an Würde und Rechten geboren. Sie sind mit Vernunft und "
        "Gewissen begabt und sollen einander im Geist der Brüderlichkeit begegnen.</p>"
        * 3
        + "</article></body></html>"
    ).encode()
    now = datetime.now(UTC)
    pdf = files.pdf(["Annual report.", "Revenue grew."], title="Report 2024")
    exchanges = [
        (f"http://{host}/article", HTML, article),
        (f"http://{host}/copy", HTML, article.replace(b"The Kettle Gazette", b"Kettle Mirror")),
        (f"http://{host}/de", HTML, german),
        (f"http://{host}/report.pdf", "application/pdf", pdf),
        (f"http://{host}/locked.pdf", "application/pdf", files.encrypted_pdf("secret")),
    ]
    await answers(
        settings, [(Exchange(u, 200, [("Content-Type", t)], b, [], now), None) for u, t, b in exchanges]
    )
    configure(path, host, "127.0.0.35", content={"formats": ["markdown", "text"]}, history={})
    store_db = Database(sqlite_url)
    store = ReparseStore(store_db)
    try:
        near = NearIndexes(redis, settings.names)
        progress = await Reparser(
            load_config(path), store, settings.archive_dir, Selection(), workers=1, links=None, near=near
        ).run(asyncio.Event(), lambda _: None)
    finally:
        store_db.close()
    assert (progress.done, progress.changed) == (5, 5)
    found = {r.url.rsplit("/", 1)[1]: r for r in query(sqlite_url, "SELECT * FROM pages")}
    assert "# How to brew better coffee at home" in found["article"].markdown.splitlines()
    assert "Accept all cookies" not in found["article"].text and found["article"].lang == "en"
    assert len(found["article"].simhash) == 16 and found["article"].near_duplicate_of is None
    assert found["copy"].near_duplicate_of == f"http://{host}/article"  # claimed in page order
    assert found["de"].lang == "de"
    report = found["report.pdf"]
    assert (report.text, report.title, report.lang) == ("Annual report.\nRevenue grew.", "Report 2024", "en")
    assert found["locked.pdf"].content_refused == "encrypted"
    # A page whose title reparse now reads makes a version, holding the content its page got.
    columns = ", ".join(f"v.{name}" for name in CONTENT)
    versions = query(
        sqlite_url, f"SELECT p.url, v.kind, {columns} FROM pages p JOIN page_versions v ON v.page_id = p.id"
    )
    made = {v[0].rsplit("/", 1)[1]: tuple(v[1:]) for v in versions}
    assert made == {
        page: ("reparse", *(getattr(found[page], name) for name in CONTENT))
        for page in ("article", "copy", "report.pdf")  # "de" and "locked.pdf" have no title
    }
