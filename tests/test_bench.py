"""The bench's pure parts: the static site's shape and the profile summary (no nginx, no Scrapy)."""

from __future__ import annotations

import json
import os
import shutil
from collections import deque
from pathlib import Path

import pytest

from bench.profile import activity, parse, summary
from bench.site import STAMP, SiteSpec, file_name, pages, render, write
from crawler.parse.extract import compile_fields, extract


def _page_of(spec: SiteSpec, url: str) -> tuple[str, int]:
    host_port, _, path = url.removeprefix("http://").partition("/")
    host = host_port.split(":")[0]
    if path == "":
        return host, 0
    assert path.startswith("p/") and path.endswith(".html"), url
    return host, int(path[2:-5])


def test_writes_every_page_of_every_host(tmp_path: Path) -> None:
    spec = SiteSpec(pages=5)
    write(spec, tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*spec.hosts, STAMP])
    for host in spec.hosts:
        files = sorted(str(p.relative_to(tmp_path / host)) for p in (tmp_path / host).rglob("*.html"))
        assert files == sorted(file_name(i) for i in range(5))
    assert json.loads((tmp_path / STAMP).read_text())["pages"] == 5


def test_a_page_has_a_title_a_price_links_and_about_30_kb(tmp_path: Path) -> None:
    spec = SiteSpec(pages=5)
    write(spec, tmp_path)
    fields = compile_fields({"title": "h1", "price": ".price"})
    for host in spec.hosts:
        for i in range(5):
            body = (tmp_path / host / file_name(i)).read_bytes()
            assert spec.page_bytes <= len(body) < spec.page_bytes + 2_000
            page = extract(body, spec.url(host, i), fields=fields)
            assert page.data["title"] == page.title
            assert page.data["price"] is not None and page.data["price"].endswith(" EUR")
            hosts = {_page_of(spec, link)[0] for link in page.links}
            assert host in hosts and hosts - {host}, "same-site links and a link to another host"
            assert all(_page_of(spec, link)[1] < spec.pages for link in page.links)


def test_the_same_spec_gives_the_same_bytes(tmp_path: Path) -> None:
    spec = SiteSpec(pages=5)
    write(spec, tmp_path / "a")
    write(spec, tmp_path / "b")
    for host in spec.hosts:
        for i in range(5):
            assert (tmp_path / "a" / host / file_name(i)).read_bytes() == (
                tmp_path / "b" / host / file_name(i)
            ).read_bytes()


def test_every_page_is_reachable_from_its_index_within_five_hops() -> None:
    spec = SiteSpec(pages=300, page_bytes=0)
    html = {(host, i): text for host, i, text in pages(spec)}
    assert len(html) == spec.total
    depth = {(h, 0): 0 for h in spec.hosts}
    todo = deque(depth)
    while todo:
        here = todo.popleft()
        for link in extract(html[here].encode(), spec.url(*here)).links:
            there = _page_of(spec, link)
            if there not in depth:
                depth[there] = depth[here] + 1
                todo.append(there)
    assert set(depth) == set(html)
    assert max(depth.values()) <= 5


def test_about_forty_links_per_page() -> None:
    spec = SiteSpec(pages=500, page_bytes=0)
    page = extract(render(spec, 0, 7).encode(), spec.url(spec.hosts[0], 7))
    # Duplicates collapse, so a few fewer than 40 + 2 distinct links.
    assert 30 <= len(page.links) <= spec.links + spec.cross_links


PROFILE = """\
process 1:"python";_run_once (asyncio/base_events.py:1922);_process (crawler/worker/pipeline.py:150);\
visit (crawler/worker/page.py:222);\
extract (crawler/parse/extract.py:80);_parse (crawler/parse/extract.py:120) 30
_run_once (asyncio/base_events.py:1922);_route (crawler/worker/pipeline.py:230);\
route (crawler/frontier/router.py:95);publish (crawler/frontier/publisher.py:80);\
put (asyncio/queues.py:140) 20
_run_once (asyncio/base_events.py:1922);select (selectors.py:468) 40
_run_once (asyncio/base_events.py:1922);setup (httpcore/_synchronization.py:60);\
current_async_library (httpcore/_synchronization.py:26);_find_and_load (<frozen importlib._bootstrap>:1) 6
<module> (crawler-consume:8);<module> (crawler/cli.py:3);_find_and_load (<frozen importlib._bootstrap>:1) 4
"""


def test_the_profile_summary_splits_samples_by_activity() -> None:
    stacks = parse(PROFILE)
    assert sum(stacks.values()) == 100
    assert {activity(s): n for s, n in stacks.items()} == {
        "parse HTML (decode + lxml)": 30,
        "AMQP publish + confirm (router)": 20,
        "event loop (asyncio scheduling, callbacks, epoll)": 40,
        "import at run time, in current_async_library (httpcore/_synchronization.py)": 6,
        "start-up (imports)": 4,
    }
    text = summary(stacks)
    assert " 30.0%  parse HTML (decode + lxml)" in text
    assert " 40.0%  select (selectors.py)" in text


