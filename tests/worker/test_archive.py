"""The WARC archive in a crawl, against the real services: one response record per fetch with the
bytes the site sent, rows pointing at their records, rotation, revisits, and a worker killed mid-crawl."""

from __future__ import annotations

import dataclasses
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
import yaml
from redis.asyncio import Redis

from crawler.archive import Archived, read, records
from crawler.config import load_config
from crawler.settings import Settings
from crawler.worker import wiring
from tests.scheduler.test_recrawl import refresh_all, rows
from tests.support.crawls import consumer, finish, seed
from tests.support.fresh import FreshSite, Page, fresh_site, html, serving
from tests.support.services import settings_for
from tests.support.wait import until

WARCIO = str(Path(sys.executable).with_name("warcio"))


def configure(path: Path, site: FreshSite, *, top: dict[str, Any] | None = None, **rules: Any) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "defaults": {"retry_delays": [0.2], "rate": 500, "burst": 100, "sitemaps": False},
                "resolve": {site.host: site.ip},
                "allow_private_networks": True,
                "domains": {site.host: {"archive": True, "extract": {"heading": "h1"}, **rules}},
                **(top or {}),
            }
        )
    )
    return path


def stored_count(database_url: str) -> int:
    """Pages stored so far; 0 before the worker has made the table."""
    try:
        return len(rows(database_url))
    except sa.exc.OperationalError:
        return 0


def archived(row: dict[str, Any]) -> Archived:
    keys = ("warc_file", "warc_offset", "warc_length", "warc_digest", "warc_date")
    return Archived(*(row[k] for k in keys))


def everything(directory: Path) -> list[tuple[str, str, Any]]:
    """(file, type, record) of every record of every file, each file checked by warcio's own CLI."""
    out = []
    for path in listed(directory):
        for command in ("check", "index"):
            done = subprocess.run([WARCIO, command, str(path)], capture_output=True, text=True, timeout=60)
            assert done.returncode == 0, f"warcio {command} {path.name}: {done.stdout}{done.stderr}"
        for record in records(path):
            out.append((path.name, record.rec_type, (record, record.payload)))
    return out


def listed(directory: Path) -> list[Path]:
    return sorted(directory.iterdir())


def site_of(n: int) -> FreshSite:
    site = fresh_site("a.test", "127.0.0.31")
    site.pages["/robots.txt"] = Page("User-agent: *\nAllow: /\n", content_type="text/plain")
    links = [f"/p/{i}" for i in range(n)] + ["/missing", "/file.pdf"]
    site.pages["/"] = Page(html("home", "the shop", links))
    for i in range(n):
        site.pages[f"/p/{i}"] = Page(html(f"p{i}", f"product {i} " * 50))
    site.pages["/file.pdf"] = Page(b"%PDF-1.4 not read", content_type="application/pdf")
    return site


