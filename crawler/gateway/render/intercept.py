"""Interception: every request a rendered page makes is answered by the gateway, never by Chromium's
own network stack. Each one (navigation, subresource, fetch(), each redirect hop) passes the
private-network guard and goes out through the exit that carried the page's document."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from urllib.parse import urljoin, urlsplit

from playwright.async_api import Error as PlaywrightError
from playwright.async_api import Route

from crawler.errors import Refused
from crawler.fetch.fetcher import REDIRECTS
from crawler.gateway.render.metrics import RenderMetrics

log = logging.getLogger("crawler.gateway.render")
MAX_HOPS = 10
# Framing the gateway undoes when it reads a body (decoded, whole), so it must not be passed on.
DROPPED = frozenset({"content-encoding", "content-length", "transfer-encoding", "connection", "keep-alive"})
# What a redirect to another origin must not carry on.
CREDENTIALS = frozenset({"cookie", "authorization", "proxy-authorization"})


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return parts.scheme, (parts.hostname or "").lower(), port


@dataclass(frozen=True, slots=True)
class Answer:
    """One hop's answer: status, headers and body."""

    status: int
    headers: list[tuple[str, str]]
    body: bytes


# (method, url, headers, body) -> the answer; raises Refused (guard), FetchError or OSError.
Send = Callable[[str, str, dict[str, str], bytes | None], Awaitable[Answer]]


@dataclass(eq=False)
class Interception:
    """Answers one render's requests; `landed` maps a navigated URL to where its redirects ended."""

    page_url: str
    document: Answer
    send: Send
    blocked: frozenset[str]
    metrics: RenderMetrics
    limit: int
    landed: dict[str, str] = field(default_factory=dict)
    requests: int = 0
    refused: list[str] = field(default_factory=list)
    _document_served: bool = False

    async def handle(self, route: Route) -> None:
        """The route handler: block, refuse, or fetch through the gateway and fulfill."""
        request = route.request
        url = request.url
        try:
            if not self._document_served and url == self.page_url and request.is_navigation_request():
                self._document_served = True  # fetched already, through the pool's exit choice
                await self._fulfill(route, self.document)
                return
            if request.resource_type in self.blocked:
                self.metrics.requests.labels("blocked").inc()
                await route.abort("blockedbyclient")
                return
            self.requests += 1
            if self.requests > self.limit:
                self.metrics.requests.labels("over_limit").inc()
                await route.abort("blockedbyclient")
                return
            try:
                final, answer = await self._follow(
                    request.method, url, request.headers, request.post_data_buffer
                )
            except Refused as exc:
                self.metrics.requests.labels("refused").inc()
                self.refused.append(url)
                log.warning("render of %s: refused %s %s (%s)", self.page_url, request.method, url, exc)
                await route.abort("blockedbyclient")
                return
            except Exception as exc:  # any failure of one request: the page sees a failed request
                self.metrics.requests.labels("failed").inc()
                log.info("render of %s: %s failed (%s)", self.page_url, url, exc)
                await route.abort("failed")
                return
            self.metrics.requests.labels("fetched").inc()
            if final != url and request.is_navigation_request() and request.frame.parent_frame is None:
                self.landed[url] = final
            await self._fulfill(route, answer)
        except PlaywrightError:
            pass  # the page went away (closed, navigated, crashed) while its request was answered

    async def _follow(
        self, method: str, url: str, headers: dict[str, str], body: bytes | None
    ) -> tuple[str, Answer]:
        """The answer at the end of `url`'s redirects, each hop guarded: (final URL, answer).

        Chromium does not re-intercept a redirect fulfilled to it, so the hops are followed here; a
        hop to another origin drops the page's cookies (and credentials), as a browser would.
        """
        sent = {k: v for k, v in headers.items() if k.lower() != "host"}
        for _ in range(MAX_HOPS + 1):
            if urlsplit(url).scheme not in ("http", "https"):
                raise Refused(f"{url[:100]}: only http(s) is fetched")
            answer = await self.send(method, url, sent, body)
            location = next((v for k, v in answer.headers if k.lower() == "location"), None)
            if answer.status not in REDIRECTS or not location:
                return url, answer
            hop = urljoin(url, location.strip())
            if _origin(hop) != _origin(url):
                sent = {k: v for k, v in sent.items() if k.lower() not in CREDENTIALS}
            url = hop
            if answer.status in (301, 302, 303) and method != "HEAD":
                method, body = "GET", None
        raise Refused(f"more than {MAX_HOPS} redirects")

    @staticmethod
    async def _fulfill(route: Route, answer: Answer) -> None:
        headers = {k: v for k, v in answer.headers if k.lower() not in DROPPED}
        await route.fulfill(status=answer.status, headers=headers, body=answer.body)
