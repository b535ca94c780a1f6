"""DNS in a real crawl: names resolved by a dnsmasq of the test's own through the fleet's cache, the
guard on what they resolve to, DNS failures, and the budget hosts on one address share (`per_ip:`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import sqlalchemy as sa
import yaml

from bench.dnsmasq import NameServer
from bench.politeness import Rate, excess
from crawler.sink.sql import engine_url
from demo.site import Site, free_port, page, serve
from tests.support.services import run, settings_for

A, B = "127.0.0.21", "127.0.0.22"  # a.test's address; b.test's and www.b.test's (tests/support/dnsmasq.py)


def configure(path: Path, nameserver: NameServer, **more: Any) -> Path:
    """A domains.yaml listing a.test, discovering .test hosts, resolving every name by `nameserver`."""
    config = {
        "defaults": {"retry_delays": [0.2, 0.4], "sitemaps": False},
        # No `resolve:` map and no allow_private_networks: every name goes to dnsmasq, and the guard
        # lets through loopback alone.
        "allow_networks": ["127.0.0.0/8"],
        "max_retry_after": 2,
        "domains": {"a.test": {}},
        "discover": {"follow": "all", "allow": [".test"], "host": {"rate": 50, "burst": 5}},
        **more,
    }
    config["dns"] = {"nameservers": [nameserver.spelled], **config.get("dns", {})}
    path.write_text(yaml.safe_dump(config))
    return path


def rows(database_url: str) -> dict[str, tuple[str | None, int]]:
    """URL -> (error, attempts) of every page stored."""
    engine = sa.create_engine(engine_url(database_url))
    try:
        with engine.connect() as conn:
            found = conn.execute(sa.text("SELECT url, error, attempts FROM pages"))
            return {r.url: (r.error, r.attempts) for r in found}
    finally:
        engine.dispose()


def test_names_resolve_through_the_nameservers_and_dns_failures_are_page_errors(
    tmp_path: Path, amqp_url: str, prefix: str, sqlite_url: str, nameserver: NameServer
) -> None:
    port = free_port(A, B)
    links = [f"http://{h}:{port}/" for h in ("b.test", "nope.test", "evil.test", "x.refused.test")]
    a = Site("a.test", A, port, {"/": page("a", links)})
    b = Site("b.test", B, port, {"/": page("b", ["/p1"]), "/p1": page("b1", [])})
    dns = {"backoff": 0.1, "max_backoff": 0.2}
    path = configure(tmp_path / "d.yaml", nameserver, dns=dns)
    settings = settings_for(amqp_url, prefix, sqlite_url, path)
    with serve(a, b):
        result = run("crawler", ["crawl", a.url()], settings, timeout=60)
    assert result.returncode == 0, result.stderr
    stored = rows(sqlite_url)
    assert stored[a.url()] == (None, 1)
    assert stored[b.url()] == (None, 1) and stored[b.url("/p1")] == (None, 1)
    # NXDOMAIN: a page error of its own, stored once and never retried; the name asked once.
    error, attempts = stored[f"http://nope.test:{port}/"]
    assert error is not None and "nope.test: no such host (NXDOMAIN)" in error
    assert attempts == 1
    assert nameserver.queries("nope.test") == 1
    # The guard judges what the name resolves to.
    error, attempts = stored[f"http://evil.test:{port}/"]
    assert error is not None and "evil.test resolves to 169.254.169.254" in error, error
    assert attempts == 1
    # A name server that fails is asked again, with back-off, until the page's retries are used up.
    error, attempts = stored[f"http://x.refused.test:{port}/"]
    assert error is not None and "REFUSED" in error, error
    assert attempts == 3
    assert nameserver.queries("x.refused.test") >= 2
    # Each name resolved once for the whole crawl (dnsmasq's TTL is 600 s).
    assert nameserver.queries("a.test") == nameserver.queries("b.test") == 1


def test_hosts_on_one_address_share_its_per_ip_budget(
    tmp_path: Path, amqp_url: str, prefix: str, sqlite_url: str, nameserver: NameServer
) -> None:
    port = free_port(A, B)
    hosts = ("b.test", "www.b.test")  # one address, 127.0.0.22: one server answers both
    a = Site("a.test", A, port, {"/": page("a", [f"http://{h}:{port}/" for h in hosts])})
    paths = [f"/p{i}" for i in range(1, 5)]
    routes: dict[str, Any] = {"/": page("b", paths), **{p: page(p, []) for p in paths}}
    b = Site("b.test", B, port, routes)
    per_ip = Rate(rate=4, burst=1)  # each host alone may go at 50 a second
    path = configure(tmp_path / "d.yaml", nameserver, per_ip={"rate": per_ip.rate, "burst": per_ip.burst})
    settings = settings_for(amqp_url, prefix, sqlite_url, path)
    with serve(a, b):
        result = run("crawler", ["crawl", a.url()], settings, timeout=60)
    assert result.returncode == 0, result.stderr
    assert all(error is None for error, _ in rows(sqlite_url).values())
    times = [when for when, _ in b.requests]
    assert len(times) == 2 * (1 + 1 + len(paths))  # robots.txt and five pages, on each host
    assert excess(times, per_ip) == 0, sorted(t - min(times) for t in times)


def test_a_sitemap_read_takes_its_address_token_too(
    tmp_path: Path, amqp_url: str, prefix: str, sqlite_url: str, nameserver: NameServer
) -> None:
    port = free_port(B)
    paths = [f"/p{i}" for i in range(1, 4)]
    routes: dict[str, Any] = {"/": page("b", paths), **{p: page(p, []) for p in paths}}
    b = Site("b.test", B, port, routes)
    per_ip = Rate(rate=4, burst=1)  # the domain alone may go at 50 a second
    path = configure(
        tmp_path / "d.yaml",
        nameserver,
        domains={"b.test": {"rate": 50, "burst": 5, "sitemaps": "auto"}},
        per_ip={"rate": per_ip.rate, "burst": per_ip.burst},
    )
    settings = settings_for(amqp_url, prefix, sqlite_url, path)
    with serve(b):
        result = run("crawler", ["crawl", b.url()], settings, timeout=60)
    assert result.returncode == 0, result.stderr
    requested = sorted(p for _, p in b.requests)
    assert requested == sorted(["/robots.txt", "/sitemap.xml", "/", *paths]), requested
    times = [when for when, _ in b.requests]
    assert excess(times, per_ip) == 0, sorted((t - min(times), p) for t, p in b.requests)
