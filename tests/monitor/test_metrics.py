"""The consumer's Prometheus metrics: names, arithmetic, the endpoint, and counts against the sink."""

from __future__ import annotations

import asyncio
import dataclasses
import re
import signal
import socket
import time
from collections import Counter as Tally
from pathlib import Path

import httpx
import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from crawler.config import load_config
from crawler.errors import ConfigError, ConnectFailed, FetchError, FetchTimeout, Refused, TooLarge
from crawler.frontier.router import Routed
from crawler.hosts.views import HostCounts
from crawler.monitor import endpoint, readings
from crawler.monitor.metrics import DomainStats, Metrics
from crawler.monitor.metrics.visits import error_kind, status_class
from crawler.sink.sql import migrate
from crawler.worker import wiring
from crawler.worker.watching import Monitoring
from demo.site import Reply, Site, serve
from tests.support import promtool
from tests.support.crawls import consumer, finish, seed, stored
from tests.support.services import settings_for
from tests.support.sites import reachable, shops, slow, write_config
from tests.support.wait import until

METRICS_DOC = Path(__file__).parents[2] / "docs" / "metrics.md"

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def parse(text: str) -> Samples:
    """Samples of an exposition text, keyed by name and labels."""
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def total(samples: Samples, name: str, **labels: str) -> float:
    """Sum of the samples called `name` whose labels include `labels`."""
    want = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and want <= ls)


def serve_metrics(metrics: Metrics, port: int = 0, max_beat_age: float = 30) -> endpoint.MetricsServer:
    """The worker's endpoint, as crawler.worker.watching serves it, on loopback."""
    return endpoint.serve(metrics.registry, port, "127.0.0.1", lambda: readings.health(metrics, max_beat_age))


def exercised() -> Metrics:
    """A Metrics with every method called once, so every family has a sample."""
    m = Metrics()
    m.observe_fetch("a.test", 0.2, 200, 1000)
    m.observe_fetch("a.test", 10.0, None, error=FetchTimeout("slow"))
    m.observe_outcome("a.test", "ok", 200)
    m.observe_extraction_failure("a.test", "price")
    m.observe_outcome("a.test", "skipped")
    m.observe_error("a.test", "internal")
    m.observe_outcome("a.test", "retried")
    m.observe_outcome("a.test", "dead", 503)
    m.observe_links(
        "a.test",
        Routed(published=["x", "y"], seen=3, out_of_scope=1, too_deep=1, traps=2, over_quota=4, invalid=1),
    )
    m.observe_rate_wait("a.test", 0.3)
    m.observe_ack_delay("commit", 0.002)
    m.observe_ack_frames(2, 1)
    m.observe_refresh("a.test", "not_modified")
    m.observe_version("a.test", "changed")
    m.observe_content("a.test", "refused", "encrypted")
    m.observe_sitemap_file("a.test", "read")
    m.observe_sitemap_url("a.test", "dropped", "other_host", 3)
    m.observe_archived("a.test", False, 9_000)
    m.observe_upload(9_000, 0.4)
    m.observe_upload_failed("NoSuchBucket")
    m.observe_uploads_waiting(1, 9_000)
    m.observe_webhook("hooks.example", "delivered")
    m.observe_webhook_seconds(0.05)
    m.add_credits("scraping-api", 2)
    m.message_started("a.test")
    m.observe_queue("crawler.domain.a.test", "domain", "a.test", 7, 2)
    m.beat(1_700_000_000.0)
    m.observe_hosts(HostCounts(known=3, active=2, waiting=1))
    m.coverage.coverage.labels("a.test", "all", "price").set(0.5)
    m.coverage.floor.labels("a.test", "all", "price").set(0.9)
    return m


@pytest.mark.parametrize(
    ("status", "expected"),
    [(200, "2xx"), (301, "3xx"), (404, "4xx"), (503, "5xx"), (None, "none"), (999, "none")],
)
def test_status_class(status: int | None, expected: str) -> None:
    assert status_class(status) == expected


