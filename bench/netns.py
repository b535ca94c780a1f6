"""A network namespace joined to this one by a veth pair, for faults that cut a process off the network.

Only loopback-range addresses are used: a unique 127.A.B.1 on the host end of the pair, 127.A.B.2 in
the namespace (with `route_localnet`, and a /32 route in each side's `local` table so the pair wins
over the 127.0.0.0/8 that `lo` claims). The services the test uses listen on 127.0.0.x here, out of
the namespace's reach; `expose` puts a TCP relay for one of them on the host end, so a process in the
namespace reaches it through the veth, and `cut` takes that link down: every packet between the
namespace and the relays is lost (connections stall, nothing is refused), until `mend`.

Needs root and iproute2 (`ip`): `unusable()` says why not (the tests skip on it, except in CI).
Everything made is removed when the context ends, whatever the caller did. `route` sends the
namespace's packets for one more host address (a test site's) across the pair, without a relay.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import os
import random
import shutil
import subprocess
import threading
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

CHUNK = 65536


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30, check=check)


def _local_route(*where: str, to: str, dev: str, src: str) -> None:
    """A /32 route to `to` in the `local` table (of the namespace `where` names, if any)."""
    _ip(*where, "route", "replace", "table", "local", f"{to}/32", "dev", dev, "src", src)


def _sysctl(*prefix: str, setting: str) -> None:
    subprocess.run([*prefix, "sysctl", "-qw", setting], capture_output=True, timeout=30, check=True)


def unusable() -> str | None:
    """Why this process cannot make namespaces and veth pairs; None if it can."""
    if shutil.which("ip") is None:
        return "iproute2's `ip` not found: install iproute2 (scripts/services --tests does)"
    if os.geteuid() != 0:
        return "network namespaces need root"
    return None


def _free_subnet() -> tuple[str, str]:
    """A /30 in 127.200.0.0 - 127.254.255.255 no interface uses: (host end, namespace end)."""
    used = _ip("-4", "-o", "addr", "show").stdout
    while True:
        base = f"127.{random.randint(200, 254)}.{random.randint(0, 255)}"
        if f" {base}." not in used:
            return f"{base}.1", f"{base}.2"


class _Relays:
    """TCP relays on the host end of the veth, each forwarding to one service; served by one thread."""

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._servers: list[asyncio.Server] = []
        self._streams: set[asyncio.StreamWriter] = set()
        self._thread = threading.Thread(target=self._loop.run_forever, name="netns-relays", daemon=True)
        self._thread.start()

    def add(self, listen: str, port: int, target: tuple[str, int]) -> int:
        """Relay `listen`:`port` (0: any free port) to `target`; the port it listens on."""

        async def start() -> int:
            server = await asyncio.start_server(
                lambda r, w: self._pipe(r, w, target), listen, port, reuse_address=True
            )
            self._servers.append(server)
            bound: int = server.sockets[0].getsockname()[1]
            return bound

        return asyncio.run_coroutine_threadsafe(start(), self._loop).result(30)

    def close(self) -> None:
        """Stop listening, drop every relayed connection and stop the thread."""

        async def stop() -> None:
            for server in self._servers:
                server.close()
            for writer in list(self._streams):
                writer.transport.abort()
            # Aborted, each relayed connection ends by itself; one still connecting is cancelled.
            tasks = asyncio.all_tasks() - {asyncio.current_task()}
            if tasks:
                _, pending = await asyncio.wait(tasks, timeout=5)
                for task in pending:
                    task.cancel()
                await asyncio.gather(*pending, return_exceptions=True)

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(stop(), self._loop).result(30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(30)
        if not self._thread.is_alive():
            self._loop.close()

    async def _pipe(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, target: tuple[str, int]
    ) -> None:
        self._streams.add(writer)
        try:
            up_reader, up_writer = await asyncio.open_connection(*target)
        except (OSError, asyncio.CancelledError):  # the service is away, or the relays are closing
            writer.transport.abort()
            self._streams.discard(writer)
            return
        self._streams.add(up_writer)
        try:
            # Each direction ends as it would on a direct connection: an EOF is passed on as an EOF
            # (the peer may still be sending), a reset as a reset.
            await asyncio.gather(
                self._copy(reader, up_writer), self._copy(up_reader, writer), return_exceptions=True
            )
        finally:
            for end in (writer, up_writer):
                end.close()
                self._streams.discard(end)

    @staticmethod
    async def _copy(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
        try:
            while chunk := await source.read(CHUNK):
                sink.write(chunk)
                await sink.drain()
            if sink.can_write_eof():
                sink.write_eof()
        except OSError:
            sink.transport.abort()


@dataclass
class Netns:
    """A namespace and its veth pair; `expose` relays services to it, `cut` and `mend` the link."""

    name: str
    host_if: str
    ns_if: str
    host_ip: str
    ns_ip: str
    _relays: _Relays = field(default_factory=_Relays, repr=False)
    _routed: list[str] = field(default_factory=list, repr=False)

    def command(self, argv: Sequence[str]) -> list[str]:
        """`argv` run inside the namespace."""
        return ["ip", "netns", "exec", self.name, *argv]

    def expose(self, host: str, port: int, *, same_port: bool = False) -> tuple[str, int]:
        """Where a process in the namespace reaches `host`:`port`: a relay on the host end of the veth.

        `same_port` keeps the port (a URL that names it, e.g. a test site's, stays valid).
        """
        listen = self._relays.add(self.host_ip, port if same_port else 0, (host, port))
        return self.host_ip, listen

    def route(self, address: str) -> None:
        """Send the namespace's packets for `address` (one of this side's, e.g. a site's) across the
        pair: reached directly, and cut with the rest."""
        if address not in self._routed:
            _local_route("-n", self.name, to=address, dev=self.ns_if, src=self.ns_ip)
            self._routed.append(address)

    def cut(self) -> None:
        """Take the link down: whatever crosses it is lost until `mend` (not refused: it stalls)."""
        _ip("link", "set", "dev", self.host_if, "down")

    def mend(self) -> None:
        """Bring the link back up; stalled connections go on where they were."""
        _ip("link", "set", "dev", self.host_if, "up")
        # A route on a device that went down is gone; the /32 one is put back with the link.
        _local_route(to=self.ns_ip, dev=self.host_if, src=self.host_ip)
        for address in self._routed:
            _local_route("-n", self.name, to=address, dev=self.ns_if, src=self.ns_ip)


@contextmanager
def namespace() -> Iterator[Netns]:
    """A fresh namespace joined by a veth pair on unique loopback-range addresses; all removed after."""
    why = unusable()
    if why is not None:
        raise RuntimeError(why)
    tag = uuid.uuid4().hex[:8]
    host_ip, ns_ip = _free_subnet()
    assert ipaddress.ip_address(host_ip).is_loopback and ipaddress.ip_address(ns_ip).is_loopback
    ns = Netns(f"crawler-{tag}", f"cr{tag}h", f"cr{tag}n", host_ip, ns_ip)
    inside = ("ip", "netns", "exec", ns.name)
    try:
        _ip("netns", "add", ns.name)
        _ip("link", "add", ns.host_if, "type", "veth", "peer", "name", ns.ns_if, "netns", ns.name)
        # Loopback-range addresses on a real device: refused as martians unless route_localnet.
        _sysctl(setting=f"net.ipv4.conf.{ns.host_if}.route_localnet=1")
        _sysctl(*inside, setting=f"net.ipv4.conf.{ns.ns_if}.route_localnet=1")
        _ip("addr", "add", f"{host_ip}/32", "dev", ns.host_if)
        _ip("-n", ns.name, "addr", "add", f"{ns_ip}/32", "dev", ns.ns_if)
        _ip("link", "set", "dev", ns.host_if, "up")
        _ip("-n", ns.name, "link", "set", "dev", ns.ns_if, "up")
        _ip("-n", ns.name, "link", "set", "dev", "lo", "up")
        # Without these, each side's 127.0.0.0/8 on lo would take the other end's address as its own.
        _local_route(to=ns_ip, dev=ns.host_if, src=host_ip)
        _local_route("-n", ns.name, to=host_ip, dev=ns.ns_if, src=ns_ip)
        # A device taken down loses its routes: behind these, what is sent across a cut is dropped,
        # as on a pulled cable, instead of reaching lo and being reset there.
        _ip("route", "add", "table", "local", "blackhole", f"{ns_ip}/32", "metric", "100")
        _ip("-n", ns.name, "route", "add", "table", "local", "blackhole", f"{host_ip}/32", "metric", "100")
        yield ns
    finally:
        ns._relays.close()
        # Deleting the namespace deletes its end of the pair, and with it the host end and routes.
        _ip("netns", "del", ns.name, check=False)
        _ip("link", "del", ns.host_if, check=False)
        _ip("route", "del", "table", "local", "blackhole", f"{ns_ip}/32", "metric", "100", check=False)
