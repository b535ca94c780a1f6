"""The guard against private networks: every address judged before any connection is attempted."""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable, Iterator

import httpcore
import httpx
import pytest

from crawler.errors import Refused
from crawler.fetch.connect import AddressPolicy, GuardedBackend, is_public, refusal
from demo.site import free_port

SITE_IP = "127.0.0.21"
OWN = ipaddress.ip_network(f"{SITE_IP}/32")


@pytest.mark.parametrize(
    ("address", "why"),
    [
        ("169.254.169.254", "cloud metadata"),
        ("169.254.1.1", "link-local"),
        ("10.0.0.1", "private"),
        ("172.16.5.4", "private"),
        ("192.168.1.1", "private"),
        ("127.0.0.1", "loopback"),
        ("127.255.255.254", "loopback"),
        ("0.0.0.0", "unspecified"),
        ("100.64.0.1", "carrier-grade NAT"),
        ("224.0.0.1", "multicast"),
        ("239.255.255.250", "multicast"),
        ("240.0.0.1", "reserved"),
        ("255.255.255.255", "broadcast"),
        ("192.0.2.1", "documentation"),
        ("198.18.0.1", "benchmarking"),
        ("::1", "loopback"),
        ("::", "unspecified"),
        ("fe80::1", "link-local"),
        ("fd00::1", "unique local"),
        ("fec0::1", "site-local"),
        ("ff02::1", "multicast"),
        ("2001:db8::1", "documentation"),
        ("::ffff:127.0.0.1", "loopback"),  # IPv4-mapped
        ("::ffff:169.254.169.254", "cloud metadata"),
        ("::ffff:10.0.0.1", "private"),
        ("::127.0.0.1", "IPv4-compatible"),
        ("64:ff9b::a00:1", "private"),  # NAT64 of 10.0.0.1
        ("2002:7f00:1::", "loopback"),  # 6to4 of 127.0.0.1
        ("2001::1", "IETF"),  # Teredo
    ],
)
def test_non_public_addresses_are_refused_with_their_reason(address: str, why: str) -> None:
    ip = ipaddress.ip_address(address)
    reason = refusal(ip)
    assert reason is not None and why in reason
    assert not is_public(ip)
    assert AddressPolicy().refusal(ip) == reason
    assert AddressPolicy(allow_private=True).refusal(ip) is None


@pytest.mark.parametrize(
    "address",
    ["93.184.215.14", "8.8.8.8", "2606:4700::1111", "::ffff:8.8.8.8", "64:ff9b::808:808", "2002:808:808::"],
)
def test_public_addresses_pass(address: str) -> None:
    assert refusal(ipaddress.ip_address(address)) is None


def test_allow_networks_allows_exactly_the_listed_networks() -> None:
    policy = AddressPolicy(allow_networks=[OWN, ipaddress.ip_network("fd00:1::/32")])
    assert policy.refusal(ipaddress.ip_address(SITE_IP)) is None
    assert policy.refusal(ipaddress.ip_address(f"::ffff:{SITE_IP}")) is None
    assert policy.refusal(ipaddress.ip_address("fd00:1::5")) is None
    for other in ["127.0.0.1", "127.0.0.22", "10.0.0.1", "169.254.169.254", "::1", "fd00:2::1"]:
        assert policy.refusal(ipaddress.ip_address(other)) is not None


class Recorder(httpcore.AsyncNetworkBackend):
    """Stands in for the network: records every connection the guard lets through."""

    def __init__(self) -> None:
        self.connects: list[tuple[str, int]] = []

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        self.connects.append((host, port))
        raise httpcore.ConnectError("recorded, not connected")


RESOLVE = {
    "rebind.test": "127.0.0.1",
    "meta.test": "169.254.169.254",
    "ten.test": "10.0.0.1",
    "v6.test": "::1",
    "mapped.test": "::ffff:127.0.0.1",
    "own.test": SITE_IP,
}


@pytest.mark.parametrize(
    "host",
    [
        "169.254.169.254",
        "10.0.0.1",
        "[::1]",
        "::1",
        "[::ffff:127.0.0.1]",
        "127.0.0.1",
        "127.0.0.22",
        "0.0.0.0",
        "localhost",  # resolves (through /etc/hosts) to loopback only
        "2130706433",  # 127.0.0.1 as one number: getaddrinfo reads it as an address
        "0x7f.1",
        "127.1",
        "rebind.test",
        "REBIND.test.",
        "meta.test",
        "ten.test",
        "v6.test",
        "mapped.test",
    ],
)
async def test_guard_refuses_before_any_connection_is_attempted(host: str) -> None:
    inner = Recorder()
    backend = GuardedBackend(RESOLVE, AddressPolicy(allow_networks=[OWN]), inner)
    with pytest.raises(Refused, match=r"refused: .*allow_private_networks"):
        await backend.connect_tcp(host, 80)
    assert inner.connects == []


async def test_guard_lets_allowed_addresses_through_to_the_network() -> None:
    inner = Recorder()
    backend = GuardedBackend(RESOLVE, AddressPolicy(allow_networks=[OWN]), inner)
    for host in ["own.test", SITE_IP]:
        with pytest.raises(httpcore.ConnectError, match="recorded"):
            await backend.connect_tcp(host, 8080)
    assert inner.connects == [(SITE_IP, 8080), (SITE_IP, 8080)]
    everything = GuardedBackend(RESOLVE, AddressPolicy(allow_private=True), inner)
    with pytest.raises(httpcore.ConnectError):
        await everything.connect_tcp("rebind.test", 80)
    assert inner.connects[-1] == ("127.0.0.1", 80)


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    port = free_port(SITE_IP)
    with socket.create_server((SITE_IP, port)) as server:
        yield server


async def test_an_allowed_connection_really_connects(listener: socket.socket) -> None:
    port = listener.getsockname()[1]
    backend = GuardedBackend(RESOLVE, AddressPolicy(allow_networks=[OWN]))
    listener.settimeout(10)
    stream = await backend.connect_tcp("own.test", port)
    conn, _ = listener.accept()  # times out (and fails) unless the guard really connected
    conn.close()
    await stream.aclose()


async def test_unix_sockets_are_refused() -> None:
    backend = GuardedBackend({}, AddressPolicy(allow_private=True))
    with pytest.raises(Refused):
        await backend.connect_unix_socket("/var/run/docker.sock")


def test_httpx_keeps_its_connection_pool_where_the_fetcher_swaps_in_the_guarded_one() -> None:
    # httpx takes no network backend, so crawler.fetch's _GuardedTransport replaces this private
    # attribute; were it gone or renamed, the fetcher would connect without the guard.
    pool = getattr(httpx.AsyncHTTPTransport(), "_pool", None)
    assert isinstance(pool, httpcore.AsyncConnectionPool), (
        f"httpx {httpx.__version__}: AsyncHTTPTransport no longer keeps an httpcore.AsyncConnectionPool "
        f"in `_pool` (found {pool!r}). crawler.fetch._GuardedTransport swaps that pool for one that "
        "connects through GuardedBackend: adapt it to this httpx, or fetches bypass the private-network guard"
    )