@pytest.mark.parametrize(
    ("error", "status", "expected"),
    [
        (None, 200, None),
        (None, 302, None),
        (None, 404, "http_404"),
        (None, 503, "http_503"),
        (FetchTimeout("t"), None, "timeout"),
        (ConnectFailed("c"), None, "connect"),
        (TooLarge("big", status_code=200), 200, "too_large"),
        (Refused("r"), None, "refused"),
        (FetchError("other"), None, "fetch"),
    ],
)
def test_error_kind(error: FetchError | None, status: int | None, expected: str | None) -> None:
    assert error_kind(error, status) == expected


def test_two_metrics_objects_keep_apart() -> None:
    one, two = Metrics(), Metrics()  # a second registration in a shared registry would raise
    one.observe_outcome("a.test", "ok", 200)
    assert readings.totals(one, "a.test").done == 1
    assert readings.totals(two, "a.test").done == 0
    assert one.registry is not two.registry


def test_links_count_as_routed_dedup_hits_misses_and_drops() -> None:
    m = exercised()
    samples = parse(generate_latest(m.registry).decode())
    assert total(samples, "crawler_links_routed_total", domain="a.test") == 2
    assert total(samples, "crawler_dedup_misses_total", domain="a.test") == 2
    assert total(samples, "crawler_dedup_hits_total", domain="a.test") == 3
    assert total(samples, "crawler_links_dropped_total", domain="a.test") == 9
    assert total(samples, "crawler_errors_total", kind="timeout") == 1
    assert total(samples, "crawler_errors_total", kind="internal") == 1
    assert total(samples, "crawler_fetch_duration_seconds_count", domain="a.test") == 2
    assert total(samples, "crawler_fetched_bytes_total") == 1000
    assert total(samples, "crawler_credits_used_total", backend="scraping-api") == 2
    assert total(samples, "crawler_rate_wait_seconds_count", domain="a.test") == 1
    totals = readings.totals(m, "a.test")
    assert (totals.done, totals.errors, totals.retries, totals.dead, totals.inflight) == (2, 2, 1, 1, 1)
    assert totals.queued == 7
    m.message_done("a.test")
    assert readings.totals(m, "a.test").inflight == 0
    assert readings.totals(m, "b.test").queued is None


def test_every_reason_a_batch_drops_links_reaches_the_metric() -> None:
    reasons = [
        f.name
        for f in dataclasses.fields(Routed)
        if f.name not in ("published", "seen", "by_domain", "unconfirmed")
    ]
    assert sorted(Routed().dropped()) == sorted(reasons)  # a reason added to Routed must be counted
    for n, reason in enumerate(reasons, 1):
        m = Metrics(process=False)
        m.observe_links("a.test", Routed(**{reason: n}))  # type: ignore[arg-type]
        samples = parse(generate_latest(m.registry).decode())
        assert total(samples, "crawler_links_dropped_total", domain="a.test", reason=reason) == n, reason
        assert total(samples, "crawler_links_dropped_total") == n


def test_the_summary_and_the_progress_read_the_same_one_count_per_outcome() -> None:
    m = Metrics(process=False)
    for kind, status in [("ok", 200), ("ok", 200), ("failed", 404), ("dead", 503), ("retried", None)]:
        m.observe_outcome("a.test", kind, status)  # type: ignore[arg-type]
    m.observe_outcome("a.test", "invalid")
    m.observe_outcome("a.test", "skipped")
    assert readings.summary(m, ["a.test", "b.test"]) == {
        "a.test": DomainStats(ok=2, failed=2, retried=1, dead=1, invalid=1, skipped=1),
        "b.test": DomainStats(),
    }
    totals = readings.totals(m, "a.test")
    assert (totals.done, totals.failed, totals.retries, totals.dead) == (4, 2, 1, 2)
    samples = parse(generate_latest(m.registry).decode())
    assert total(samples, "crawler_pages_total", domain="a.test") == 4
    assert total(samples, "crawler_pages_total", domain="a.test", outcome="failed", status_class="5xx") == 1
    assert total(samples, "crawler_dead_letters_total", domain="a.test", reason="invalid") == 1


