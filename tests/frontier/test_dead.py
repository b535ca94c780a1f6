"""`crawler dead list|replay|purge` against a real dead queue."""

from __future__ import annotations

import json
from pathlib import Path

from demo.site import Reply, Site, free_port, page, serve
from tests.support.crawls import dead_letters, rows, run_crawl
from tests.support.services import run, settings_for
from tests.support.sites import IPS, write_config


def broken_sites() -> list[Site]:
    port = free_port(IPS["a.test"], IPS["b.test"])
    a = Site(
        "a.test",
        IPS["a.test"],
        port,
        {"/": page("a", ["/down", "/down2"]), "/down": Reply(500), "/down2": Reply(502)},
    )
    b = Site("b.test", IPS["b.test"], port, {"/": page("b", ["/down"]), "/down": Reply(503)})
    return [a, b]


async def test_list_replay_and_purge(tmp_path: Path, amqp_url: str, prefix: str, sqlite_url: str) -> None:
    a, b = broken_sites()
    settings = settings_for(
        amqp_url, prefix, sqlite_url, write_config(tmp_path / "d.yaml", [a, b], retry_delays=[0.1])
    )
    with serve(a, b):
        await run_crawl(settings, a.url(), b.url())
        assert len(await dead_letters(settings)) == 3

        listed = run("crawler", ["dead", "list", "--json"], settings)
        assert listed.returncode == 0, listed.stderr
        letters = [json.loads(line) for line in listed.stdout.splitlines()]
        assert sorted(x["url"] for x in letters) == sorted([a.url("/down"), a.url("/down2"), b.url("/down")])
        assert {x["reason"] for x in letters} == {"transient"}
        assert {x["attempts"] for x in letters} == {2}
        assert {x["status"] for x in letters} == {500, 502, 503}
        only_a = run("crawler", ["dead", "list", "--domain", "a.test", "--limit", "1"], settings)
        assert only_a.returncode == 0 and len(only_a.stdout.splitlines()) == 1
        assert "HTTP 50" in only_a.stdout

        # The site recovers: replaying a.test's letters lets them finish; b.test's stay dead.
        a.routes["/down"] = page("up", [])
        a.routes["/down2"] = page("up2", [])
        replayed = run("crawler", ["dead", "replay", "--domain", "a.test"], settings)
        assert replayed.returncode == 0, replayed.stderr
        assert "2 dead letters replayed" in replayed.stdout
        await run_crawl(settings)
    stored = rows(sqlite_url)
    assert stored[a.url("/down")] == (200, None, 1)  # attempts start afresh
    assert stored[a.url("/down2")] == (200, None, 1)
    remaining = await dead_letters(settings)
    assert [json.loads(m.body)["url"] for m in remaining] == [b.url("/down")]

    refused = run("crawler", ["dead", "purge"], settings)  # no --yes, no terminal: nothing deleted
    assert refused.returncode == 2
    assert len(await dead_letters(settings)) == 1
    purged = run("crawler", ["dead", "purge", "--domain", "b.test", "--yes"], settings)
    assert purged.returncode == 0 and "1 dead letters purged" in purged.stdout
    assert await dead_letters(settings) == []
