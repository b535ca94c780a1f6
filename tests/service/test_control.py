"""The service layer through the command line: crawls get ids, can be shown, cancelled and deleted."""

from __future__ import annotations

import json
from pathlib import Path

from demo.site import serve
from tests.support.services import run, settings_for
from tests.support.sites import shops, write_config


def test_seed_prints_a_crawl_id_that_the_crawls_verbs_know(
    amqp_url: str, prefix: str, sqlite_url: str, tmp_path: Path
) -> None:
    sites = shops(products=1, hosts=["a.test"])
    settings = settings_for(amqp_url, prefix, sqlite_url, write_config(tmp_path / "d.yaml", sites))
    with serve(*sites):
        seeded = run("crawler", ["seed", sites[0].url("/"), "--label", "cli"], settings)
        assert seeded.returncode == 0, seeded.stderr
        crawl = seeded.stdout.strip().splitlines()[-1]
        shown = run("crawler", ["crawls", "show", crawl], settings)
        assert shown.returncode == 0, shown.stderr
        view = json.loads(shown.stdout)
        assert view["label"] == "cli" and view["state"] == "running"
        assert view["counts"]["a.test"]["pending"] == 1
        cancelled = run("crawler", ["crawls", "cancel", crawl], settings)
        assert cancelled.returncode == 0 and "cancelled" in cancelled.stdout, cancelled.stderr
        deleted = run("crawler", ["crawls", "delete", crawl], settings)
        assert deleted.returncode == 0, deleted.stderr
        missing = run("crawler", ["crawls", "show", crawl], settings)
        assert missing.returncode == 2 and "no crawl" in missing.stderr
        paused = run("crawler", ["domains", "pause", "a.test"], settings)
        assert paused.returncode == 0 and "a.test paused" in paused.stdout, paused.stderr