@pytest.mark.timeout(120)
async def test_an_archived_crawl_writes_a_response_record_per_fetch_with_the_bytes_the_site_sent(
    tmp_path: Path, amqp_url: str, prefix: str, sqlite_url: str, redis: Redis
) -> None:
    site = site_of(20)
    sitemap = f'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"><url><loc>{site.url("/p/1")}</loc></url></urlset>'
    site.pages["/sitemap.xml"] = Page(sitemap.encode(), content_type="application/xml")
    site.pages["/robots.txt"].body += f"Sitemap: {site.url('/sitemap.xml')}\n"
    config_path = configure(tmp_path / "d.yaml", site, sitemaps="auto")
    settings = settings_for(amqp_url, prefix, sqlite_url, config_path)
    with serving(site):
        await wiring.consume(settings, load_config(settings.config_path), burst=True, seeds=[site.url()])
    found = everything(Path(settings.archive_dir))
    kinds = [kind for _, kind, _ in found]
    assert kinds.count("warcinfo") == len({name for name, _, _ in found}) == 1
    responses = [rec for _, kind, rec in found if kind == "response"]
    # One response (and its request) per request the site served: robots.txt, its sitemap, pages,
    # a 404, a PDF.
    assert len(responses) == kinds.count("request") == len(site.hits) == 25
    by_url = {record.rec_headers.get_header("WARC-Target-URI"): (record, body) for record, body in responses}
    served = {site.url(path) for path in ("/robots.txt", "/sitemap.xml", "/", "/missing", "/file.pdf")}
    assert set(by_url) == served | {site.url(f"/p/{i}") for i in range(20)}
    robots, _ = by_url[site.url("/robots.txt")]
    assert by_url[site.url("/robots.txt")][1] == site.pages["/robots.txt"].body.encode()
    assert by_url[site.url("/sitemap.xml")][1] == sitemap.encode()
    assert robots.http_headers.get_statuscode() == "200"
    missing, missing_body = by_url[site.url("/missing")]
    assert missing.http_headers.get_statuscode() == "404" and b"Not found" in missing_body
    pdf, pdf_body = by_url[site.url("/file.pdf")]
    # Not HTML: its body is not read, and the record says so.
    assert pdf_body == b"" and pdf.rec_headers.get_header("WARC-Truncated") == "unspecified"
    # The site sent Content-Length: kept as X-Crawler-Content-Length, the stored payload's own given.
    page, page_body = by_url[site.url("/p/3")]
    assert page_body.startswith(b"<!doctype html>") and page_body.endswith(b"</html>")
    assert page.http_headers.get_header("X-Crawler-Content-Length") == str(len(page_body))
    assert page.http_headers.get_header("Content-Length") == str(len(page_body))
    # Each row points at its answer's records; reading them back gives the same bytes.
    stored = rows(sqlite_url)
    assert len(stored) == 23 and all(r["warc_file"] for r in stored.values())
    for url, row in stored.items():
        again = read(Path(settings.archive_dir), archived(row))
        assert again.url == url and again.body == by_url[url][1]
        assert row["warc_digest"] == by_url[url][0].rec_headers.get_header("WARC-Payload-Digest")
    assert stored[site.url("/p/3")]["data"] == {"heading": "p3"}


@pytest.mark.timeout(120)
async def test_files_rotate_at_archive_max_bytes_and_each_opens_with_warcinfo(
    tmp_path: Path, amqp_url: str, prefix: str, sqlite_url: str, redis: Redis
) -> None:
    site = site_of(30)
    config_path = configure(
        tmp_path / "d.yaml", site, top={"archive_max_bytes": 4_000, "archive_prefix": "shop"}
    )
    settings = settings_for(amqp_url, prefix, sqlite_url, config_path)
    with serving(site):
        await wiring.consume(settings, load_config(settings.config_path), burst=True, seeds=[site.url()])
    directory = Path(settings.archive_dir)
    files = listed(directory)
    assert len(files) >= 5
    for path in files:
        # {prefix}-{17-digit UTC time}-{serial}-{host}-{pid}.warc.gz
        name, stamp, serial, *_ = path.name.split("-")
        assert (name, len(stamp), len(serial)) == ("shop", 17, 5) and path.name.endswith(".warc.gz")
        kinds = [r.rec_type for r in records(path)]
        assert kinds[0] == "warcinfo" and "warcinfo" not in kinds[1:]
        assert path.stat().st_size <= 4_000 or kinds.count("response") == 1
    responses = [kind for _, kind, _ in everything(directory) if kind == "response"]
    assert len(responses) == len(site.hits)
    for row in rows(sqlite_url).values():
        assert read(directory, archived(row)).status == row["status_code"]


