"""Where fetches connect: the `resolve` map, DNS, and the guard against private networks."""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Iterable, Mapping

import httpcore
from httpcore import AsyncNetworkBackend, AsyncNetworkStream
from httpcore._backends.auto import AutoBackend

from crawler.errors import Refused

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


def is_public(ip: IPAddress) -> bool:
    """True for a globally routable unicast address (IPv4-mapped IPv6 judged by its IPv4)."""
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_global and not ip.is_multicast


class GuardedBackend(AsyncNetworkBackend):
    """httpcore network backend that resolves hosts itself and refuses non-public addresses.

    The check runs on the address actually connected to, so redirects, DNS rebinding and the
    `resolve` map all pass through it.
    """

    def __init__(self, resolve: Mapping[str, str], allow_private: bool) -> None:
        self._resolve = {h.lower(): ipaddress.ip_address(ip) for h, ip in resolve.items()}
        self._allow_private = allow_private
        self._inner = AutoBackend()

    async def _addresses(self, host: str, port: int) -> list[IPAddress]:
        host = host.lower().rstrip(".").strip("[]")
        if host in self._resolve:
            return [self._resolve[host]]
        try:
            return [ipaddress.ip_address(host)]
        except ValueError:
            pass
        try:
            infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except socket.gaierror as exc:
            raise httpcore.ConnectError(f"cannot resolve {host}: {exc.strerror}") from None
        return list(dict.fromkeys(ipaddress.ip_address(info[4][0]) for info in infos))

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's signature)
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> AsyncNetworkStream:
        addresses = await self._addresses(host, port)
        allowed = [ip for ip in addresses if self._allow_private or is_public(ip)]
        if not allowed:
            raise Refused(
                f"{host} resolves to {', '.join(map(str, addresses))}, a private or reserved "
                "address; set allow_private_networks: true in domains.yaml to crawl it"
            )
        last: Exception | None = None
        for ip in allowed:
            try:
                return await self._inner.connect_tcp(str(ip), port, timeout, local_address, socket_options)
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                last = exc
        assert last is not None
        raise last

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's signature)
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> AsyncNetworkStream:
        raise Refused("unix sockets are never fetched")

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)
