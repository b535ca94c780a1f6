"""Test sites served on loopback addresses: each host its own 127.0.0.x, every request logged."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

Stream = Callable[[], Iterable[bytes]]
"""A body sent piece by piece as it is produced, ended by closing the connection."""


@dataclass(frozen=True)
class Reply:
    """What the server answers for one request."""

    status: int = 200
    body: bytes | Stream = b""
    headers: dict[str, str] = field(default_factory=lambda: {"Content-Type": "text/html; charset=utf-8"})


Route = Reply | Callable[[int], Reply]
"""A fixed reply, or one computed from how many times this path was requested before (0, 1, ...)."""


@dataclass
class Site:
    """One host's pages, and the log of requests it served."""

    host: str
    ip: str
    port: int
    routes: dict[str, Route]
    requests: list[tuple[float, str]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def url(self, path: str = "/") -> str:
        """Absolute URL of a path on this site, by host name."""
        return f"http://{self.host}:{self.port}{path}"

    def hits(self, path: str) -> int:
        """How many times `path` was requested."""
        with self._lock:
            return sum(1 for _, p in self.requests if p == path)

    def reply(self, path: str, when: float) -> Reply:
        with self._lock:
            count = sum(1 for _, p in self.requests if p == path)
            self.requests.append((when, path))
        route = self.routes.get(path)
        if route is None:
            return Reply(404, b"<html><title>Not found</title></html>")
        return route(count) if callable(route) else route


def _handler(site: Site) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            reply = site.reply(self.path, time.monotonic())
            self.send_response(reply.status)
            for name, value in reply.headers.items():
                self.send_header(name, value)
            if isinstance(reply.body, bytes):
                self.send_header("Content-Length", str(len(reply.body)))
                self.end_headers()
                self.wfile.write(reply.body)
                return
            self.send_header("Connection", "close")
            self.end_headers()
            self.close_connection = True
            for piece in reply.body():
                self.wfile.write(piece)
                self.wfile.flush()

        def log_message(self, format: str, *args: object) -> None:
            pass

    return Handler


def free_port(*ips: str) -> int:
    """A TCP port free on every one of `ips`, so all sites can share it."""
    while True:
        with socket.socket() as probe:
            probe.bind((ips[0], 0))
            port: int = probe.getsockname()[1]
        try:
            for ip in ips[1:]:
                with socket.socket() as other:
                    other.bind((ip, port))
        except OSError:
            continue
        return port


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: object, client_address: object) -> None:
        # A crawler killed mid-request resets its connections: expected, not worth a traceback.
        pass


@contextmanager
def serve(*sites: Site) -> Iterator[tuple[Site, ...]]:
    """Serve each site on its own IP and port until the block ends."""
    servers = []
    try:
        for site in sites:
            server = _Server((site.ip, site.port), _handler(site))
            threading.Thread(target=server.serve_forever, daemon=True).start()
            servers.append(server)
        yield sites
    finally:
        for server in servers:
            server.shutdown()
            server.server_close()


def page(title: str, links: list[str], price: str | None = None, extra: str = "") -> Reply:
    """An HTML page with a title, an h1, an optional price and links."""
    anchors = "\n".join(f'<li><a href="{href}">{href}</a></li>' for href in links)
    price_html = f'<p class="price">{price}</p>' if price else ""
    body = (
        f"<!doctype html><html><head><title>{title}</title></head><body>"
        f"<h1>{title}</h1>{price_html}<ul>{anchors}</ul>{extra}</body></html>"
    )
    return Reply(200, body.encode())


def shop(host: str, ip: str, port: int, products: int, neighbours: list[str]) -> Site:
    """A deterministic shop: a home page, `products` product pages, links across hosts and traps.

    Reachable: "/" and /product/1..N (N + 1 pages) plus one 404 (/missing), per host.
    """
    routes: dict[str, Route] = {}
    home_links = [f"/product/{i}" for i in range(1, products + 1)]
    home_links += [
        "/product/1#reviews",  # same page: fragment dropped
        "/product/2?utm_source=newsletter",  # same page: tracking dropped
        "/missing",
        "mailto:sales@" + host,
        "javascript:void(0)",
        "http://outside.invalid/never-fetched",
        *(f"http://{n}:{port}/" for n in neighbours),
    ]
    routes["/"] = page(f"{host} home", home_links)
    for i in range(1, products + 1):
        nxt = f"/product/{i % products + 1}"
        routes[f"/product/{i}"] = page(
            f"{host} product {i}", ["/", nxt, f"../product/{i}"], price=f"{i}.99 EUR"
        )
    return Site(host, ip, port, routes)
