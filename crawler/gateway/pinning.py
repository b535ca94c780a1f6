"""Pinning: every request the gateway sends goes to the address the private-network guard cleared,
never to whatever the name resolves to later or at the exit (DNS rebinding). http asks the exit for
the address itself; https asks it to CONNECT to the address and checks the certificate against the
name, which goes in the TLS server name and the Host header."""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

import httpcore
from yarl import URL

from crawler.errors import ConnectFailed
from crawler.fetch.connect import GuardedBackend


async def cleared(guard: GuardedBackend, url: str) -> str:
    """The address `url` is pinned to once the guard cleared its host (the `resolve` map's, or the
    first DNS gave); Refused or ConnectFailed if it is not cleared."""
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
        ips = await guard.allowed(host, port)
    except (httpcore.ConnectError, OSError, ValueError) as exc:
        raise ConnectFailed(f"cannot resolve {host}: {exc}") from None
    # Pinned, the proxy cannot be steered elsewhere by its own resolver (DNS rebinding).
    return str(ips[0])


def pinned_request(url: str, ip: str) -> tuple[URL, str, str | None]:
    """(`url` with its host replaced by `ip`, the Host header, the TLS server name): what goes to
    the exit so that it connects to `ip` whatever the name resolves to there. For https the proxy
    is asked to CONNECT to `ip`, and the certificate is checked against the name."""
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    host = f"[{ip}]" if ":" in ip else ip
    target = urlunsplit((parts.scheme, f"{host}:{port}", parts.path or "/", parts.query, ""))
    server_name = (parts.hostname or "") if parts.scheme == "https" else None
    return URL(target, encoded=True), parts.netloc.rpartition("@")[2], server_name