def test_the_gateway_bench_says_which_target_it_missed() -> None:
    from bench.gateway import GATEWAY, GatewayRun, table
    from bench.tools import TOOL, Result

    direct = GatewayRun(Result("crawler direct", 2, 1000, pages=1000, seconds=5.0, cpu={TOOL: 8.0}))
    via = GatewayRun(
        Result("crawler gateway", 2, 1000, pages=1000, seconds=10.0, cpu={TOOL: 9.0}), {GATEWAY: 3.5}
    )
    text = table([direct, via])
    assert "50%" in text and "3.50" in text
    assert "(target >= 60%): MISSED" in text and "(target <= 1): MISSED" in text


def test_the_crash_bench_counts_refetched_pages_and_the_busiest_windows() -> None:
    from bench.crash import FAILING, Report, max_in_window

    assert max_in_window([0.0, 0.5, 0.99, 1.0, 1.5, 5.0], 1.0) == 3  # [0, 1) holds three, [0.5, 1.5) too
    assert max_in_window([], 1.0) == 0
    log = [(0.0, "/robots.txt"), (0.1, "/"), (0.2, "/post/1"), (0.3, "/post/1"), (0.4, "/robots.txt")]
    log += [(1.0, FAILING), (2.0, FAILING), (3.0, "/hang/1"), (13.0, "/hang/1")]
    report = Report(requests={f"s{i}.test": list(log) for i in range(1, 6)}, pages=5)
    # robots.txt (its cache starts over), the failing page and the hanging one do not count.
    assert report.refetched() == {f"s{i}.test/post/1": 1 for i in range(1, 6)}
    text = report.text()
    assert "fetched again with 200: 5" in text and f"{FAILING} requested 2 times (at most 4)" in text


def test_the_scaling_bench_fits_the_rss_slope_per_10k_pages() -> None:
    from bench.scaling import rss_slope

    flat = [(p, 120.0) for p in range(0, 20_000, 500)]
    assert rss_slope(flat, 2_000) == 0.0
    growing = [(p, 100 + p / 1_000) for p in range(0, 20_000, 500)]  # 1 MB per 1,000 pages
    slope = rss_slope(growing, 2_000)
    assert slope is not None and abs(slope - 10.0) < 1e-9
    # The first pages (caches and pools filling) are left out; one point is no slope.
    assert rss_slope([(0, 50.0), (100, 90.0), (5_000, 120.0)], 5_000) is None


def test_the_scaling_projection_shows_its_arithmetic() -> None:
    from bench.scaling import Costs, projection

    text = projection(
        Costs(
            consumer_ms=2.0,
            one_consumer_rate=400.0,
            rabbitmq_ms=0.4,
            redis_ms=0.2,
            urls_per_page=1.0,
            store_bytes={"plain": 60.0, "bloom": 2.0},
            db_bytes=20_000.0,
            router_rate=8_000.0,
            broker_rate=12_000.0,
            broker_ms=0.1,
        ),
        per_day=86_400_000,  # 1,000 pages/s
    )
    assert "= 1,000 pages/s on average" in text
    assert "1,000 pages/s x 2.00 CPU-ms/page = 2.00 cores" in text
    assert "1,000 / 400 = 2.5 -> 3 processes at full speed, 4 at 70 %" in text
    assert "1,000 x 0.40 ms/page = 0.40 cores of RabbitMQ" in text
    assert "plain    86,400,000 x 60.00 B = 5.18 GB per day" in text
    assert "bloom    86,400,000 x 2.00 B = 0.17 GB per day" in text
    assert "= 20.0 MB/s, 1,728 GB a day" in text


def _nginx_missing() -> bool:
    # bench.nginx installs it when run as root; elsewhere it must be there.
    return shutil.which("nginx") is None and not Path("/usr/sbin/nginx").exists() and os.geteuid() != 0


