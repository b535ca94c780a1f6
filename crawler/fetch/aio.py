"""The fetch layer over aiohttp: the same interface, guard and limits as HttpFetcher, less CPU.

Per request, httpx with its httpcore pool costs several times the CPU of aiohttp on the same
server (see bench/README.md); a crawler spends most of its CPU fetching, so this is the default.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from urllib.parse import urlsplit

import aiohttp
import httpx
from yarl import URL

from crawler.config import CrawlConfig
from crawler.dns import HostResolver
from crawler.errors import BadResponse, ConnectFailed, FetchError, Refused
from crawler.fetch.connect import AddressPolicy, GuardedBackend, GuardedResolver
from crawler.fetch.fetcher import BoundedFetcher, Headers, Opened, request_headers
from crawler.fetch.wire import going

MAX_HEADER_BYTES = 65_536


async def _connected(session: aiohttp.ClientSession, context: object, params: object) -> None:
    await going()


class AiohttpFetcher(BoundedFetcher):
    """Fetches directly with one pooled aiohttp session per process; redirects as HttpFetcher.

    `resolver`: the fleet's DNS cache (else the system's resolver) for names not in `resolve`.
    """

    def __init__(
        self, config: CrawlConfig, *, max_connections: int = 100, resolver: HostResolver | None = None
    ) -> None:
        self._guard = GuardedBackend(
            config.resolve,
            AddressPolicy(config.allow_private_networks, config.allow_networks),
            resolver=resolver,
        )
        connector = aiohttp.TCPConnector(
            limit=max_connections,
            resolver=GuardedResolver(self._guard),
            use_dns_cache=False,  # every connection's address goes through the guard afresh
        )
        # Tells a request's pacing when it goes, and waits on it: once it has its connection (made,
        # or kept alive), the last awaited step before its headers are written.
        on_wire = aiohttp.TraceConfig()
        on_wire.on_connection_create_end.append(_connected)
        on_wire.on_connection_reuseconn.append(_connected)
        self._session = aiohttp.ClientSession(
            connector=connector,
            trace_configs=[on_wire],
            headers=request_headers(config),
            auto_decompress=False,
            timeout=aiohttp.ClientTimeout(total=None),  # the whole-fetch deadline bounds it all
            trust_env=False,
            skip_auto_headers=("Accept-Encoding",),
            # Long Location headers are the redirect check's to refuse, with a reason.
            max_line_size=MAX_HEADER_BYTES,
            max_field_size=MAX_HEADER_BYTES,
        )

    @asynccontextmanager
    async def _open(self, url: str, headers: Headers | None) -> AsyncIterator[Opened]:
        await self._check_literal(url)
        try:
            async with self._session.get(
                URL(url, encoded=True), allow_redirects=False, headers=headers
            ) as resp:
                answered = httpx.Headers(list(resp.headers.items()))
                encodings = resp.headers.getall("Content-Encoding", [])
                yield resp.status, answered, resp.content.iter_any(), encodings
        except FetchError:
            raise
        except (aiohttp.InvalidURL, ValueError) as exc:
            raise Refused(f"cannot fetch {url}: {exc}") from None
        except aiohttp.ClientResponseError as exc:  # the server's answer breaks HTTP itself
            raise BadResponse(f"malformed response: {exc.message[:200]}", status_code=exc.status) from None
        except (aiohttp.ClientError, OSError) as exc:
            raise ConnectFailed(f"{type(exc).__name__}: {exc}") from None

    async def _check_literal(self, url: str) -> None:
        host = urlsplit(url).hostname or ""
        try:
            ipaddress.ip_address(host)
        except ValueError:
            try:  # 2130706433 and 0x7f.1 are 127.0.0.1 to inet_aton, whatever yarl makes of them
                host = str(ipaddress.IPv4Address(socket.inet_aton(host)))
            except OSError:
                return  # a name: the resolver checks what it resolves to
        await self._guard.allowed(host, 0)

    async def aclose(self) -> None:
        """Close the session and its connections."""
        await self._session.close()
