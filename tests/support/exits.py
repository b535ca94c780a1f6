"""Exits for the gateway tests: forward proxies each connecting out from its own loopback address,
and a site that logs every request's client address and bans one that asks too fast."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import ssl
import subprocess
import time
from collections import defaultdict, deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from aiohttp import web

from bench.exits import connect_from, serve_client

KEY = "s3cret-key-0123456789"
METRICS_TOKEN = "metrics-token-0123456789"
ENV = {"GW_TEST_KEY": KEY, "GW_METRICS_TOKEN": METRICS_TOKEN}  # what write_proxies' files may name
SOURCES = ["127.0.0.42", "127.0.0.43", "127.0.0.44"]  # the `proxies` fixture's exits leave from these
Start = Callable[..., Awaitable[str]]
"""The `gateway` fixture: starts a gateway on the given exits (and proxies.yaml settings); its base URL."""


class ForwardProxy:
    """A plain-HTTP forward proxy on `listen` whose upstream connections leave from `source`.

    `hang` makes it accept and never answer; `requests` counts the requests it was sent and
    `connections` the client connections they came on (kept alive between requests).
    """

    def __init__(self, listen: str, source: str, *, hang: bool = False) -> None:
        self.listen = listen
        self.source = source
        self.hang = hang
        self.requests = 0
        self.connections = 0
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()
        self._closed = asyncio.Event()

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://{self.listen}:{self._server.sockets[0].getsockname()[1]}"

    async def start(self, port: int = 0) -> ForwardProxy:
        self._closed.clear()
        self._server = await asyncio.start_server(self._serve, self.listen, port)
        return self

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        self._closed.set()  # a hanging request ends (cancelling it would log an error)
        for writer in self._writers:  # so does a connection kept alive between requests
            writer.close()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def _count(self) -> None:
        self.requests += 1

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self._writers.add(writer)
        self.connections += 1
        try:
            if self.hang:
                await reader.readuntil(b"\r\n\r\n")
                self.requests += 1
                await self._closed.wait()
                return
            await serve_client(reader, writer, self.source, self._count)
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            self._tasks.discard(task)
            self._writers.discard(writer)
            with contextlib.suppress(Exception):
                writer.close()


BLOCK_PAGE = b"<html><head><title>Blocked</title></head><body>Access denied</body></html>"


@dataclass
class BanningSite:
    """`pages` pages linked from /, on `ip`; a client address asking more than `limit` times within
    a second (or, with `ban_at`, making its `ban_at`-th request) is answered 403 with a block page for
    `ban_for` seconds. Every request is logged."""

    ip: str
    pages: int = 30
    limit: int = 3
    ban_for: float = 1.0
    ban_at: int | None = None  # a ban that happens however slowly the fleet runs (a loaded machine)
    log: list[tuple[float, str, str, int]] = field(default_factory=list)  # (when, client, path, status)
    _recent: dict[str, deque[float]] = field(default_factory=lambda: defaultdict(deque))
    _banned: dict[str, float] = field(default_factory=dict)
    _asked: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    _runner: web.AppRunner | None = None
    port: int = 0

    def url(self, host: str, path: str = "/") -> str:
        return f"http://{host}:{self.port}{path}"

    async def start(self) -> BanningSite:
        app = web.Application()
        app.router.add_get("/{tail:.*}", self._page)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.ip, 0)
        await site.start()
        self.port = self._runner.addresses[0][1]
        return self

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _page(self, request: web.Request) -> web.Response:
        now = time.monotonic()
        client = request.remote or "?"
        recent = self._recent[client]
        recent.append(now)
        while recent and recent[0] < now - 1.0:
            recent.popleft()
        self._asked[client] += 1
        if len(recent) > self.limit or self._asked[client] == self.ban_at:
            self._banned[client] = now + self.ban_for
        if self._banned.get(client, 0) > now:
            self.log.append((now, client, request.path, 403))
            return web.Response(status=403, body=BLOCK_PAGE, content_type="text/html")
        self.log.append((now, client, request.path, 200))
        if request.path == "/robots.txt":
            return web.Response(text="User-agent: *\nAllow: /\n", content_type="text/plain")
        if request.path == "/":
            links = "".join(f'<a href="/p/{i}">p{i}</a>' for i in range(self.pages))
            return web.Response(text=f"<html><title>home</title>{links}</html>", content_type="text/html")
        if request.path.startswith("/p/"):
            return web.Response(
                text=f"<html><title>{request.path}</title><h1>ok</h1></html>", content_type="text/html"
            )
        return web.Response(status=404, text="<html>no</html>", content_type="text/html")

    def by_client(self) -> dict[str, list[tuple[float, str, int]]]:
        out: dict[str, list[tuple[float, str, int]]] = defaultdict(list)
        for when, client, path, status in self.log:
            out[client].append((when, path, status))
        return out


def write_proxies(path: Path, proxies: list[ForwardProxy], **settings: Any) -> Path:
    """A proxies.yaml with one datacenter exit per proxy (ids e0, e1, ...) and key GW_TEST_KEY."""
    config: dict[str, Any] = {
        "exits": [{"id": f"e{i}", "url": p.url, "country": "DE"} for i, p in enumerate(proxies)],
        "keys": [{"id": "test", "key_env": "GW_TEST_KEY"}],
        "allow_networks": ["127.0.0.21/32"],
        "resolve": {"a.test": "127.0.0.21", "b.test": "127.0.0.21"}
        | {f"h{i}.test": "127.0.0.21" for i in range(40)},
        **settings,
    }
    path.write_text(yaml.safe_dump(config))
    return path


class TunnelProxy:
    """An exit that tunnels (CONNECT) from `source`, resolving names with its own `hosts` map (so it
    can see a name elsewhere than the gateway's guard did); with `credentials` it wants them as
    Proxy-Authorization (407 without), with `refuse` it answers every CONNECT 403. `connects` holds
    each CONNECT target as asked, `authorizations` each Proxy-Authorization (None when absent)."""

    def __init__(
        self,
        listen: str,
        source: str,
        *,
        hosts: dict[str, str] | None = None,
        credentials: tuple[str, str] | None = None,
        refuse: bool = False,
    ) -> None:
        self.listen = listen
        self.source = source
        self.hosts = hosts or {}
        self.credentials = credentials
        self.refuse = refuse
        self.connects: list[str] = []
        self.authorizations: list[str | None] = []
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://{self.listen}:{self._server.sockets[0].getsockname()[1]}"

    async def start(self) -> TunnelProxy:
        self._server = await asyncio.start_server(self._serve, self.listen, 0)
        return self

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        # Every connection of both sides closed, whether or not its task has started.
        for writer in list(self._writers):
            writer.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self._writers.add(writer)
        try:
            head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
            line, *lines = head.rstrip("\r\n").split("\r\n")
            method, target, _ = line.split(" ")
            fields = {k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in lines)}
            self.connects.append(target)
            self.authorizations.append(fields.get("proxy-authorization"))
            if method != "CONNECT":
                writer.write(b"HTTP/1.1 405 Method Not Allowed\r\nContent-Length: 0\r\n\r\n")
                return
            if self.credentials is not None:
                want = "Basic " + base64.b64encode(":".join(self.credentials).encode()).decode()
                if fields.get("proxy-authorization") != want:
                    writer.write(b"HTTP/1.1 407 Proxy Authentication Required\r\nContent-Length: 0\r\n\r\n")
                    return
            if self.refuse:
                writer.write(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")
                return
            host, _, port = target.rpartition(":")
            host = host.strip("[]")
            up_reader, up_writer = await connect_from(self.hosts.get(host, host), int(port), self.source)
            self._writers.add(up_writer)
            writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            await writer.drain()
            await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer), return_exceptions=True)
        except (OSError, asyncio.IncompleteReadError, ValueError):
            with contextlib.suppress(OSError):
                writer.write(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
        finally:
            self._tasks.discard(task)
            with contextlib.suppress(Exception):
                writer.close()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while chunk := await reader.read(65536):
            writer.write(chunk)
            await writer.drain()
    finally:
        with contextlib.suppress(Exception):
            writer.close()


@dataclass
class Certificates:
    """A CA of the test's own (`ca`, a PEM file to trust) and a certificate it signed for `names`."""

    ca: Path
    cert: Path
    key: Path

    def server_context(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.cert, self.key)
        return context


def make_certificates(directory: Path, names: list[str]) -> Certificates:
    """A CA and a server certificate for `names` (DNS names), made with the openssl command."""
    ca, ca_key = directory / "ca.pem", directory / "ca.key"
    cert, key, csr = directory / "site.pem", directory / "site.key", directory / "site.csr"
    ext = directory / "san.ext"
    ext.write_text("subjectAltName=" + ",".join(f"DNS:{n}" for n in names) + "\n")

    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True)

    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(ca_key), "-out", str(ca),
        "-days", "2", "-subj", "/CN=crawler test CA")  # fmt: skip
    run(
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        str(key),
        "-out",
        str(csr),
        "-subj",
        f"/CN={names[0]}",
    )
    run("x509", "-req", "-in", str(csr), "-CA", str(ca), "-CAkey", str(ca_key), "-CAcreateserial",
        "-out", str(cert), "-days", "2", "-extfile", str(ext))  # fmt: skip
    return Certificates(ca, cert, key)
