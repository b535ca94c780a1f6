"""The fetch layer: one interface (one request in, response or a typed FetchError out), httpx behind it.

A fetch is one request on the wire: redirects come back as 3xx responses. The crawl routes a page's
redirect like a link, so each hop gets its own rate token, robots.txt verdict and dedup claim;
`follow` chains requests for what is not a page (robots.txt), clearing every hop first.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, aclosing, asynccontextmanager
from dataclasses import dataclass, replace
from typing import Protocol, runtime_checkable

import httpcore
import httpx

from crawler.config import CrawlConfig, Rules
from crawler.dns import HostResolver
from crawler.errors import (
    BadResponse,
    BadURL,
    ConnectFailed,
    FetchError,
    FetchTimeout,
    Refused,
    TooLarge,
    TooManyRedirects,
)
from crawler.fetch.connect import AddressPolicy, GuardedBackend
from crawler.fetch.decoding import ACCEPT_ENCODING, decode_errors, decoder_for
from crawler.fetch.wire import OnWire, httpcore_trace, paced

HTML_TYPES = ("text/html", "application/xhtml+xml")
REDIRECTS = frozenset({301, 302, 303, 307, 308})


@dataclass(frozen=True, slots=True)
class Response:
    """What a fetch got: the final hop's status, headers and (for HTML) body."""

    url: str
    final_url: str
    status_code: int
    headers: httpx.Headers
    body: bytes
    credits: float = 0.0  # what a fetch service charged for this answer (direct: nothing)
    exit_id: str | None = None  # the fetch service's exit (proxy) that carried it, by id
    rendered: bool = False  # the body is a browser's DOM after the page's scripts ran (render_js)
    document: bytes | None = None  # a rendered page's document as the site sent it, if the service said

    @property
    def content_type(self) -> str | None:
        """The Content-Type header, if any."""
        value: str | None = self.headers.get("content-type")
        return value

    @property
    def location(self) -> str | None:
        """Where a redirect points (its Location header, as sent); None if this is no redirect."""
        if self.status_code not in REDIRECTS:
            return None
        value: str | None = self.headers.get("location")
        return value.strip() or None if value is not None else None

    @property
    def is_html(self) -> bool:
        """True if the body is HTML and worth parsing."""
        media = (self.content_type or "text/html").split(";")[0].strip().lower()
        return media in HTML_TYPES


Headers = Mapping[str, str]
"""Request headers beyond those every fetch sends."""


def conditional_headers(etag: str | None, last_modified: str | None) -> dict[str, str] | None:
    """The headers that ask again for what was fetched with these validators; None without any."""
    headers = {}
    if etag:
        headers["If-None-Match"] = etag
    if last_modified:
        headers["If-Modified-Since"] = last_modified
    return headers or None


Opened = tuple[int, httpx.Headers, AsyncIterator[bytes], Sequence[str]]
"""An answer as a transport opens it: status, headers, its raw body chunks and their encodings."""


@dataclass(frozen=True, slots=True)
class Streamed:
    """An answer whose body is read as it comes (a sitemap): decoded pieces, within max_body_bytes
    (TooLarge past it); a redirect's pieces are none."""

    url: str
    status_code: int
    headers: httpx.Headers
    pieces: AsyncGenerator[bytes, None]

    @property
    def location(self) -> str | None:
        """Where a redirect points; None if this is no redirect."""
        if self.status_code not in REDIRECTS:
            return None
        value: str | None = self.headers.get("location")
        return value.strip() or None if value is not None else None


Hop = Callable[[str], Awaitable[OnWire | None]]
"""Clears one request of a followed chain before it is sent (scope, rate token); BadURL refuses it."""


class Fetcher(Protocol):
    """A way to fetch pages: direct, through a proxy pool, or a scraping API."""

    async def fetch(
        self, url: str, rules: Rules, *, html_only: bool = True, headers: Headers | None = None
    ) -> Response:
        """One request for `url` within the domain's deadline and body limit; FetchError on failure.

        A redirect is returned as it is, not followed. With `html_only`, a body that is not HTML is
        not read (its outcome is recorded all the same). `headers` go with the request (a refresh's
        If-None-Match and If-Modified-Since) where the transport can send them.
        """
        ...

    async def aclose(self) -> None:
        """Release connections."""
        ...


@runtime_checkable
class Streaming(Protocol):
    """A Fetcher that can hand a body over as it comes (see `streamed` for any Fetcher)."""

    def stream(
        self, url: str, rules: Rules, *, headers: Headers | None = None
    ) -> AbstractAsyncContextManager[Streamed]:
        """One request for `url`, its body read within the domain's deadline as the caller goes."""
        ...


