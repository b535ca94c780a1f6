"""The browser pool: N Chromium processes x M contexts; a fresh context per render, a sticky session
keeping its own; a browser replaced after a crash or once its process tree passes the RSS cap."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

from playwright.async_api import Browser, BrowserContext, Playwright, WebSocketRoute, async_playwright
from playwright.async_api import Error as PlaywrightError

from crawler.errors import ConfigError
from crawler.gateway.render.metrics import RenderMetrics
from crawler.gateway.render.options import RenderConfig
from crawler.gateway.render.processes import (
    FLAGS,
    NO_SANDBOX,
    find_marked,
    is_script,
    tree_rss,
    write_launchers,
)

log = logging.getLogger("crawler.gateway.render")
MARKER = "--crawler-gateway-browser="  # tells our Chromium processes apart in /proc


class BrowserGone(Exception):
    """The browser (or its page) crashed or was closed under a render."""


@dataclass(eq=False)
class Slot:
    """One browser process and the renders running in it."""

    index: int
    browser: Browser | None = None
    pid: int | None = None
    busy: int = 0
    renders: int = 0
    retire: str | None = None  # why it is to be replaced once its renders end (crash, rss)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    @property
    def usable(self) -> bool:
        return self.browser is not None and self.retire is None and self.browser.is_connected()


@dataclass(eq=False)
class Session:
    """A sticky session's context: its cookies and storage live as long as it does."""

    slot: Slot
    context: BrowserContext
    pages: int = 0
    used: float = field(default_factory=time.monotonic)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class BrowserPool:
    """Leases browser contexts; start() launches the browsers, close() ends every process."""

    def __init__(self, config: RenderConfig, metrics: RenderMetrics) -> None:
        self.config = config
        self._metrics = metrics
        self._slots = [Slot(i) for i in range(config.browsers)]
        self._free = asyncio.Semaphore(config.browsers * config.contexts)
        # By (API key id, session name): a key never gets another key's cookies or storage.
        self._sessions: dict[tuple[str, str], Session] = {}
        self._playwright: Playwright | None = None
        self._dir = tempfile.TemporaryDirectory(prefix="crawler-render-")
        self._token = uuid.uuid4().hex[:12]
        self._browser_exe = Path()
        self._closing = False

    async def start(self) -> None:
        """Start Playwright's driver and launch every browser; ConfigError if Chromium cannot start."""
        if not os.access(self.config.executable, os.X_OK):
            raise ConfigError(
                f"render.executable {self.config.executable!r} is not an executable: install Debian's "
                "chromium-headless-shell (`bash scripts/services --render` does) or point "
                "render.executable at a Chromium"
            )
        if is_script(self.config.executable):
            log.warning(
                "render.executable %s is a script: a browser it starts as a child may outlive a killed "
                "gateway; point it at the binary (e.g. /usr/lib/chromium/chromium-headless-shell)",
                self.config.executable,
            )
        node, self._browser_exe = write_launchers(Path(self._dir.name), self.config.executable)
        # Playwright reads the driver's path from the environment when it starts, and only then.
        before = os.environ.get("PLAYWRIGHT_NODEJS_PATH")
        os.environ["PLAYWRIGHT_NODEJS_PATH"] = str(node)
        try:
            self._playwright = await async_playwright().start()
        finally:
            if before is None:
                os.environ.pop("PLAYWRIGHT_NODEJS_PATH", None)
            else:
                os.environ["PLAYWRIGHT_NODEJS_PATH"] = before
        try:
            await asyncio.gather(*(self._launch(slot) for slot in self._slots))
        except PlaywrightError as exc:
            await self.close()
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise ConfigError(f"cannot launch {self.config.executable}: {first}") from None

    async def close(self) -> None:
        """Close every context and browser, then the driver (which ends whatever is left)."""
        self._closing = True
        for session in list(self._sessions.values()):
            with contextlib.suppress(Exception):
                await session.context.close()
        self._sessions.clear()
        for slot in self._slots:
            if slot.browser is not None:
                with contextlib.suppress(Exception):
                    await slot.browser.close()
                slot.browser = None
        if self._playwright is not None:
            with contextlib.suppress(Exception):
                await self._playwright.stop()
            self._playwright = None
        self._dir.cleanup()

    @property
    def pids(self) -> list[int]:
        """The browsers' main process ids (those found)."""
        return [s.pid for s in self._slots if s.pid is not None]

    def health(self) -> dict[str, int]:
        """What /healthz reports of the renderer."""
        return {
            "browsers": sum(s.usable for s in self._slots),
            "contexts": self.config.contexts,
            "rendering": sum(s.busy for s in self._slots),
            "sessions": len(self._sessions),
        }

    async def _launch(self, slot: Slot) -> None:
        assert self._playwright is not None
        marker = f"{MARKER}{self._token}-{slot.index}-{uuid.uuid4().hex[:6]}"
        browser = await self._playwright.chromium.launch(
            executable_path=self._browser_exe,
            args=[*FLAGS, *([] if self.config.sandbox else [NO_SANDBOX]), marker],
            chromium_sandbox=self.config.sandbox,
            headless=True,
            timeout=self.config.launch_timeout * 1000,
            handle_sigint=False,
            handle_sigterm=False,
            handle_sighup=False,
        )
        slot.browser, slot.retire, slot.renders = browser, None, 0
        slot.pid = await asyncio.to_thread(find_marked, os.getpid(), marker)
        browser.on("disconnected", lambda _: self._crashed(slot, browser))

    def _crashed(self, slot: Slot, browser: Browser) -> None:
        if slot.browser is browser and slot.retire is None and not self._closing:
            slot.retire = "crash"
            log.warning("browser %d disconnected (crashed or killed): it is replaced", slot.index)

    async def _renew(self, slot: Slot) -> None:
        """Replace the slot's browser if it is to be retired and no render runs in it any more."""
        async with slot.lock:
            if slot.usable or slot.busy:
                return
            reason = slot.retire or "crash"
            old = slot.browser
            slot.browser = None
            for name, session in list(self._sessions.items()):
                if session.slot is slot:
                    del self._sessions[name]
            if old is not None:
                with contextlib.suppress(Exception):
                    await old.close()
            self._metrics.restarts.labels(reason).inc()
            try:
                await self._launch(slot)
            except PlaywrightError as exc:
                slot.retire = "crash"  # tried again at the next lease
                raise BrowserGone(f"browser {slot.index} did not start again: {exc}") from None

    def _pick(self) -> Slot:
        usable = [s for s in self._slots if s.usable] or [s for s in self._slots if not s.busy]
        return min(usable or self._slots, key=lambda s: s.busy)

    @contextlib.asynccontextmanager
    async def lease(self, session: tuple[str, str] | None) -> AsyncIterator[BrowserContext]:
        """A context to render one page in: fresh (closed after), or the session's own."""
        async with self._free:
            if session is not None:
                async with self._session(session) as context:
                    yield context
                return
            slot = self._pick()
            if not slot.usable:
                await self._renew(slot)
            slot.busy += 1
            try:
                context = await self._new_context(slot)
                try:
                    yield context
                finally:
                    with contextlib.suppress(Exception):
                        await context.close()
            finally:
                await self._done(slot)

    @contextlib.asynccontextmanager
    async def _session(self, name: tuple[str, str]) -> AsyncIterator[BrowserContext]:
        self._expire()
        held = self._sessions.get(name)
        if held is None or not held.slot.usable or held.pages >= self.config.pages_per_context:
            if held is not None:
                self._sessions.pop(name, None)
                with contextlib.suppress(Exception):
                    await held.context.close()
            slot = self._pick()
            if not slot.usable:
                await self._renew(slot)
            held = self._sessions[name] = Session(slot, await self._new_context(slot))
        async with held.lock:  # one page at a time in a session, as in one browser tab
            held.slot.busy += 1
            held.pages += 1
            held.used = time.monotonic()
            try:
                yield held.context
            finally:
                await self._done(held.slot)

    async def _new_context(self, slot: Slot) -> BrowserContext:
        """A context in `slot`'s browser whose pages can open no WebSocket and run no service worker
        (neither would pass through interception)."""
        try:
            assert slot.browser is not None
            context = await slot.browser.new_context(service_workers="block")
            await context.route_web_socket("**/*", _refuse_socket)
        except PlaywrightError as exc:
            slot.retire = slot.retire or "crash"
            raise BrowserGone(f"browser {slot.index}: {exc}") from None
        return context

    def _expire(self) -> None:
        now = time.monotonic()
        for name, session in list(self._sessions.items()):
            if now - session.used > self.config.session_idle and not session.lock.locked():
                del self._sessions[name]
                asyncio.get_running_loop().create_task(session.context.close()).add_done_callback(
                    lambda t: t.cancelled() or t.exception()
                )

    async def _done(self, slot: Slot) -> None:
        slot.busy -= 1
        slot.renders += 1
        if slot.retire is None and slot.pid is not None:
            rss = await asyncio.to_thread(tree_rss, slot.pid)
            self._metrics.rss.labels(str(slot.index)).set(rss)
            if rss > self.config.max_rss_mb * 1024 * 1024:
                slot.retire = "rss"
                log.warning(
                    "browser %d holds %.0f MB (max_rss_mb %d): it is replaced",
                    slot.index,
                    rss / 2**20,
                    self.config.max_rss_mb,
                )
        if slot.retire is not None and not slot.busy:
            await self._renew(slot)


async def _refuse_socket(socket: WebSocketRoute) -> None:
    # Never connected to a server: the page sees its WebSocket closed.
    await socket.close(code=1008, reason="not served while rendering")
