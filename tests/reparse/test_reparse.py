"""`crawler reparse` against the real services: an archived crawl read again after its extraction
changed, with no request to the site; stopped and resumed; links routed or not; a missing record."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
import yaml
from redis.asyncio import Redis

from crawler import cli
from crawler.config import load_config
from crawler.reparse.run import Progress, Reparser
from crawler.settings import Settings
from crawler.sink import sql
from crawler.sink.reparsed import ReparseStore, Selection
from crawler.worker import wiring
from tests.scheduler.test_recrawl import rows
from tests.support.fresh import FreshSite, Page, fresh_site, serving
from tests.support.services import env_for, queue_depth, settings_for

N = 40


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


def configure(path: Path, site: FreshSite, **rules: Any) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "defaults": {"retry_delays": [0.2], "rate": 500, "burst": 100, "sitemaps": False},
                "resolve": {site.host: site.ip},
                "allow_private_networks": True,
                "domains": {site.host: {"archive": True, "obey_robots": False, **rules}},
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
    path = configure(tmp_path / "d.yaml", site, extract={"heading": "h1"}, history={"keep": 10})
    settings = settings_for(amqp_url, prefix, database_url, path)
    await wiring.consume(settings, load_config(path), burst=True, seeds=[site.url()])
    configure(
        path,
        site,
        extract={"heading": "h1", "price": {"css": ".price", "type": "float"}},
        parse="tests.reparse.hooks:hidden_links",
        history={"keep": 10},
    )
    return settings


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
        assert await asyncio.to_thread(cli.main, ["reparse", "--workers", "2"]) == 0
        assert len(site.hits) == requests  # nothing fetched
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


@pytest.mark.timeout(120)
async def test_a_stopped_reparse_resumes_after_its_last_batch_and_reads_each_page_once(
    tmp_path: Path, amqp_url: str, prefix: str, sqlite_url: str, redis: Redis
) -> None:
    site = site_of()
    with serving(site):
        settings = await crawled(tmp_path, amqp_url, prefix, sqlite_url, site)
    config = load_config(settings.config_path)
    store = ReparseStore(sqlite_url)
    try:
        selection = Selection((site.host,))
        stop = asyncio.Event()
        reports: list[Progress] = []

        def stopping(progress: Progress) -> None:
            reports.append(progress)
            stop.set()  # as Ctrl-C does, after the first batch

        reparser = Reparser(config, store, settings.archive_dir, selection, workers=1, router=None, batch=15)
        first = await reparser.run(stop, stopping)
        assert (first.done, first.total, first.resumed) == (15, N + 1, False)
        again = await Reparser(
            config, store, settings.archive_dir, selection, workers=2, router=None, batch=15
        ).run(asyncio.Event(), reports.append)
    finally:
        store.close()
    assert (again.done, again.changed, again.resumed) == (N + 1, N + 1, True)
    [(pages, changed, finished)] = query(sqlite_url, "SELECT pages, changed, finished_at FROM reparses")
    assert (pages, changed) == (N + 1, N + 1) and finished is not None
    assert all("price" in (r["data"] or {}) for r in rows(sqlite_url).values() if r["url"] != site.url())


@pytest.mark.timeout(120)
async def test_no_links_routes_nothing_and_a_missing_record_is_counted_and_its_row_left_alone(
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
    broken = site.url("/p/7")
    query(sqlite_url, f"UPDATE pages SET warc_offset = warc_offset + 3 WHERE url = '{broken}'")
    for key, value in env_for(settings).items():
        monkeypatch.setenv(key, value)
    assert await asyncio.to_thread(cli.main, ["reparse", "--no-links", "--domain", site.host]) == 0
    out = capsys.readouterr()
    assert f"{N + 1} pages read again: {N} changed" in out.out and "1 unreadable, 0 links routed" in out.out
    assert "its pages are left as they are" in out.err
    after = rows(sqlite_url)
    assert after[broken]["data"] == {"heading": "product 7"}
    assert after[site.url("/p/8")]["data"]["price"] == 8.5
    assert await queue_depth(amqp_url, settings.names.domain_queue(site.host)) == 0
    # A domain that is not configured is refused in one line.
    assert await asyncio.to_thread(cli.main, ["reparse", "--domain", "nope.test"]) == 2
    assert "not configured in domains.yaml: nope.test" in capsys.readouterr().err