@asynccontextmanager
async def streamed(
    fetcher: Fetcher, url: str, rules: Rules, *, headers: Headers | None = None
) -> AsyncIterator[Streamed]:
    """`url`'s answer with its body as it comes; a fetcher that cannot stream (a fetch service) reads
    the body whole first, within max_body_bytes."""
    if isinstance(fetcher, Streaming):
        async with fetcher.stream(url, rules, headers=headers) as answer:
            yield answer
        return
    response = await fetcher.fetch(url, rules, html_only=False, headers=headers)
    yield Streamed(response.url, response.status_code, response.headers, slices(response.body))


async def slices(body: bytes, size: int = 64 * 1024) -> AsyncGenerator[bytes, None]:
    """A body held whole, as the pieces of a stream."""
    for at in range(0, len(body), size):
        yield body[at : at + size]


async def _nothing() -> AsyncGenerator[bytes, None]:
    return
    yield  # pragma: no cover - makes this an async generator


class _GuardedTransport(httpx.AsyncHTTPTransport):
    # httpx takes no network backend, so the pool it builds is swapped for one that connects
    # through the guard; request and response mapping stay httpx's own.
    def __init__(self, backend: GuardedBackend, limits: httpx.Limits) -> None:
        super().__init__(limits=limits, trust_env=False)
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=httpx.create_ssl_context(),
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry,
            network_backend=backend,
        )


def request_headers(config: CrawlConfig) -> dict[str, str]:
    """The headers every fetch sends, whatever the transport."""
    return {
        "User-Agent": config.user_agent,
        "Accept": "text/html,*/*;q=0.5",
        # Only what crawler.decoding undoes with bounded memory.
        "Accept-Encoding": ACCEPT_ENCODING,
    }


class BoundedFetcher:
    """The deadline, body limit and decoding every transport shares; a transport supplies `_open`."""

    async def fetch(
        self, url: str, rules: Rules, *, html_only: bool = True, headers: Headers | None = None
    ) -> Response:
        """One request for `url` within the domain's deadline and body limit; redirects not followed."""
        try:
            async with asyncio.timeout(rules.timeout):
                status, answered, body = await self._get(url, rules, html_only, headers)
        except TimeoutError:
            raise FetchTimeout(f"no complete response within {rules.timeout:g}s", url=url) from None
        except FetchError as exc:
            exc.url = exc.url or url
            raise
        return Response(url, url, status, answered, body)

    @asynccontextmanager
    async def stream(
        self, url: str, rules: Rules, *, headers: Headers | None = None
    ) -> AsyncIterator[Streamed]:
        """One request for `url`; the caller reads its body's pieces within the domain's deadline."""
        try:
            async with asyncio.timeout(rules.timeout), self._open(url, headers) as opened:
                status, answered, raw, encodings = opened
                pieces = (
                    _nothing()
                    if status in REDIRECTS
                    else body_pieces(raw, encodings, rules.max_body_bytes, status)
                )
                yield Streamed(url, status, answered, pieces)
        except TimeoutError:
            raise FetchTimeout(f"no complete response within {rules.timeout:g}s", url=url) from None
        except FetchError as exc:
            exc.url = exc.url or url
            raise

    async def _get(
        self, url: str, rules: Rules, html_only: bool, headers: Headers | None
    ) -> tuple[int, httpx.Headers, bytes]:
        async with self._open(url, headers) as (status, answered, raw, encodings):
            media = answered.get("content-type", "text/html").split(";")[0].strip()
            if status in REDIRECTS or (html_only and media.lower() not in HTML_TYPES):
                return status, answered, b""
            declared = answered.get("content-length", "")
            if declared.isdigit() and int(declared) > rules.max_body_bytes:
                raise TooLarge(
                    f"Content-Length {declared} exceeds max_body_bytes {rules.max_body_bytes}",
                    status_code=status,
                )
            return status, answered, await read_body(raw, encodings, rules.max_body_bytes, status)

    def _open(self, url: str, headers: Headers | None) -> AbstractAsyncContextManager[Opened]:
        """The transport's answer to one GET, open while the context lasts; its errors as FetchError."""
        raise NotImplementedError

    async def aclose(self) -> None:
        """Release connections."""
        raise NotImplementedError


