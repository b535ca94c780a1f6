from __future__ import annotations

from pathlib import Path

import pytest

from crawler.config import Rules
from crawler.frontier.traps import repeated_run, trap
from demo.site import Reply, Site, free_port, page, serve
from tests.support.crawls import rows, run_crawl
from tests.support.services import settings_for
from tests.support.sites import IPS, write_config


@pytest.mark.parametrize(
    ("path", "run"),
    [("a/b/a/b/a/b", 3), ("a/a", 2), ("x/y/z", 1), ("p/a/b/c/a/b/c", 2), ("", 1), ("a/b/c/a/b/c/a/b/c/d", 3)],
)
def test_repeated_run(path: str, run: int) -> None:
    assert repeated_run([s for s in path.split("/") if s]) == run


@pytest.mark.parametrize(
    ("url", "caught"),
    [
        ("http://s.test/a/b/c", False),
        ("http://s.test/a/b/a/b", False),  # twice is allowed by default
        ("http://s.test/a/b/a/b/a/b", True),
        ("http://s.test/x/x/x", True),
        ("http://s.test/" + "x" * 3000, True),
        ("http://s.test/" + "/".join(f"s{i}" for i in range(70)), True),
    ],
)
def test_trap(url: str, caught: bool) -> None:
    assert (trap(url, Rules()) is not None) is caught


def test_limits_come_from_the_rules() -> None:
    assert trap("http://s.test/a/b/a/b", Rules(max_path_repeats=1)) is not None
    assert trap("http://s.test/" + "x" * 100, Rules(max_url_length=64)) is not None


async def test_trap_sites_stop_at_the_limits(
    tmp_path: Path, amqp_url: str, prefix: str, sqlite_url: str
) -> None:
    """An endless calendar stops at max_depth; a self-nesting path stops at max_path_repeats."""
    port = free_port(IPS["a.test"])

    def calendar(path: str) -> Reply:
        month = int(path.rsplit("/", 1)[1])
        return page(f"month {month}", [f"/cal/{month + 1}", f"/cal/{month - 1}", "nest/"])

    class Endless(dict[str, object]):
        def get(self, path: str, default: object = None) -> object:
            if path.endswith("/nest/"):
                return page("nest", ["nest/"])
            if path.startswith("/cal/"):
                return lambda n: calendar(path)
            return default

    site = Site("a.test", IPS["a.test"], port, Endless())  # type: ignore[arg-type]
    config = write_config(tmp_path / "d.yaml", [site], max_depth=4, rate=1000, burst=100)
    settings = settings_for(amqp_url, prefix, sqlite_url, config)
    with serve(site):
        await run_crawl(settings, site.url("/cal/100"))
    urls = set(rows(sqlite_url))
    months = {int(u.rsplit("/", 1)[1]) for u in urls if "/cal/" in u and "nest" not in u}
    assert months == set(range(96, 105))  # four hops either way, then max_depth
    nested = [u for u in urls if "nest" in u]
    assert max(u.count("nest/") for u in nested) == 2  # /nest/nest/ ok, /nest/nest/nest/ a trap


async def test_max_pages_caps_a_domain_across_the_fleet(
    tmp_path: Path, amqp_url: str, prefix: str, sqlite_url: str
) -> None:
    port = free_port(IPS["a.test"])

    class Infinite(dict[str, object]):
        def get(self, path: str, default: object = None) -> object:
            n = int(path.rsplit("/", 1)[1] or 0) if path.startswith("/n/") else 0
            return page(f"n{n}", [f"/n/{n * 3 + i}" for i in range(1, 4)])

    site = Site("a.test", IPS["a.test"], port, Infinite())  # type: ignore[arg-type]
    config = write_config(tmp_path / "d.yaml", [site], max_pages=25, max_depth=50, rate=1000, burst=100)
    settings = settings_for(amqp_url, prefix, sqlite_url, config)
    with serve(site):
        await run_crawl(settings, site.url("/n/0"))
    assert len(rows(sqlite_url)) == 25
    assert len([p for _, p in site.requests if p != "/robots.txt"]) == 25
