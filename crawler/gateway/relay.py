"""One request through an exit: each hop cleared by the private-network guard and pinned to the
address it cleared (http and https alike: an https request tunnels to that address, with the name
in its TLS server name and Host header), redirects followed if asked, the body decoded and bounded,
and read whole or only its head (the rest left to stream)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from contextlib import AsyncExitStack
from dataclasses import dataclass
from urllib.parse import urljoin, urlsplit

import aiohttp

from crawler.errors import BadResponse, ConnectFailed, Refused, TooLarge, TooManyRedirects
from crawler.fetch.decoding import ACCEPT_ENCODING
from crawler.fetch.fetcher import HTML_TYPES, REDIRECTS, body_pieces
from crawler.gateway.ask import Ask
from crawler.gateway.pinning import cleared, pinned_request
from crawler.gateway.proxies import Exit
from crawler.gateway.session import exit_session
from crawler.gateway.setup import Setup

MAX_REDIRECTS = 10
# A body longer than this is passed on as it comes (the raw form) instead of being held whole: the
# head read first covers the block-marker check (its first 200,000 characters).
STREAM_AFTER = 1 << 20
DROPPED_HEADERS = frozenset({"content-encoding", "content-length", "transfer-encoding", "connection"})


class ProxyFailed(Exception):
    """The exit itself failed (refused, 407, tunnel, hung): not the target's doing. Its text is for
    the gateway's log only: it may name the proxy's address."""


@dataclass(frozen=True, slots=True)
class Reply:
    """The target's answer through an exit: the body whole, or its head and the `rest` to come."""

    status: int
    initial_status: int
    headers: list[tuple[str, str]]
    url: str  # the last hop's
    head: bytes
    rest: AsyncGenerator[bytes, None] | None
    stack: AsyncExitStack  # holds the exit's connection while the rest streams

    @property
    def media(self) -> str:
        """The media type, lower case ("text/html" when none is said)."""
        value = next((v for k, v in self.headers if k.lower() == "content-type"), "text/html")
        return value.split(";")[0].strip().lower()

    async def aclose(self) -> None:
        """Let go of the exit's connection (and of what of the body was not read)."""
        await self.stack.aclose()


class Relay:
    """Sends requests through the exits on one keep-alive session."""

    def __init__(self, ca_file: str | None = None) -> None:
        self.session = exit_session(ca_file)

    async def close(self) -> None:
        """Close the session and its connections."""
        await self.session.close()

    async def send(self, setup: Setup, exit: Exit, ask: Ask, pinned: str, budget: float) -> Reply:
        """`ask` through `exit` within `budget` seconds; ProxyFailed if the exit (not the target)
        failed, a FetchError if the target's answer cannot be passed on."""
        url, initial = ask.url, 0
        try:
            async with asyncio.timeout(budget):
                for _ in range(MAX_REDIRECTS + 1):
                    stack = AsyncExitStack()
                    try:
                        resp = await self._get(stack, setup, exit, url, pinned)
                        initial = initial or resp.status
                        location = resp.headers.get("Location", "").strip()
                        if not (ask.follow and resp.status in REDIRECTS and location):
                            return await _reply(stack, resp, ask, url, initial)
                    except BaseException:
                        await stack.aclose()
                        raise
                    await stack.aclose()
                    url = _hop(url, location, resp.status)
                    pinned = await cleared(setup.guard, url)
        except TimeoutError:
            raise ProxyFailed(f"no answer through it within {budget:.1f}s") from None
        except (aiohttp.ClientProxyConnectionError, aiohttp.ClientHttpProxyError) as exc:
            raise ProxyFailed(f"{type(exc).__name__}: {exc}") from None
        except aiohttp.ClientSSLError as exc:  # the target's certificate or TLS: not the exit's doing
            raise ConnectFailed(f"TLS with {ask.host} failed: {exc}") from None
        except aiohttp.ClientResponseError as exc:
            raise BadResponse(f"malformed response: {exc.message[:200]}", status_code=exc.status) from None
        except (aiohttp.ClientError, OSError) as exc:
            raise ProxyFailed(f"{type(exc).__name__}: {exc}") from None
        raise TooManyRedirects(f"more than {MAX_REDIRECTS} redirects from {ask.url}", status_code=initial)

    async def _get(
        self, stack: AsyncExitStack, setup: Setup, exit: Exit, url: str, pinned: str
    ) -> aiohttp.ClientResponse:
        target, host, server_name = pinned_request(url, pinned)
        headers = {
            "User-Agent": setup.config.user_agent,
            "Accept": "text/html,*/*;q=0.5",
            "Accept-Encoding": ACCEPT_ENCODING,
            "Host": host,
        }
        proxy = setup.proxies[exit.id]
        resp = await stack.enter_async_context(
            self.session.get(
                target,
                server_hostname=server_name,
                allow_redirects=False,
                **proxy.options(headers, server_name is not None),
            )
        )
        if resp.status == 407:
            raise ProxyFailed("proxy authentication required (407): check the exit's credentials")
        return resp


def _hop(url: str, location: str, status: int) -> str:
    """Where a redirect from `url` leads; Refused if that is no http(s) URL."""
    try:
        target = urljoin(url, location)
        parts = urlsplit(target)
    except ValueError as exc:
        raise Refused(f"bad redirect Location {location[:200]!r}: {exc}", status_code=status) from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise Refused(f"redirect to {target[:200]!r}: only http(s) URLs are fetched", status_code=status)
    return target


async def _reply(
    stack: AsyncExitStack, resp: aiohttp.ClientResponse, ask: Ask, url: str, initial: int
) -> Reply:
    """The answer with its body read whole (the envelope, a render) or up to its head."""
    pairs = [(k, v) for k, v in resp.headers.items() if k.lower() not in DROPPED_HEADERS]
    media = resp.headers.get("Content-Type", "text/html").split(";")[0].strip().lower()
    if resp.status in REDIRECTS or (ask.html_only and media not in HTML_TYPES):
        await stack.aclose()
        return Reply(resp.status, initial, pairs, url, b"", None, stack)
    declared = resp.headers.get("Content-Length", "")
    if declared.isdigit() and int(declared) > ask.max_body_bytes:
        raise TooLarge(
            f"Content-Length {declared} exceeds max_body_bytes {ask.max_body_bytes}", status_code=resp.status
        )
    pieces = body_pieces(
        resp.content.iter_any(), resp.headers.getall("Content-Encoding", []), ask.max_body_bytes, resp.status
    )
    stack.push_async_callback(pieces.aclose)
    whole = ask.envelope or ask.render is not None
    head: list[bytes] = []
    size = 0
    async for piece in pieces:
        head.append(piece)
        size += len(piece)
        if not whole and size > STREAM_AFTER:
            return Reply(resp.status, initial, pairs, url, b"".join(head), pieces, stack)
    await stack.aclose()
    return Reply(resp.status, initial, pairs, url, b"".join(head), None, stack)