def test_exported_names_are_what_the_endpoint_shows() -> None:
    m = exercised()
    shown = {name for name, _ in parse(generate_latest(m.registry).decode())}
    assert shown <= readings.exported_names(m.registry)
    crawler_shown = {n for n in shown if n.startswith("crawler_")}
    crawler_exported = {n for n in readings.exported_names(m.registry) if n.startswith("crawler_")}
    assert crawler_shown == crawler_exported


def test_metric_names_follow_prometheus_conventions() -> None:
    result = promtool.run("check", "metrics", stdin=generate_latest(exercised().registry).decode())
    assert result.returncode == 0, result.stdout + result.stderr
    assert not (result.stdout + result.stderr).strip(), result.stdout + result.stderr


def test_the_metrics_doc_lists_exactly_the_exported_metrics() -> None:
    text = METRICS_DOC.read_text()
    section = text.split("## Every metric", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"^\| `(crawler_\w+)`", section, re.M))
    families = {
        f.name + ("_total" if f.type == "counter" else "")
        for f in exercised().registry.collect()
        if f.name.startswith("crawler_")
    }
    assert listed == families


def test_the_ack_delay_quantile_is_read_from_the_histogram_as_prometheus_does() -> None:
    metrics = Metrics(process=False)
    assert readings.ack_delay_quantile(metrics, 0.99, "commit") == (0, None)
    for _ in range(98):
        metrics.observe_ack_delay("commit", 0.0003)  # the first bucket: up to 0.5 ms
    metrics.observe_ack_delay("commit", 0.0012)  # 1-1.5 ms
    metrics.observe_ack_delay("commit", 7.0)  # 5-7.5 s
    metrics.observe_ack_delay("retry", 0.004)  # 3-5 ms
    assert readings.ack_delay_quantile(metrics, 0.5, "commit") == (100, pytest.approx(0.0005 * 50 / 98))
    assert readings.ack_delay_quantile(metrics, 0.99, "commit") == (100, pytest.approx(0.0015))
    assert readings.ack_delay_quantile(metrics, 1.0, "commit") == (100, pytest.approx(7.5))
    assert readings.ack_delay_quantile(metrics, 0.99, "retry") == (1, pytest.approx(0.003 + 0.002 * 0.99))
    metrics.observe_ack_delay("retry", 99.0)  # past the last bound: that bound is all that is known
    assert readings.ack_delay_quantile(metrics, 1.0, "retry") == (2, 30.0)


def test_health_is_the_age_of_the_last_heartbeat() -> None:
    m = Metrics(process=False)
    assert readings.health(m, 30, now=1000.0) == (False, "no heartbeat yet")
    m.beat(990.0)
    assert readings.health(m, 30, now=1000.0)[0]
    assert not readings.health(m, 5, now=1000.0)[0]


async def test_healthz_answers_503_until_the_worker_beats_then_200_while_fresh() -> None:
    m = Metrics(process=False)
    server = serve_metrics(m, max_beat_age=30)
    url = f"http://127.0.0.1:{server.port}"
    try:
        async with httpx.AsyncClient(trust_env=False) as client:
            assert (await client.get(f"{url}/healthz")).status_code == 503
            m.beat(time.time())
            resp = await client.get(f"{url}/healthz")
            assert resp.status_code == 200, resp.text
            assert resp.text.startswith("ok: last heartbeat")
            m.beat(time.time() - 60)  # a stuck event loop stops beating; the server thread still answers
            assert (await client.get(f"{url}/healthz")).status_code == 503
            assert (await client.get(f"{url}/metrics")).status_code == 200
    finally:
        server.close()


def test_the_frontier_gauge_holds_the_summed_depth() -> None:
    m = Metrics(process=False)
    m.observe_frontier(12)
    assert m.registry.get_sample_value("crawler_frontier_messages_ready") == 12