@pytest.mark.timeout(900)  # ~1 minute on a quiet machine; each process starts slowly under load
@pytest.mark.skipif(_nginx_missing(), reason="needs nginx (apt-get install nginx)")
def test_the_scaling_bench_crawls_grows_the_store_and_publishes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from bench.scaling import broker_ceiling, main

    # A port of its own: a bench run may be serving on the default one.
    main(["--only", "size,dedup", "--sizes", "8,16,40", "--port", "8119", "--work", str(tmp_path)])
    out = capsys.readouterr().out
    rows = {line.split("  ")[0]: line for line in out.splitlines()}
    for case, stored in [("8 pages", "8/8"), ("16 pages", "16/16"), ("8 pages + 32 seeded", "8/8")]:
        assert stored in rows[case], out
    assert "note:" not in out and "INCOMPLETE" not in out, out  # every crawl whole, its store as expected
    assert "slope" in out
    growth = [line.split() for line in out.splitlines() if line.startswith(("plain ", "compact ", "bloom "))]
    assert [(g[0], g[1]) for g in growth] == [
        ("plain", "1,000"), ("compact", "1,000"), ("bloom", "1,000"),
        ("compact", "10,000,000"), ("bloom", "10,000,000"),
    ]  # fmt: skip
    assert all(float(b) > 0 for g in growth for b in g[2:5]), growth

    two = broker_ceiling(2, 200, 0.0)
    assert two.publishes == 400 and two.rate > 0


async def test_the_exit_relay_keeps_its_client_connection_across_every_framing() -> None:
    import asyncio

    from bench.exits import serve_client

    answers = {
        b"/length": b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
        b"/chunked": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n",
        b"/empty": b"HTTP/1.1 204 No Content\r\n\r\n",
        b"/eof": b"HTTP/1.1 200 OK\r\n\r\nuntil the end",  # delimited by the close: the last one
    }
    seen: list[tuple[str, bytes]] = []

    async def upstream(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        path = head.split(b" ")[1]
        seen.append((writer.get_extra_info("peername")[0], head))
        writer.write(answers[path])
        await writer.drain()
        writer.close()

    site = await asyncio.start_server(upstream, "127.0.0.24", 0)
    proxy = await asyncio.start_server(lambda r, w: serve_client(r, w, "127.0.0.25"), "127.0.0.26", 0)
    port = site.sockets[0].getsockname()[1]
    async with site, proxy:
        reader, writer = await asyncio.open_connection("127.0.0.26", proxy.sockets[0].getsockname()[1])
        got = []
        for path in answers:
            writer.write(
                b"GET http://127.0.0.24:%d%s HTTP/1.1\r\nHost: x\r\nProxy-Connection: keep-alive\r\n\r\n"
                % (port, path)
            )
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
            if path == b"/length":
                got.append(head.split(b" ")[1] + await reader.readexactly(5))
            elif path == b"/chunked":
                got.append(head.split(b" ")[1] + await reader.readuntil(b"0\r\n\r\n"))
            elif path == b"/empty":
                got.append(head.split(b" ")[1])
            else:
                assert b"Connection: close" in head
                got.append(head.split(b" ")[1] + await asyncio.wait_for(reader.read(), 5))
        writer.close()
    assert got == [b"200hello", b"2003\r\nabc\r\n2\r\nde\r\n0\r\n\r\n", b"204", b"200until the end"]
    assert {ip for ip, _ in seen} == {"127.0.0.25"}  # every request left from the exit's own address
    assert all(b"Proxy-Connection" not in head and b"GET /" in head for _, head in seen)


def test_the_sitemap_bench_builds_50000_realistic_urls() -> None:
    from bench.sitemap import SITEMAP_URL, build
    from crawler.parse.sitemaps import SitemapReader

    reader = SitemapReader(SITEMAP_URL)
    entries = list(reader.read([build(1000)]))
    assert len(entries) == 1000 and reader.report.gzip and not reader.report.skipped
    assert 75 <= sum(len(e.loc) for e in entries) / len(entries) <= 90
    assert all(e.lastmod is not None for e in entries)


async def test_the_bands_bench_finds_where_the_seeds_come_on_each_frontier() -> None:
    from bench.bands import measure

    classic = await measure("classic", 40, 5, 4, 1.0, 2_000.0)
    assert classic.seeds == [1, 2, 3, 4, 5]  # ten priorities: the seeds before the whole backlog
    assert [q.split(": ")[1] for q in classic.queues] == ["classic"]
    quorum = await measure("quorum", 40, 5, 4, 1.0, 2_000.0, live_after=10)
    assert len(quorum.seeds) == 5 and 1 <= quorum.seeds[0] <= quorum.seeds[-1] <= 45
    assert [q.split(": ")[1].split(",")[0] for q in quorum.queues] == ["quorum", "quorum"]


@pytest.mark.timeout(120)
def test_the_outputs_bench_uploads_and_delivers(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from bench.outputs import main

    assert main(["upload", "--gb", "0.02", "--work", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "1 WARC files, 20 MB" in out and "1 objects, 20 MB in the store; 0 left in the spool" in out
    assert main(["webhooks", "--versions", "40"]) == 0
    out = capsys.readouterr().out
    assert "500 one in ten" in out and "never fails" in out and "the deliveries/s of a receiver" in out
