"""Asking a name server: dnspython's asynchronous resolver, or the system's (getaddrinfo).

A lookup answers a host's addresses and their TTL, or that the name has none (NXDOMAIN, no A or AAAA
record), or raises ResolveFailed for what may pass (a timeout, a failing server). It keeps nothing:
crawler.dns.resolver shares its answers through Redis.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from dataclasses import dataclass
from typing import Protocol

import dns.asyncresolver
import dns.exception
import dns.message
import dns.nameserver
import dns.rdatatype
import dns.resolver

from crawler.errors import ResolveFailed
from crawler.openweb import Nameserver

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


@dataclass(frozen=True, slots=True)
class Lookup:
    """What a name server said: the addresses, or why there are none; `ttl` None if it gave none."""

    addresses: tuple[IPAddress, ...]
    ttl: float | None
    missing: str | None = None  # why the name has no address; then `addresses` is empty


class Upstream(Protocol):
    """Where lookups go."""

    async def lookup(self, host: str) -> Lookup:
        """The host's addresses or why it has none; ResolveFailed if that cannot be told now."""
        ...


class NameServers:
    """Lookups of A and AAAA records, together, from the given name servers (dnspython)."""

    def __init__(self, nameservers: tuple[Nameserver, ...], timeout: float) -> None:
        self._resolver = dns.asyncresolver.Resolver(configure=False)
        self._resolver.nameservers = [dns.nameserver.Do53Nameserver(n.address, n.port) for n in nameservers]
        self._resolver.lifetime = timeout
        self._resolver.timeout = max(0.1, timeout / 3)  # a lost datagram is asked again within it

    async def lookup(self, host: str) -> Lookup:
        """The host's A and AAAA records; the TTL is the shortest along the CNAME chain."""
        answers = await asyncio.gather(
            *(self._ask(host, kind) for kind in (dns.rdatatype.A, dns.rdatatype.AAAA)),
            return_exceptions=True,
        )
        addresses: list[IPAddress] = []
        ttls: list[float] = []  # of the records found
        negative: list[float] = []  # of the kinds the name has none of
        failed: Exception | None = None
        for answer in answers:
            if isinstance(answer, dns.resolver.NXDOMAIN):
                return Lookup((), _negative_ttl(answer), f"{host}: no such host (NXDOMAIN)")
            if isinstance(answer, dns.resolver.YXDOMAIN):
                return Lookup((), None, f"{host}: the name is too long once its CNAME is followed")
            if isinstance(answer, BaseException):
                failed = failed or _failure(host, answer)
                continue
            ttl = float(answer.chaining_result.minimum_ttl)
            if answer.rrset is not None:
                addresses += [ipaddress.ip_address(r.address) for r in answer.rrset]
                ttls.append(ttl)
            else:
                negative.append(ttl)
        if addresses:
            return Lookup(tuple(dict.fromkeys(addresses)), min(ttls))
        if failed is not None:
            raise failed
        return Lookup(
            (), min(negative, default=None), f"{host}: the name has no address (no A or AAAA record)"
        )

    async def _ask(self, host: str, kind: dns.rdatatype.RdataType) -> dns.resolver.Answer:
        return await self._resolver.resolve(host, kind, raise_on_no_answer=False, search=False)


def _failure(host: str, exc: BaseException) -> Exception:
    if isinstance(exc, dns.exception.Timeout):
        return ResolveFailed(f"{host}: DNS timed out ({exc})")
    if isinstance(exc, dns.resolver.NoNameservers):
        return ResolveFailed(f"{host}: every name server failed to answer ({exc})")
    if isinstance(exc, dns.exception.DNSException | OSError):
        return ResolveFailed(f"{host}: DNS failed ({type(exc).__name__}: {exc})")
    raise exc


def _negative_ttl(exc: dns.resolver.NXDOMAIN) -> float | None:
    """How long the zone says a missing name stays missing: its SOA's TTL and minimum, the lesser."""
    responses = exc.responses()  # type: ignore[no-untyped-call]  # dnspython leaves it unannotated
    for response in responses.values():
        if not isinstance(response, dns.message.Message):
            continue
        for rrset in response.authority:
            if rrset.rdtype == dns.rdatatype.SOA:
                return float(min(rrset.ttl, *(r.minimum for r in rrset)))
    return None


class SystemResolver:
    """Lookups through the system's resolver (getaddrinfo), which tells no TTL."""

    async def lookup(self, host: str) -> Lookup:
        """The host's addresses as getaddrinfo gives them."""
        loop = asyncio.get_running_loop()
        try:
            infos = await loop.getaddrinfo(host, None, type=socket.SOCK_STREAM)
        except socket.gaierror as exc:
            if exc.errno in (socket.EAI_NONAME, getattr(socket, "EAI_NODATA", socket.EAI_NONAME)):
                return Lookup((), None, f"{host}: no such host ({exc.strerror})")
            raise ResolveFailed(f"{host}: DNS failed ({exc.strerror})") from None
        except UnicodeError as exc:
            return Lookup((), None, f"{host}: not a name DNS can look up ({exc})")
        # A scope id (fe80::1%eth0) is not part of the address.
        found = (ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos)
        return Lookup(tuple(dict.fromkeys(found)), None)


def upstream_for(nameservers: tuple[Nameserver, ...] | None, timeout: float) -> Upstream:
    """The name servers' resolver, or the system's when none are given."""
    return NameServers(nameservers, timeout) if nameservers else SystemResolver()
