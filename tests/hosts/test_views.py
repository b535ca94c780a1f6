"""Discovered hosts in aggregate: never a metrics label or a status row per host; counts and the top
hosts from bounded sets per crawl (crawler/hosts/views.py)."""

from __future__ import annotations

import json
from pathlib import Path

from prometheus_client import generate_latest
from redis.asyncio import Redis

from crawler.config import load_config
from crawler.frontier.crawls import CrawlState
from crawler.hosts import HostCaps
from crawler.hosts.views import HostCounts, TopHost, host_counts
from crawler.monitor.metrics import Metrics
from crawler.monitor.sampler import sampled_queues
from crawler.monitor.status import render
from crawler.names import DISCOVERED_LABEL, HOST_WAITS, Names
from demo.site import serve
from tests.hosts.test_layout import configure, only_crawl, sites
from tests.support import api as api_support
from tests.support.services import run, settings_for

HOSTS = ("h1.test", "h2.test", "h3.test")


async def test_counts_and_top_hosts_follow_the_crawl_counts(redis: Redis, prefix: str) -> None:
    names = Names(prefix)
    caps, state = HostCaps(redis, names), CrawlState(redis, names)
    await caps.admit(list(HOSTS), max_hosts=100, per_domain=100, crawl="c1")
    await redis.sadd(names.host_crawls_key, "c1")
    # h1 routed 5, h2 3, h3 1, and a listed domain 7: only admitted hosts are in the views.
    routed = {("h1.test", "routed"): 5, ("h2.test", "routed"): 3, ("h3.test", "routed"): 1}
    await state.count("c1", {**routed, ("a.test", "routed"): 7})
    counts = await host_counts(redis, names)
    assert (counts.known, counts.active, counts.waiting, counts.crawls) == (3, 0, 0, 1)
    assert counts.top == [TopHost("h1.test", 5), TopHost("h2.test", 3), TopHost("h3.test", 1)]
    # h3's page stored, one of h1's waiting for its host, two of h2's stored.
    await state.count("c1", {("h3.test", "ok"): 1, ("h1.test", "retrying"): 1, ("h2.test", "failed"): 2})
    counts = await host_counts(redis, names, top=2)
    assert (counts.known, counts.active, counts.waiting) == (3, 2, 1)
    assert counts.top == [TopHost("h1.test", 5), TopHost("h2.test", 1)]  # waiting ones still queued
    assert await redis.zscore(names.for_crawl("c1").hosts_queued_key, "h3.test") is None
    assert await redis.ttl(names.for_crawl("c1").hosts_queued_key) > 0
    # h1's URL back from waiting and stored: no host waits.
    await state.count("c1", {("h1.test", "retrying"): -1, ("h1.test", "ok"): 1})
    assert (await host_counts(redis, names)).waiting == 0
    # The crawl's counts and series hold the hosts as one domain, however many there are.
    counts = await state.counts("c1")
    assert sorted(counts) == ["a.test", DISCOVERED_LABEL]
    assert counts[DISCOVERED_LABEL] == {**counts["a.test"], "routed": 9, "ok": 2, "failed": 2}
    assert {span.domain for span in await state.series("c1")} == {DISCOVERED_LABEL}
    assert not [f for f in await redis.hkeys(names.crawl_counts_key("c1")) if f.startswith(b"h")]
    # A cancelled crawl is not counted; a forgotten one leaves the list.
    await state.cancel("c1")
    assert await host_counts(redis, names) == HostCounts()
    await redis.srem(names.cancelled_key, "c1")
    await state.forget("c1")
    assert await host_counts(redis, names) == HostCounts()
    assert not await redis.sismember(names.host_crawls_key, "c1")


def test_discovered_hosts_share_one_label_and_their_queues_are_sampled(tmp_path: Path) -> None:
    served = sites({"a.test": ("127.0.0.21", {"/": []})})
    config = load_config(str(configure(tmp_path / "d.yaml", served, {"follow": "all", "shards": 4})))
    metrics = Metrics(process=False)
    metrics.fold_domains(config.discovered, lambda domain: False)
    for host in HOSTS:
        metrics.observe_outcome(host, "ok", 200)
        metrics.observe_fetch(host, 0.1, 200, 10)
        metrics.message_started(host)
    metrics.observe_outcome("a.test", "ok", 200)
    metrics.observe_hosts(HostCounts(known=3, active=2, waiting=1, parked=0))
    text = generate_latest(metrics.registry).decode()
    assert not any(host in text for host in HOSTS)
    assert f'crawler_pages_total{{domain="{DISCOVERED_LABEL}",outcome="ok",status_class="2xx"}} 3.0' in text
    assert 'crawler_pages_total{domain="a.test",outcome="ok",status_class="2xx"} 1.0' in text
    assert f'crawler_inflight_messages{{domain="{DISCOVERED_LABEL}"}} 3.0' in text
    assert 'crawler_discovered_hosts{state="known"} 3.0' in text
    assert 'crawler_discovered_hosts{state="waiting"} 1.0' in text
    hosts = [q for q in sampled_queues(config, Names("p"), ["a.test"]) if q.domain == DISCOVERED_LABEL]
    assert [q.kind for q in hosts] == ["host_shard"] * 4 + ["host_wait"] * len(HOST_WAITS)


def test_status_and_the_api_show_discovered_hosts_in_one_summary(
    tmp_path: Path, amqp_url: str, prefix: str, sqlite_url: str
) -> None:
    served = sites(
        {
            "a.test": ("127.0.0.21", {"/": [f"{h}/" for h in HOSTS]}),
            **{h: (f"127.0.0.{61 + i}", {"/": [f"{h}/1"], "/1": []}) for i, h in enumerate(HOSTS)},
        }
    )
    discover = {"follow": "all", "shards": 2, "host": {"rate": 50, "burst": 5}}
    settings = settings_for(amqp_url, prefix, sqlite_url, configure(tmp_path / "d.yaml", served, discover))
    with serve(*served.values()):
        result = run("crawler", ["crawl", served["a.test"].url()], settings, timeout=60)
    assert result.returncode == 0, result.stderr
    assert only_crawl(settings)["state"] == "finished"
    # The crawl's summary reads its metrics: one row for the discovered hosts.
    assert DISCOVERED_LABEL in result.stdout and not any(h in result.stdout for h in HOSTS), result.stdout
    status = run("crawler", ["status", "--json"], settings)
    assert status.returncode == 0, status.stderr
    data = json.loads(status.stdout)
    hosts = data["discovered"]
    assert (hosts["follow"], hosts["known"], hosts["waiting"], hosts["crawls"]) == (True, 3, 0, 1)
    assert hosts["active"] == 3  # each stored a page within the last minute
    assert hosts["top"] == []  # nothing left queued
    assert hosts["shards"]["name"] == "2 shards" and hosts["shards"]["ready"] == 0
    assert [d["domain"] for d in data["domains"]] == ["a.test"]
    text = render(data)
    assert "discovered hosts: 3 known, 3 active, 0 waiting, 0 parked" in text
    assert f"{DISCOVERED_LABEL} (2 shards)" in text and not any(h in text for h in HOSTS)
    with api_support.running(settings) as api, api.client() as client:
        listed = client.get("/v1/domains").json()
    assert [d["domain"] for d in listed["domains"]] == ["a.test"]
    assert listed["discovered"]["known"] == 3 and listed["discovered"]["top"] == []