class HttpFetcher(BoundedFetcher):
    """Fetches directly with one pooled httpx client per process (`resolver`: as AiohttpFetcher's)."""

    def __init__(
        self, config: CrawlConfig, *, max_connections: int = 100, resolver: HostResolver | None = None
    ) -> None:
        policy = AddressPolicy(config.allow_private_networks, config.allow_networks)
        backend = GuardedBackend(config.resolve, policy, resolver=resolver)
        limits = httpx.Limits(max_connections=max_connections, max_keepalive_connections=32)
        self._client = httpx.AsyncClient(
            transport=_GuardedTransport(backend, limits),
            headers=request_headers(config),
            follow_redirects=False,
            timeout=None,  # the whole-fetch deadline below bounds every phase together
            trust_env=False,
        )

    @asynccontextmanager
    async def _open(self, url: str, headers: Headers | None) -> AsyncIterator[Opened]:
        try:
            trace = {"trace": httpcore_trace}  # tells the request's pacing when it goes
            async with self._client.stream("GET", url, headers=headers, extensions=trace) as resp:
                encodings = resp.headers.get_list("content-encoding")
                yield resp.status_code, resp.headers, resp.aiter_raw(), encodings
        except FetchError:
            raise
        except httpx.TimeoutException as exc:
            raise FetchTimeout(f"timed out: {exc!r}") from None
        except (httpx.UnsupportedProtocol, httpx.InvalidURL) as exc:
            raise Refused(f"cannot fetch {url}: {exc}") from None
        except httpx.TransportError as exc:
            raise ConnectFailed(f"{type(exc).__name__}: {exc}") from None

    async def aclose(self) -> None:
        """Close the client and its connections."""
        await self._client.aclose()


async def follow(
    fetcher: Fetcher, url: str, rules: Rules, hop: Hop, *, html_only: bool = True, head: bool = False
) -> Response:
    """Fetch `url`, following up to `rules.max_redirects` redirects; `hop` clears every request first.

    For what is not a page (robots.txt): a page's redirect is routed instead, like a link. With
    `head`, a body past max_body_bytes is cut there rather than refused (a streaming fetcher's).
    A hop refused after a redirect carries that redirect's status.
    """
    hops = [url]
    status: int | None = None
    while True:
        current = hops[-1]
        try:
            on_wire = await hop(current)
        except BadURL as exc:
            raise Refused(f"redirect refused: {exc}", status_code=status, url=current) from None
        with paced(on_wire):
            if head:
                response = await _head(fetcher, current, rules)
            else:
                response = await fetcher.fetch(current, rules, html_only=html_only)
        location = response.location
        if location is None:
            return replace(response, url=url)
        status = response.status_code
        try:
            target = str(httpx.URL(current).join(location))
        except (httpx.InvalidURL, ValueError) as exc:
            bad = f"bad redirect Location {location[:200]!r}: {exc}"
            raise Refused(bad, status_code=status, url=current) from None
        if target in hops:
            why = f"redirect loop back to {target}"
        elif len(hops) > rules.max_redirects:
            why = f"more than {rules.max_redirects} redirects"
        else:
            hops.append(target)
            continue
        raise TooManyRedirects(why, status_code=status, url=current)


async def _head(fetcher: Fetcher, url: str, rules: Rules) -> Response:
    """`url`'s answer with the first max_body_bytes of its body; the rest is not read."""
    most = rules.max_body_bytes
    # Room for the piece that crosses `most`: the stream refuses it whole past its own limit.
    wider = rules.model_copy(update={"max_body_bytes": 2 * most})
    async with streamed(fetcher, url, wider) as answer:
        body = bytearray()
        try:
            async with aclosing(answer.pieces) as pieces:
                async for piece in pieces:
                    body += piece
                    if len(body) >= most:
                        break
        except TooLarge:
            pass  # one piece past twice the limit: what came before it is kept
        return Response(url, url, answer.status_code, answer.headers, bytes(body[:most]))


async def read_body(raw: AsyncIterator[bytes], encodings: Sequence[str], limit: int, status: int) -> bytes:
    """The whole body decoded from its `raw` chunks (see body_pieces for the limit and decoding)."""
    return b"".join([piece async for piece in body_pieces(raw, encodings, limit, status)])


async def body_pieces(
    raw: AsyncIterator[bytes], encodings: Sequence[str], limit: int, status: int
) -> AsyncGenerator[bytes, None]:
    """The body decoded from its `raw` chunks, a bounded piece at a time, cut with TooLarge once it (or
    what is received) passes `limit` bytes; so a compression bomb is never held, nor a long body."""
    coding = ", ".join(encodings) or "none"
    received = size = 0

    def counted(piece: bytes) -> bytes:
        nonlocal size
        size += len(piece)
        if size > limit:
            raise TooLarge(
                f"body exceeds max_body_bytes {limit} once decoded (Content-Encoding: {coding[:40]})",
                status_code=status,
            )
        return piece

    try:
        decoder = decoder_for(encodings)
        async for chunk in raw:
            received += len(chunk)
            if received > limit:
                raise TooLarge(f"body exceeds max_body_bytes {limit}", status_code=status)
            for piece in decoder.feed(chunk):
                yield counted(piece)
        for piece in decoder.flush():
            yield counted(piece)
    except decode_errors() as exc:
        raise BadResponse(
            f"body does not decode as its Content-Encoding {coding[:40]!r} says ({exc})", status_code=status
        ) from None
    except BadResponse as exc:
        exc.status_code = status
        raise
