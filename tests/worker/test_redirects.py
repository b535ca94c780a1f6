"""Every request is a polite request: a redirect hop is routed like a link, so it takes its own
domain's rate token, passes robots.txt and is deduplicated. Checked from each test site's own log of
server-side request times, with real consumer processes."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import sqlalchemy as sa
import yaml

from crawler.names import Names
from crawler.settings import Settings
from crawler.sink.sql import engine_url
from demo.site import Reply, Route, Site, free_port, page, serve
from tests.support.crawls import consumer, finish, seed
from tests.support.services import queue_depth, settings_for
from tests.support.sites import IPS


def moved(location: str, status: int = 301) -> Reply:
    return Reply(status, b"", {"Location": location})


def sites(*routes: dict[str, Route]) -> list[Site]:
    """One site per route table, on a.test, b.test, ... sharing one free port."""
    hosts = list(IPS)[: len(routes)]
    port = free_port(*(IPS[h] for h in hosts))
    return [Site(h, IPS[h], port, table) for h, table in zip(hosts, routes, strict=True)]


def config(path: Path, served: Iterable[Site], defaults: dict[str, Any], **domains: dict[str, Any]) -> Path:
    served = list(served)
    body = {
        "defaults": {"retry_delays": [0.2], "sitemaps": False, **defaults},  # every request is counted
        "resolve": {s.host: s.ip for s in served},
        "allow_private_networks": True,
        "domains": {s.host: domains.get(s.host.replace(".", "_"), {}) for s in served},
    }
    path.write_text(yaml.safe_dump(body))
    return path


def rows(database_url: str) -> dict[str, dict[str, Any]]:
    """Every row by URL; fails on a duplicate."""
    engine = sa.create_engine(engine_url(database_url))
    try:
        with engine.connect() as conn:
            result = conn.execute(sa.text("SELECT url, final_url, status_code, error, title FROM pages"))
            found = [dict(r._mapping) for r in result]
    finally:
        engine.dispose()
    by_url = {r["url"]: r for r in found}
    assert len(by_url) == len(found), "duplicate rows"
    return by_url


def busiest_second(times: Iterable[float]) -> int:
    """The most requests the site saw in any window of one second."""
    ordered = sorted(times)
    return max((sum(1 for t in ordered[i:] if t < start + 1.0) for i, start in enumerate(ordered)), default=0)


async def crawl(settings: Settings, seeds: list[str], *argv: list[str]) -> None:
    """Seed, then run one consumer per argv to the end of the crawl (burst mode), all at once."""
    await seed(settings, *seeds)
    workers = [consumer(settings, "--burst", *args) for args in argv]
    await asyncio.to_thread(finish, *workers)


async def test_each_hop_of_a_chain_takes_its_own_token_with_two_consumers(
    tmp_path: Path, amqp_url: str, prefix: str, sqlite_url: str
) -> None:
    pages = range(1, 5)
    (site,) = sites(
        {
            "/": page("home", [f"/old/{i}" for i in pages]),
            **{f"/old/{i}": moved(f"/older/{i}") for i in pages},
            **{f"/older/{i}": moved(f"/moved/{i}", 302) for i in pages},
            **{f"/moved/{i}": page(f"moved {i}", []) for i in pages},
        }
    )
    path = config(tmp_path / "d.yaml", [site], {"rate": 2, "burst": 1})
    settings = settings_for(amqp_url, prefix, sqlite_url, path)
    with serve(site):
        await crawl(settings, [site.url()], [], [])
    # burst 1 + rate 2/s: at most 3 requests in any second, robots.txt and every hop included.
    # Following a chain inline under one token sent its three hops within milliseconds.
    assert busiest_second(t for t, _ in site.requests) <= 3, site.requests
    assert len(site.requests) == 2 + 3 * len(pages)  # robots.txt, the home page, every hop once
    stored = rows(sqlite_url)
    for i in pages:
        assert stored[site.url(f"/old/{i}")]["status_code"] == 301
        assert stored[site.url(f"/old/{i}")]["final_url"] == site.url(f"/older/{i}")
        assert stored[site.url(f"/older/{i}")]["status_code"] == 302
        assert stored[site.url(f"/older/{i}")]["final_url"] == site.url(f"/moved/{i}")
        assert stored[site.url(f"/moved/{i}")]["title"] == f"moved {i}"


async def test_a_redirect_to_a_page_already_seen_does_not_fetch_it_again(
    tmp_path: Path, amqp_url: str, prefix: str, sqlite_url: str
) -> None:
    (site,) = sites(
        {
            # /a is linked directly too; /b only through its trailing-slash spelling.
            "/": page("home", ["/a/", "/a", "/b/"]),
            "/a/": moved("/a"),
            "/a": page("a", []),
            "/b/": moved("/b"),
            "/b": page("b", ["/a/"]),
        }
    )
    settings = settings_for(amqp_url, prefix, sqlite_url, config(tmp_path / "d.yaml", [site], {"rate": 100}))
    with serve(site):
        await crawl(settings, [site.url()], [], [])
    assert (site.hits("/a"), site.hits("/b"), site.hits("/a/"), site.hits("/b/")) == (1, 1, 1, 1)
    stored = rows(sqlite_url)
    assert set(stored) == {site.url(p) for p in ("/", "/a/", "/a", "/b/", "/b")}
    assert stored[site.url("/a/")] | {"url": None} == {
        "url": None,
        "final_url": site.url("/a"),
        "status_code": 301,
        "error": None,
        "title": None,
    }
    with_content = [url for url, row in stored.items() if row["title"] in ("a", "b")]
    assert sorted(with_content) == [site.url("/a"), site.url("/b")]  # the only copies of their content


async def test_a_redirect_target_robots_txt_disallows_is_never_requested(
    tmp_path: Path, amqp_url: str, prefix: str, sqlite_url: str
) -> None:
    (site,) = sites(
        {
            "/robots.txt": Reply(
                200, b"User-agent: *\nDisallow: /private/\n", {"Content-Type": "text/plain"}
            ),
            "/": page("home", ["/r"]),
            "/r": moved("/private/x"),
            "/private/x": page("secret", []),
        }
    )
    settings = settings_for(amqp_url, prefix, sqlite_url, config(tmp_path / "d.yaml", [site], {"rate": 100}))
    with serve(site):
        await crawl(settings, [site.url()], [])
    assert site.hits("/private/x") == 0
    stored = rows(sqlite_url)
    assert stored[site.url("/r")]["final_url"] == site.url("/private/x")
    assert site.url("/private/x") not in stored  # skipped by robots.txt: counted, not stored


async def test_a_redirect_into_another_domain_is_fetched_from_its_queue_at_its_rate(
    tmp_path: Path, amqp_url: str, prefix: str, sqlite_url: str
) -> None:
    pages = range(6)
    a, b = sites({}, {f"/landing/{i}": page(f"landing {i}", []) for i in pages})
    a.routes = {"/": page("home", [f"/go/{i}" for i in pages])}
    a.routes |= {f"/go/{i}": moved(b.url(f"/landing/{i}")) for i in pages}
    path = config(tmp_path / "d.yaml", [a, b], {"rate": 100, "burst": 10}, b_test={"rate": 1, "burst": 1})
    settings = settings_for(amqp_url, prefix, sqlite_url, path)
    with serve(a, b):
        # Only a.test's consumer runs: b.test's pages wait in b.test's queue, untouched.
        await crawl(settings, [a.url()], ["--domains", "a.test"])
        assert b.requests == []
        assert await queue_depth(amqp_url, Names(prefix).domain_queue("b.test")) == len(pages)
        workers = [consumer(settings, "--burst") for _ in range(2)]
        await asyncio.to_thread(finish, *workers)
    assert all(b.hits(f"/landing/{i}") == 1 for i in pages)
    # b.test's own budget (burst 1 + rate 1/s), robots.txt included: at most 2 in any second.
    assert busiest_second(t for t, _ in b.requests) <= 2, b.requests
    stored = rows(sqlite_url)
    assert all(stored[a.url(f"/go/{i}")]["final_url"] == b.url(f"/landing/{i}") for i in pages)
    assert all(stored[b.url(f"/landing/{i}")]["title"] == f"landing {i}" for i in pages)


async def test_fifty_pages_redirecting_to_one_target_fetch_it_once(
    tmp_path: Path, amqp_url: str, prefix: str, sqlite_url: str
) -> None:
    sources = [f"/r/{i}" for i in range(50)]
    (site,) = sites({"/": page("home", sources), **{s: moved("/target") for s in sources}})
    site.routes["/target"] = page("target", [])
    path = config(tmp_path / "d.yaml", [site], {"rate": 1000, "burst": 100, "prefetch": 32})
    settings = settings_for(amqp_url, prefix, sqlite_url, path)
    with serve(site):
        await crawl(settings, [site.url()], [], [])
    assert site.hits("/target") == 1
    stored = rows(sqlite_url)
    assert all(stored[site.url(s)]["final_url"] == site.url("/target") for s in sources)
    assert stored[site.url("/target")]["title"] == "target"


async def test_max_redirects_and_loops_hold_across_routed_hops(
    tmp_path: Path, amqp_url: str, prefix: str, sqlite_url: str
) -> None:
    (site,) = sites(
        {
            "/": page("home", ["/hop/0", "/x"]),
            **{f"/hop/{i}": moved(f"/hop/{i + 1}") for i in range(10)},
            "/x": moved("/y"),  # /y is reached only through /x, and leads back to it
            "/y": moved("/x"),
        }
    )
    path = config(tmp_path / "d.yaml", [site], {"rate": 100, "max_redirects": 3})
    settings = settings_for(amqp_url, prefix, sqlite_url, path)
    with serve(site):
        await crawl(settings, [site.url()], [])
    stored = rows(sqlite_url)
    assert [site.hits(f"/hop/{i}") for i in range(6)] == [1, 1, 1, 1, 0, 0]
    assert stored[site.url("/hop/2")]["error"] is None
    assert stored[site.url("/hop/3")]["error"] == "more than 3 redirects"
    assert stored[site.url("/hop/3")]["final_url"] == site.url("/hop/4")
    assert stored[site.url("/y")]["error"] == f"redirect loop back to {site.url('/x')}"
    assert (site.hits("/x"), site.hits("/y")) == (1, 1)
