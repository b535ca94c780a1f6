"""The bench's pure parts: the static site's shape and the profile summary (no nginx, no Scrapy)."""

from __future__ import annotations

import json
from collections import deque
from pathlib import Path

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
