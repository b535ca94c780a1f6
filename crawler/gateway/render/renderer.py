"""One render: a context leased from the pool, the page's document (already fetched through an exit)
served to it, every further request guarded and fetched through that exit, the DOM read once the
page settles, all within the request's deadline; a crashed browser is replaced and the page tried
again if time is left."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import aiohttp
from playwright.async_api import Error as PlaywrightError
from playwright.async_api import Page
from prometheus_client import CollectorRegistry

from crawler.fetch.connect import GuardedBackend
from crawler.fetch.decoding import ACCEPT_ENCODING
from crawler.fetch.fetcher import read_body
from crawler.gateway.pinning import pinned_request
from crawler.gateway.render.browsers import BrowserGone, BrowserPool
from crawler.gateway.render.intercept import Answer, Interception, Send
from crawler.gateway.render.metrics import RenderMetrics
from crawler.gateway.render.options import RenderAsk, RenderConfig
from crawler.gateway.session import exit_session

if TYPE_CHECKING:  # proxies.py reads the renderer's options: imported at run time, a cycle
    from crawler.gateway.proxies import ExitProxy

log = logging.getLogger("crawler.gateway.render")
# Below this much time left, a crashed render is not tried again: it could not finish.
RETRY_FLOOR = 1.0
MAX_SUBRESOURCE = 20_000_000  # bytes of one request a page makes (a script, an API answer)
# Headers a page's request keeps when the gateway sends it on (the rest are Chromium's own).
FORWARDED = frozenset(
    {"accept", "accept-language", "content-type", "cookie", "referer", "origin", "x-requested-with"}
)


@dataclass(frozen=True, slots=True)
class Document:
    """The page's own answer, as the gateway fetched it through `proxy` (an exit)."""

    url: str
    status: int
    headers: list[tuple[str, str]]
    body: bytes
    proxy: ExitProxy


@dataclass(frozen=True, slots=True)
class Rendered:
    """The DOM after the page's scripts ran, and where the page ended up."""

    html: str
    final_url: str
    requests: int
    refused: tuple[str, ...]


