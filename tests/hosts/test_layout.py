"""The host layout end to end: `crawler crawl` follows links to hosts no listed domain covers, within
`discover:`'s scope and caps, politely, in shard queues (crawler/frontier/hosts.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import sqlalchemy as sa
import yaml

from crawler.frontier.hosts import host_priority, shard_of
from crawler.names import DISCOVERED_LABEL
from crawler.settings import Settings
from crawler.sink.sql import engine_url
from demo.site import Site, free_port, page, serve
from tests.support.services import run, settings_for

LISTED = ("a.test", "127.0.0.21")


def sites(hosts: dict[str, tuple[str, dict[str, list[str]]]]) -> dict[str, Site]:
    """One site per host (`host: (ip, {path: links})`) on one free port; links are paths or
    `host/path` of another of these sites."""
    port = free_port(*(ip for ip, _ in hosts.values()))

    def href(link: str) -> str:
        host, _, path = link.partition("/")
        return f"http://{host}:{port}/{path}" if host in hosts else link

    return {
        host: Site(
            host, ip, port, {p: page(f"{host}{p}", [href(x) for x in links]) for p, links in paths.items()}
        )
        for host, (ip, paths) in hosts.items()
    }


def configure(path: Path, served: dict[str, Site], discover: dict[str, Any]) -> Path:
    """A domains.yaml listing a.test alone, resolving every site's host, discovering as `discover`."""
    config = {
        "defaults": {"retry_delays": [0.2, 0.4], "sitemaps": False},
        "resolve": {s.host: s.ip for s in served.values()},
        "allow_private_networks": True,
        "domains": {LISTED[0]: {}},
        "discover": discover,
    }
    path.write_text(yaml.safe_dump(config))
    return path


def stored(database_url: str) -> dict[str, str]:
    """URL -> domain of every page stored."""
    engine = sa.create_engine(engine_url(database_url))
    try:
        with engine.connect() as conn:
            return {r.url: r.domain for r in conn.execute(sa.text("SELECT url, domain FROM pages"))}
    finally:
        engine.dispose()


def only_crawl(settings: Settings) -> dict[str, Any]:
    listed = run("crawler", ["crawls", "list", "--json"], settings)
    assert listed.returncode == 0, listed.stderr
    crawls: list[dict[str, Any]] = [json.loads(line) for line in listed.stdout.splitlines()]
    [crawl] = crawls
    return crawl


def pages(site: Site) -> list[str]:
    """The paths `site` was asked for, in order, robots.txt aside."""
    return [p for _, p in site.requests if p != "/robots.txt"]


def test_links_to_hosts_in_scope_are_crawled_and_the_crawl_finishes(
    tmp_path: Path, amqp_url: str, prefix: str, sqlite_url: str
) -> None:
    served = sites(
        {
            "a.test": ("127.0.0.21", {"/": ["good.test/", "bad.test/"]}),
            "good.test": ("127.0.0.31", {"/": ["good.test/p1", "good.test/p2"], "/p1": [], "/p2": []}),
            "bad.test": ("127.0.0.32", {"/": ["bad.test/p1"], "/p1": []}),
        }
    )
    discover = {
        "follow": "all",
        "allow": [".test"],
        "deny": ["bad.test"],
        "shards": 4,
        "host": {"rate": 20, "burst": 5},
    }
    settings = settings_for(amqp_url, prefix, sqlite_url, configure(tmp_path / "d.yaml", served, discover))
    with serve(*served.values()):
        result = run("crawler", ["crawl", served["a.test"].url()], settings, timeout=60)
    assert result.returncode == 0, result.stderr
    good, bad = served["good.test"], served["bad.test"]
    assert stored(sqlite_url) == {
        served["a.test"].url(): "a.test",
        good.url(): "good.test",
        good.url("/p1"): "good.test",
        good.url("/p2"): "good.test",
    }
    assert bad.requests == []
    crawl = only_crawl(settings)
    assert crawl["state"] == "finished", crawl
    assert crawl["counts"][DISCOVERED_LABEL]["ok"] == 3
    assert crawl["counts"][DISCOVERED_LABEL]["pending"] == 0