@pytest.mark.timeout(120)
async def test_a_refresh_writes_revisits_for_a_304_and_for_the_same_payload_and_the_row_keeps_its_record(
    tmp_path: Path, amqp_url: str, prefix: str, sqlite_url: str, redis: Redis
) -> None:
    site = fresh_site("a.test", "127.0.0.31")
    site.pages["/"] = Page(html("home", "the shop", ["/same", "/changed"], nonce=False))
    site.pages["/same"] = Page(html("same", "unchanged", nonce=False), validators=False)
    site.pages["/changed"] = Page(html("changed", "v1", nonce=False))
    config_path = configure(tmp_path / "d.yaml", site, recrawl={"every": "1h"})
    settings = settings_for(amqp_url, prefix, sqlite_url, config_path)
    config = load_config(settings.config_path)
    with serving(site):
        await wiring.consume(settings, config, burst=True, seeds=[site.url()])
        first = rows(sqlite_url)
        site.pages["/changed"] = Page(html("changed", "v2", nonce=False))
        site.hits.clear()
        await refresh_all(settings, config)
    second = rows(sqlite_url)
    found = {record.rec_headers.get_header("WARC-Target-URI"): [] for _, _, (record, _) in []}
    for _, kind, (record, _) in everything(Path(settings.archive_dir)):
        if kind in ("response", "revisit"):
            found.setdefault(record.rec_headers.get_header("WARC-Target-URI"), []).append(record)
    home, same, changed = (found[site.url(p)] for p in ("/", "/same", "/changed"))
    assert [r.rec_type for r in home] == ["response", "revisit"]  # a 304
    assert home[1].rec_headers.get_header("WARC-Profile").endswith("/revisit/server-not-modified")
    assert home[1].http_headers.get_statuscode() == "304"
    assert [r.rec_type for r in same] == ["response", "revisit"]  # a 200 with the same bytes
    assert same[1].rec_headers.get_header("WARC-Profile").endswith("/revisit/identical-payload-digest")
    for revisit, url in ((home[1], site.url("/")), (same[1], site.url("/same"))):
        assert revisit.rec_headers.get_header("WARC-Refers-To-Target-URI") == url
        assert revisit.rec_headers.get_header("WARC-Refers-To-Date") == first[url]["warc_date"]
        assert revisit.rec_headers.get_header("WARC-Payload-Digest") == first[url]["warc_digest"]
    assert [r.rec_type for r in changed] == ["response", "response"]
    # Unchanged rows still point at the answer their content was read from; the changed one moved.
    for path in ("/", "/same"):
        assert archived(second[site.url(path)]) == archived(first[site.url(path)])
    moved = second[site.url("/changed")]
    assert archived(moved) != archived(first[site.url("/changed")])
    assert b"v2" in read(Path(settings.archive_dir), archived(moved)).body


@pytest.mark.timeout(180)
async def test_a_worker_killed_mid_crawl_leaves_readable_files_and_no_row_without_its_record(
    tmp_path: Path, amqp_url: str, prefix: str, sqlite_url: str, redis: Redis
) -> None:
    site = site_of(400)
    settings = settings_for(amqp_url, prefix, sqlite_url, configure(tmp_path / "d.yaml", site, rate=100))
    with serving(site):
        first = consumer(settings)
        try:
            await seed(settings, site.url())
            await until(lambda: stored_count(sqlite_url), lambda n: n > 60, 60, "pages stored")
            first.send_signal(signal.SIGKILL)
        finally:
            first.communicate()
        second = consumer(settings, "--burst")
        finish(second)
    directory = Path(settings.archive_dir)
    # The second worker began a file of its own; the killed one's keeps its `.open` name.
    names = [path.name for path in listed(directory)]
    assert len(names) == 2 and sum(name.endswith(".warc.gz.open") for name in names) == 1
    stored = rows(sqlite_url)
    assert len(stored) == 403
    for url, row in stored.items():
        assert read(directory, archived(row)).url == url
    # Every file reads to its end (a cut last record would be skipped with a warning).
    assert sum(1 for path in listed(directory) for r in records(path) if r.rec_type == "response") >= 404


def test_settings_give_each_test_its_own_archive(tmp_path: Path) -> None:
    settings = settings_for("amqp://x", "p", "sqlite://", tmp_path / "d.yaml")
    assert settings.archive_dir == str(tmp_path / "archive")
    assert dataclasses.replace(settings, archive_dir="elsewhere").archive_dir == "elsewhere"
    assert Settings.from_env({"CRAWLER_ARCHIVE_DIR": "/data/warc"}).archive_dir == "/data/warc"