class RenderFailed(Exception):
    """The page could not be rendered; `kind` is the answer's failure kind (timeout is transient).
    Its text is the gateway's own, fit for the client; `detail` (the browser's words) is for the log."""

    def __init__(self, kind: str, message: str, detail: str | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.detail = detail or message


class Renderer:
    """The gateway's renderer: its browser pool and the HTTP session pages' requests go out on."""

    def __init__(
        self, config: RenderConfig, registry: CollectorRegistry, user_agent: str, ca_file: str | None = None
    ) -> None:
        self.config = config
        self.metrics = RenderMetrics(registry)
        self.pool = BrowserPool(config, self.metrics)
        self._user_agent = user_agent
        self._ca_file = ca_file
        self._session: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        """Launch the browsers; ConfigError if Chromium cannot start."""
        self._session = exit_session(self._ca_file)
        try:
            await self.pool.start()
        except BaseException:
            await self._session.close()
            raise

    async def close(self) -> None:
        """End every browser process and the session."""
        await self.pool.close()
        if self._session is not None:
            await self._session.close()

    async def render(
        self,
        document: Document,
        how: RenderAsk,
        session: tuple[str, str] | None,
        guard: GuardedBackend,
        deadline: float,
        max_bytes: int,
    ) -> Rendered:
        """Render `document` by `deadline` (monotonic), its DOM at most `max_bytes` of UTF-8;
        RenderFailed saying why not. A `session` (API key id, name) keeps its context."""
        started = time.monotonic()
        attempt = 0
        while True:
            attempt += 1
            try:
                async with asyncio.timeout(deadline - time.monotonic()):
                    rendered = await self._once(document, how, session, guard, deadline, max_bytes)
            except TimeoutError:
                self.metrics.renders.labels("timeout").inc()
                raise RenderFailed(
                    "timeout",
                    f"the page did not settle ({how.wait_until}"
                    + (f", then {how.wait_for!r}" if how.wait_for else "")
                    + f") within the deadline ({deadline - started:.1f}s)",
                ) from None
            except BrowserGone as exc:
                if deadline - time.monotonic() > RETRY_FLOOR and attempt < 3:
                    log.warning("render of %s: %s; trying again in a new browser", document.url, exc)
                    continue
                self.metrics.renders.labels("crashed").inc()
                raise RenderFailed("timeout", "the browser crashed while rendering", str(exc)) from None
            self.metrics.renders.labels("rendered").inc()
            self.metrics.seconds.observe(time.monotonic() - started)
            return rendered

    async def _once(
        self,
        document: Document,
        how: RenderAsk,
        session: tuple[str, str] | None,
        guard: GuardedBackend,
        deadline: float,
        max_bytes: int,
    ) -> Rendered:
        interception = Interception(
            document.url,
            Answer(document.status, document.headers, document.body),
            self._sender(document.proxy, guard, deadline),
            frozenset(self.config.block),
            self.metrics,
            self.config.max_requests,
        )
        async with self.pool.lease(session) as context:
            try:
                page = await context.new_page()
                left_ms = max((deadline - time.monotonic()) * 1000, 1)
                page.set_default_timeout(left_ms)
                page.set_default_navigation_timeout(left_ms)
                await page.route("**/*", interception.handle)
                crashed = asyncio.get_running_loop().create_future()
                page.on("crash", lambda _: _settle_future(crashed))
                try:
                    html = await _first(self._settle(page, document.url, how, max_bytes), crashed)
                finally:
                    await page.close()
            except PlaywrightError as exc:
                if _gone(exc):
                    raise BrowserGone(str(exc).splitlines()[0]) from None
                raise RenderFailed("bad_response", "rendering failed", str(exc).splitlines()[0]) from None
        final = interception.landed.get(page.url, page.url)
        if urlsplit(final).scheme not in ("http", "https"):
            raise RenderFailed("refused", f"the page navigated away to {final[:100]} (refused or failed)")
        return Rendered(html, final, interception.requests, tuple(interception.refused))

    async def _settle(self, page: Page, url: str, how: RenderAsk, max_bytes: int) -> str:
        try:
            await page.goto(url, wait_until=how.wait_until)
        except PlaywrightError as exc:
            # A script that navigates while the page loads (a client-side redirect) interrupts
            # goto; the page then settles at its new address.
            if "interrupted by another navigation" not in str(exc) and "ERR_ABORTED" not in str(exc):
                raise
        await page.wait_for_load_state(how.wait_until)
        if how.wait_for:
            await page.wait_for_selector(how.wait_for, state="attached")
        while True:
            try:
                # Measured in the page first: a DOM past the limit is never carried over whole.
                size = await page.evaluate(_DOM_SIZE)
                if isinstance(size, int | float) and size > max_bytes:
                    raise RenderFailed("too_large", f"the rendered page exceeds max_body_bytes ({max_bytes})")
                return await page.content()
            except PlaywrightError as exc:
                if "navigating" not in str(exc):
                    raise
                await page.wait_for_load_state(how.wait_until)

    def _sender(self, proxy: ExitProxy, guard: GuardedBackend, deadline: float) -> Send:
        session = self._session
        assert session is not None
        user_agent = self._user_agent

        async def send(method: str, url: str, headers: dict[str, str], body: bytes | None) -> Answer:
            parts = urlsplit(url)
            host = (parts.hostname or "").lower()
            port = parts.port or (443 if parts.scheme == "https" else 80)
            ips = await guard.allowed(host, port)  # Refused for a private address
            sent = {k: v for k, v in headers.items() if k.lower() in FORWARDED}
            sent["User-Agent"] = user_agent
            sent["Accept-Encoding"] = ACCEPT_ENCODING
            # Pinned to the address the guard cleared, https too, as the gateway's own requests are.
            target, sent["Host"], server_name = pinned_request(url, str(ips[0]))
            options = proxy.options(sent, server_name is not None)
            async with asyncio.timeout(max(deadline - time.monotonic(), 0.01)):
                async with session.request(
                    method, target, server_hostname=server_name, data=body, allow_redirects=False, **options
                ) as resp:
                    raw = await read_body(
                        resp.content.iter_any(),
                        resp.headers.getall("Content-Encoding", []),
                        MAX_SUBRESOURCE,
                        resp.status,
                    )
                    return Answer(resp.status, list(resp.headers.items()), raw)

        return send


# The DOM's size as page.content() would serialize it (UTF-16 code units: close to its UTF-8 bytes).
_DOM_SIZE = "() => (document.documentElement ? document.documentElement.outerHTML.length : 0)"


def _gone(exc: PlaywrightError) -> bool:
    text = str(exc)
    return any(s in text for s in ("closed", "crash", "Target page", "disconnected", "has been closed"))


def _settle_future(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


async def _first(work: Coroutine[Any, Any, str], crashed: asyncio.Future[None]) -> str:
    """`work`'s result, or BrowserGone if the page crashes first."""
    task = asyncio.ensure_future(work)
    try:
        waited: set[asyncio.Future[Any]] = {task, crashed}
        done, _ = await asyncio.wait(waited, return_when=asyncio.FIRST_COMPLETED)
    finally:
        if not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    if task in done:
        return task.result()
    raise BrowserGone("the page's renderer process crashed")