def test_the_registered_domain_cap_and_max_pages_bound_discovery(
    tmp_path: Path, amqp_url: str, prefix: str, sqlite_url: str
) -> None:
    # Three hosts of one registered domain (shop.test) and a cap of two; each host has four pages
    # and max_pages 2.
    hosts: dict[str, tuple[str, dict[str, list[str]]]] = {
        "a.test": ("127.0.0.21", {"/": ["x.shop.test/", "y.shop.test/", "z.shop.test/"]})
    }
    for i, name in enumerate(["x", "y", "z"]):
        host = f"{name}.shop.test"
        hosts[host] = (
            f"127.0.0.{41 + i}",
            {"/": [f"{host}/1", f"{host}/2", f"{host}/3"], "/1": [], "/2": [], "/3": []},
        )
    served = sites(hosts)
    discover = {"follow": "all", "max_hosts_per_domain": 2, "host": {"max_pages": 2, "rate": 50, "burst": 5}}
    settings = settings_for(amqp_url, prefix, sqlite_url, configure(tmp_path / "d.yaml", served, discover))
    with serve(*served.values()):
        result = run("crawler", ["crawl", served["a.test"].url()], settings, timeout=60)
    assert result.returncode == 0, result.stderr
    asked = {h: pages(served[h]) for h in hosts if h != "a.test"}
    crawled = [h for h, paths in asked.items() if paths]
    assert len(crawled) == 2, asked  # the third host of shop.test is never asked
    for host in crawled:
        assert len(asked[host]) == 2, asked  # its index and one page: max_pages 2
    by_host = [url for url, domain in stored(sqlite_url).items() if domain in crawled]
    assert len(by_host) == 4
    crawl = only_crawl(settings)
    assert crawl["state"] == "finished", crawl


def test_a_slow_host_does_not_hold_up_another_host_of_its_shard(
    tmp_path: Path, amqp_url: str, prefix: str, sqlite_url: str
) -> None:
    slow_paths = [f"/{i}" for i in range(1, 7)]
    served = sites(
        {
            "a.test": ("127.0.0.21", {"/": ["slow.test/", "fast.test/"]}),
            "slow.test": (
                "127.0.0.51",
                {"/": [f"slow.test{p}" for p in slow_paths], **{p: [] for p in slow_paths}},
            ),
            "fast.test": ("127.0.0.52", {"/": ["fast.test/1", "fast.test/2"], "/1": [], "/2": []}),
        }
    )
    # One shard: both hosts' URLs in one queue, each host at 1 request a second; prefetch 1, so a
    # delivery waiting for its host's token would hold the whole shard.
    discover = {"follow": "all", "shards": 1, "host": {"rate": 1, "burst": 1}}
    settings = settings_for(amqp_url, prefix, sqlite_url, configure(tmp_path / "d.yaml", served, discover))
    with serve(*served.values()):
        result = run("crawler", ["crawl", "--prefetch", "1", served["a.test"].url()], settings, timeout=60)
    assert result.returncode == 0, result.stderr
    slow, fast = served["slow.test"], served["fast.test"]
    assert sorted(pages(slow)) == sorted(["/", *slow_paths])
    assert sorted(pages(fast)) == ["/", "/1", "/2"]
    # fast.test's pages were all fetched while slow.test still had pages to go.
    last_fast = max(when for when, p in fast.requests if p != "/robots.txt")
    slow_after = [p for when, p in slow.requests if when > last_fast and p != "/robots.txt"]
    assert len(slow_after) >= 2, (slow.requests, fast.requests)
    assert only_crawl(settings)["state"] == "finished"


def test_shards_and_priorities_are_stable() -> None:
    assert shard_of("good.test", 16) == shard_of("good.test", 16)
    assert {shard_of(f"h{i}.test", 4) for i in range(40)} == {0, 1, 2, 3}
    assert host_priority(0) > host_priority(1) > host_priority(3) >= host_priority(50) == 0
