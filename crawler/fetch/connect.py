"""Where fetches connect: the `resolve` map, DNS, and the guard against private networks."""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Iterable, Mapping, Sequence

import httpcore
from aiohttp.abc import AbstractResolver, ResolveResult
from httpcore import AnyIOBackend, AsyncNetworkBackend, AsyncNetworkStream

from crawler.dns import HostResolver
from crawler.errors import Refused

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

# The IANA special-purpose ranges a crawler of the public web has no business connecting to, each
# with the reason given when a fetch is refused (the first match wins, so the specific come first).
# Spelled out rather than left to `is_global`, whose answers differ between Python versions and
# which calls multicast, 6to4 and NAT64 global.
_SPECIAL: tuple[tuple[IPNetwork, str], ...] = tuple(
    (ipaddress.ip_network(net), why)
    for net, why in (
        ("169.254.169.254/32", "link-local: the cloud metadata service"),
        ("0.0.0.0/8", "unspecified ('this network')"),
        ("10.0.0.0/8", "private"),
        ("100.64.0.0/10", "carrier-grade NAT (shared address space)"),
        ("127.0.0.0/8", "loopback"),
        ("169.254.0.0/16", "link-local"),
        ("172.16.0.0/12", "private"),
        ("192.0.0.0/24", "reserved for IETF protocol assignments"),
        ("192.0.2.0/24", "reserved for documentation"),
        ("192.88.99.0/24", "6to4 relay anycast"),
        ("192.168.0.0/16", "private"),
        ("198.18.0.0/15", "reserved for benchmarking"),
        ("198.51.100.0/24", "reserved for documentation"),
        ("203.0.113.0/24", "reserved for documentation"),
        ("224.0.0.0/4", "multicast"),
        ("255.255.255.255/32", "broadcast"),
        ("240.0.0.0/4", "reserved"),
        ("::/128", "unspecified"),
        ("::1/128", "loopback"),
        ("::/96", "IPv4-compatible (deprecated)"),
        ("64:ff9b:1::/48", "local-use NAT64"),
        ("100::/64", "discard-only"),
        ("2001::/23", "reserved for IETF protocol assignments (Teredo, benchmarking, ...)"),
        ("2001:db8::/32", "reserved for documentation"),
        ("3fff::/20", "reserved for documentation"),
        ("fc00::/7", "unique local (private)"),
        ("fe80::/10", "link-local"),
        ("fec0::/10", "site-local (deprecated)"),
        ("ff00::/8", "multicast"),
    )
)
# IPv6 ranges that carry an IPv4 address inside: judged by that address.
_NAT64 = ipaddress.ip_network("64:ff9b::/96")


def embedded_ipv4(ip: IPAddress) -> ipaddress.IPv4Address | None:
    """The IPv4 address inside an IPv4-mapped, NAT64 (64:ff9b::/96) or 6to4 IPv6 address."""
    if isinstance(ip, ipaddress.IPv4Address):
        return None
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip in _NAT64:
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return ip.sixtofour


def refusal(ip: IPAddress) -> str | None:
    """Why `ip` is not a public unicast address (e.g. "loopback"), or None if it is one."""
    inner = embedded_ipv4(ip)
    if inner is not None:
        why = refusal(inner)
        return f"{why}, inside {ip}" if why else None
    for network, why in _SPECIAL:
        if ip in network:
            return why
    return None if ip.is_global else "not globally routable"


def is_public(ip: IPAddress) -> bool:
    """True for a globally routable unicast address (one embedding IPv4 judged by its IPv4)."""
    return refusal(ip) is None


class AddressPolicy:
    """Which addresses fetches may connect to: public ones, plus the private ones allowed."""

    def __init__(self, allow_private: bool = False, allow_networks: Sequence[IPNetwork] = ()) -> None:
        self.allow_private = allow_private
        self.allow_networks = tuple(allow_networks)

    def refusal(self, ip: IPAddress) -> str | None:
        """Why a connection to `ip` is refused, or None if it is allowed."""
        if self.allow_private or self._listed(ip):
            return None
        return refusal(ip)

    def _listed(self, ip: IPAddress) -> bool:
        inner = embedded_ipv4(ip) if isinstance(ip, ipaddress.IPv6Address) else None
        return any(ip in net or (inner is not None and inner in net) for net in self.allow_networks)


class GuardedBackend(AsyncNetworkBackend):
    """httpcore network backend that resolves hosts itself and refuses non-public addresses.

    The check runs on the address actually connected to, before connecting, so redirects, DNS
    rebinding and the `resolve` map all pass through it. Names go to `resolver` (the fleet's DNS
    cache) if given, else to the system's resolver.
    """

    def __init__(
        self,
        resolve: Mapping[str, str],
        policy: AddressPolicy,
        inner: AsyncNetworkBackend | None = None,
        resolver: HostResolver | None = None,
    ) -> None:
        self._resolve = {h.lower(): ipaddress.ip_address(ip) for h, ip in resolve.items()}
        self._policy = policy
        self._resolver = resolver
        # httpcore's own default (AutoBackend) is private; on asyncio it picks AnyIOBackend anyway.
        self._inner = inner or AnyIOBackend()

    async def allowed(self, host: str, port: int) -> list[IPAddress]:
        """The addresses of `host` that may be connected to; Refused (before connecting) if none."""
        addresses = await self._addresses(host, port)
        verdicts = [(ip, self._policy.refusal(ip)) for ip in addresses]
        allowed = [ip for ip, why in verdicts if why is None]
        if not allowed:
            ip, why = verdicts[0]
            named = str(ip) if host.strip("[]") == str(ip) else f"{host} resolves to {ip}"
            raise Refused(
                f"refused: {named} ({why}); fetches connect only to public addresses unless "
                "domains.yaml sets allow_private_networks: true or lists the network in allow_networks"
            )
        return allowed

    async def _addresses(self, host: str, port: int) -> list[IPAddress]:
        host = host.lower().rstrip(".").strip("[]")
        if host in self._resolve:
            return [self._resolve[host]]
        try:
            return [ipaddress.ip_address(host)]
        except ValueError:
            pass
        if self._resolver is not None:  # NoSuchHost, ResolveFailed: a fetch error of their own
            return list((await self._resolver.resolve(host)).addresses)
        try:
            infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except (socket.gaierror, UnicodeError) as exc:
            raise httpcore.ConnectError(f"cannot resolve {host}: {exc}") from None
        # A scope id (fe80::1%eth0) is not part of the address.
        return list(dict.fromkeys(ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos))

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's signature)
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> AsyncNetworkStream:
        allowed = await self.allowed(host, port)
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
        raise Refused("refused: unix sockets are never fetched")

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


class GuardedResolver(AbstractResolver):
    """aiohttp resolver with the same `resolve` map and address policy as GuardedBackend.

    aiohttp does not resolve IP literals, so the fetcher checks those itself before each hop.
    """

    def __init__(self, guard: GuardedBackend) -> None:
        self._guard = guard

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        """The allowed addresses of `host`."""
        try:
            allowed = await self._guard.allowed(host, port)
        except httpcore.ConnectError as exc:
            raise OSError(str(exc)) from None  # aiohttp reports an OSError as a connection failure
        return [
            ResolveResult(
                hostname=host,
                host=str(ip),
                port=port,
                family=socket.AF_INET6 if ip.version == 6 else socket.AF_INET,
                proto=0,
                flags=socket.AI_NUMERICHOST,
            )
            for ip in allowed
        ]

    async def close(self) -> None:
        """Nothing to release."""
