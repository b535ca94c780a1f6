"""Test sites on loopback and the domains.yaml that crawls them."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

from demo.site import Reply, Route, Site, free_port, shop

IPS = {"a.test": "127.0.0.21", "b.test": "127.0.0.22", "c.test": "127.0.0.23"}


def shops(products: int, hosts: Iterable[str] = IPS) -> list[Site]:
    """One demo shop per host, all on one free port, linking to each other."""
    hosts = list(hosts)
    port = free_port(*(IPS[h] for h in hosts))
    return [shop(h, IPS[h], port, products, [o for o in hosts if o != h]) for h in hosts]


def reachable(sites: Iterable[Site]) -> set[str]:
    """Canonical URLs of every page a full crawl of `sites` stores (including each 404)."""
    return {site.url(path) for site in sites for path in [*site.routes, "/missing"]}


def write_config(
    path: Path, sites: Iterable[Site], frontier: dict[str, Any] | None = None, **defaults: Any
) -> Path:
    """A domains.yaml crawling `sites` on loopback; `defaults` override the crawl defaults, `frontier`
    is its frontier section. These sites publish no sitemaps, and the tests count their requests: none
    is looked for unless asked."""
    sites = list(sites)
    config: dict[str, Any] = {
        "defaults": {"retry_delays": [0.2, 0.4], "sitemaps": False, **defaults},
        "resolve": {s.host: s.ip for s in sites},
        "allow_private_networks": True,
        "max_retry_after": 5,
        "domains": {s.host: {"extract": {"title": "h1", "price": ".price"}} for s in sites},
    }
    if frontier is not None:
        config["frontier"] = frontier
    path.write_text(yaml.safe_dump(config))
    return path


def slow(site: Site, seconds: float) -> None:
    """Make every page of `site` take `seconds` to answer."""

    def delayed(route: Route) -> Route:
        def answer(count: int) -> Reply:
            time.sleep(seconds)
            return route(count) if callable(route) else route

        return answer

    site.routes = {path: delayed(route) for path, route in site.routes.items()}


def after_requests(sites: Iterable[Site], n: int) -> threading.Event:
    """An event set once the sites together have served `n` requests."""
    sites = list(sites)
    event = threading.Event()

    def watch() -> None:
        while not event.is_set():
            if sum(len(s.requests) for s in sites) >= n:
                event.set()
            time.sleep(0.01)

    threading.Thread(target=watch, daemon=True).start()
    return event


def switches(site: Site, after: int, routes: dict[str, Route]) -> None:
    """Once `site` has served `after` requests, answer the paths of `routes` from them: a site whose
    templates change mid-crawl."""
    old = dict(site.routes)

    def either(path: str) -> Route:
        def answer(count: int) -> Reply:
            route = routes[path] if len(site.requests) > after else old[path]  # this one is logged
            return route(count) if callable(route) else route

        return answer

    site.routes = {path: either(path) if path in routes else route for path, route in old.items()}
