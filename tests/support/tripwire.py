"""A safety net: no test process connects anywhere but loopback (and the test services).

The SSRF tests hand the crawler links to 10.0.0.1, 169.254.169.254 and the like, which the guard in
crawler/connect.py must refuse before connecting. Should it ever fail to, this audit hook stops the
connection before a packet leaves and says so on stderr, so the test fails instead of the machine
sending traffic where it must not.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import socket
import sys
from typing import Any
from urllib.parse import urlsplit

_installed = False


def _service_addresses() -> set[str]:
    # The test services may live elsewhere (see tests/support/services.py and tests/conftest.py).
    hosts = {
        os.environ.get("CRAWLER_TEST_AMQP_HOST", "localhost"),
        urlsplit(os.environ.get("CRAWLER_TEST_REDIS_URL", "redis://localhost")).hostname or "localhost",
        urlsplit(os.environ.get("CRAWLER_TEST_PG_SERVER", "postgresql://localhost")).hostname or "localhost",
    }
    found = set()
    for host in hosts:
        with contextlib.suppress(OSError):
            found.update(str(info[4][0]) for info in socket.getaddrinfo(host, None))
    return found


def allowed(address: Any, services: set[str]) -> bool:
    """True if a socket may connect to `address`: loopback, a test service, or not an IP socket."""
    if not isinstance(address, tuple) or not address:
        return True  # a unix socket path
    host = str(address[0]).split("%")[0]
    if host in services or host == "localhost":
        return True
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback


def install() -> None:
    """Refuse, from now on in this process, every connect to an address `allowed` rejects."""
    global _installed
    if _installed:
        return
    _installed = True
    services = _service_addresses()

    def hook(event: str, args: tuple[Any, ...]) -> None:
        if event == "socket.connect" and not allowed(args[1], services):
            message = f"tripwire: a test process tried to connect to {args[1]!r}; refused"
            print(message, file=sys.stderr, flush=True)
            raise PermissionError(message)

    sys.addaudithook(hook)
