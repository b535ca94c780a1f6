"""Seeds on discovered hosts: with `discover: follow: all`, a seed whose host no listed domain covers
is taken if the host is in scope, and crawled in its shard."""

from __future__ import annotations

from pathlib import Path

import pytest

from crawler.config import load_config
from crawler.errors import BadURL
from crawler.names import DISCOVERED_LABEL
from crawler.worker.wiring import check_seeds
from demo.site import serve
from tests.hosts.test_layout import configure, only_crawl, sites, stored
from tests.support.services import run, settings_for

DISCOVER = {"follow": "all", "allow": [".test"], "deny": ["bad.test"], "host": {"rate": 20, "burst": 5}}


def test_a_seed_on_a_host_in_scope_is_taken_and_one_out_of_it_refused(tmp_path: Path) -> None:
    served = sites({"a.test": ("127.0.0.21", {"/": []})})
    config = load_config(configure(tmp_path / "d.yaml", served, DISCOVER))
    assert check_seeds(config, ["http://Good.test/x", "http://a.test/"]) == [
        "http://good.test/x",
        "http://a.test/",
    ]
    with pytest.raises(BadURL, match="out of the scope of `discover:`"):
        check_seeds(config, ["http://bad.test/"])
    with pytest.raises(BadURL, match="out of the scope"):
        check_seeds(config, ["http://good.example/"])  # not within allow
    none = load_config(configure(tmp_path / "none.yaml", served, {"follow": "none"}))
    with pytest.raises(BadURL, match="in no domain of domains"):
        check_seeds(none, ["http://good.test/"])


def test_crawl_from_a_seed_on_a_discovered_host(
    tmp_path: Path, amqp_url: str, prefix: str, sqlite_url: str
) -> None:
    served = sites(
        {
            "a.test": ("127.0.0.21", {"/": []}),
            "good.test": ("127.0.0.31", {"/": ["good.test/p1", "good.test/p2"], "/p1": [], "/p2": []}),
        }
    )
    settings = settings_for(amqp_url, prefix, sqlite_url, configure(tmp_path / "d.yaml", served, DISCOVER))
    good = served["good.test"]
    with serve(*served.values()):
        result = run("crawler", ["crawl", good.url()], settings, timeout=60)
    assert result.returncode == 0, result.stderr
    assert stored(sqlite_url) == {
        good.url(): "good.test",
        good.url("/p1"): "good.test",
        good.url("/p2"): "good.test",
    }
    assert served["a.test"].requests == []
    crawl = only_crawl(settings)
    assert crawl["state"] == "finished", crawl
    assert crawl["counts"][DISCOVERED_LABEL]["ok"] == 3