def page_requests(site: Site) -> list[str]:
    """Paths the crawler fetched from `site` as pages (robots.txt is not a page)."""
    return [path for _, path in site.requests if path != "/robots.txt"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


async def test_the_endpoint_serves_the_registry_and_refuses_a_taken_port() -> None:
    m = exercised()
    server = serve_metrics(m)
    try:
        async with httpx.AsyncClient(trust_env=False) as client:
            resp = await client.get(f"http://127.0.0.1:{server.port}/metrics")
        assert resp.status_code == 200
        assert (
            total(parse(resp.text), "crawler_pages_total", domain="a.test") == 2
        )  # the ok page and the dead one
        with pytest.raises(ConfigError, match="--metrics-port"):
            serve_metrics(Metrics(), server.port)
    finally:
        server.close()


async def test_counts_of_a_crawl_match_the_sink_retries_and_dead_letters_included(
    tmp_path: Path, amqp_url: str, prefix: str, sqlite_url: str
) -> None:
    sites = shops(products=8, hosts=["a.test"])
    sites[0].routes["/flaky"] = Reply(503, b"<html>busy</html>")
    settings = settings_for(amqp_url, prefix, sqlite_url, write_config(tmp_path / "d.yaml", sites))
    config = load_config(settings.config_path)
    metrics = Metrics()
    with serve(*sites):
        stats = (
            await wiring.consume(
                settings,
                config,
                burst=True,
                seeds=[sites[0].url(), sites[0].url("/flaky")],
                monitoring=Monitoring(metrics=metrics, sample_every=0.2),
            )
        ).stats
    samples = parse(generate_latest(metrics.registry).decode())
    rows = stored(sqlite_url)
    by_class = Tally(status_class(status) for _, status, _ in rows)
    assert total(samples, "crawler_pages_total") == len(rows) == len(reachable(sites))
    for cls, n in by_class.items():
        assert total(samples, "crawler_pages_total", status_class=cls) == n
    assert total(samples, "crawler_pages_total", outcome="failed") == sum(1 for r in rows if r[2])
    # /flaky: three tries (retry_delays has two), two retries, then the dead queue.
    assert total(samples, "crawler_errors_total", kind="http_503") == 3
    assert total(samples, "crawler_retries_total") == 2 == stats["a.test"].retried
    assert total(samples, "crawler_dead_letters_total", reason="exhausted") == 1 == stats["a.test"].dead
    assert total(samples, "crawler_fetch_duration_seconds_count") == len(page_requests(sites[0]))
    assert total(samples, "crawler_rate_wait_seconds_count") == len(page_requests(sites[0]))
    assert total(samples, "crawler_dedup_misses_total") == len(rows) - 2  # all but the two seeds
    assert total(samples, "crawler_inflight_messages") == 0
    assert total(samples, "crawler_heartbeat_timestamp_seconds") > 0
    # Every stored page's ack timed from its commit, every retry's from its copy's confirm.
    assert total(samples, "crawler_ack_delay_seconds_count", after="commit") == len(rows)
    assert total(samples, "crawler_ack_delay_seconds_count", after="retry") == 2


async def scrape(port: int) -> Samples | None:
    """The worker's metrics, or None while its endpoint is not up yet."""
    try:
        async with httpx.AsyncClient(trust_env=False, timeout=5) as client:
            resp = await client.get(f"http://127.0.0.1:{port}/metrics")
    except httpx.TransportError:
        return None
    return parse(resp.text) if resp.status_code == 200 else None


async def test_scraping_a_worker_during_a_crawl_matches_the_pages_stored(
    tmp_path: Path, amqp_url: str, prefix: str, database_url: str
) -> None:
    sites = shops(products=15)
    for site in sites:
        slow(site, 0.01)
    settings = settings_for(amqp_url, prefix, database_url, write_config(tmp_path / "d.yaml", sites))
    port = _free_port()
    expected = reachable(sites)
    await asyncio.to_thread(migrate, database_url)  # so the test can count rows from the start
    with serve(*sites):
        await seed(settings, *(s.url() for s in sites))
        worker = consumer(
            settings, "--metrics-port", str(port), "--metrics-addr", "127.0.0.1", "--prefetch", "4"
        )
        try:

            async def look() -> tuple[Samples | None, list[tuple[str, int | None, str | None]]]:
                samples = await scrape(port)
                rows = await asyncio.to_thread(stored, database_url)  # after the scrape
                if samples is not None:
                    # Mid-crawl too: a page is counted once its row is committed, never before.
                    for site in sites:
                        counted = total(samples, "crawler_pages_total", domain=site.host)
                        assert counted <= sum(1 for r in rows if site.host in r[0])
                return samples, rows

            def drained(seen: tuple[Samples | None, list[tuple[str, int | None, str | None]]]) -> bool:
                samples, _ = seen
                return (
                    samples is not None
                    and total(samples, "crawler_pages_total") == len(expected)
                    and total(samples, "crawler_inflight_messages") == 0
                )

            samples, rows = await until(look, drained, within=90, what="the crawl to finish")
            assert samples is not None
            assert sorted(r[0] for r in rows) == sorted(expected)
            for site in sites:
                host = site.host
                ok = sum(1 for r in rows if host in r[0] and r[1] == 200)
                assert (
                    total(samples, "crawler_pages_total", domain=host, status_class="2xx", outcome="ok") == ok
                )
                assert total(samples, "crawler_pages_total", domain=host, status_class="4xx") == 1
                assert total(samples, "crawler_errors_total", domain=host, kind="http_404") == 1
                fetches = len(page_requests(site))
                assert total(samples, "crawler_fetch_duration_seconds_count", domain=host) == fetches
                assert total(samples, "crawler_fetched_bytes_total", domain=host) > 0
            routed = total(samples, "crawler_links_routed_total")
            assert routed == total(samples, "crawler_dedup_misses_total") == len(expected) - len(sites)
            assert total(samples, "crawler_dedup_hits_total") > 0
            # Queue depths are sampled every few seconds: the domain queues end up empty.
            final = await until(
                lambda: scrape(port),
                lambda s: (
                    s is not None
                    and all(
                        total(s, "crawler_queue_messages_ready", kind="domain", domain=site.host) == 0
                        and total(s, "crawler_queue_consumers", kind="domain", domain=site.host) == 1
                        for site in sites
                    )
                ),
                within=30,
                what="sampled queue depths of 0",
            )
            assert final is not None and total(final, "crawler_heartbeat_timestamp_seconds") > 0
        finally:
            worker.send_signal(signal.SIGTERM)
            await asyncio.to_thread(finish, worker)


def test_worker_and_scheduler_metrics_listen_on_loopback_unless_told() -> None:
    from crawler.cli import build_consume_parser
    from crawler.scheduler.cli import build_parser as scheduler_parser
    from crawler.worker.watching import Monitoring

    consume = build_consume_parser().parse_args(["--metrics-port", "9410"])
    scheduler = scheduler_parser().parse_args(["--metrics-port", "9411"])
    assert consume.metrics_addr == scheduler.metrics_addr == Monitoring().addr == "127.0.0.1"
    server = endpoint.serve(Metrics().registry, 0, consume.metrics_addr, lambda: (True, "ok"))
    try:
        with socket.create_connection(("127.0.0.1", server.port), timeout=5):
            pass
        # Another address of this machine (a loopback alias here; a LAN address in production).
        with pytest.raises(OSError), socket.create_connection(("127.0.0.2", server.port), timeout=5):
            pass
    finally:
        server.close()
    # Told otherwise, as deploy/ does inside its containers.
    told = build_consume_parser().parse_args(["--metrics-port", "9410", "--metrics-addr", "0.0.0.0"])
    assert told.metrics_addr == "0.0.0.0"
