"""The renderer's configuration (proxies.yaml `render:`) and one request's render options."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from crawler.config import css_to_xpath

WaitUntil = Literal["load", "domcontentloaded", "networkidle"]
WAIT_STATES: tuple[WaitUntil, ...] = ("load", "domcontentloaded", "networkidle")
Blockable = Literal["image", "font", "media", "stylesheet", "manifest", "texttrack"]


class RenderConfig(BaseModel):
    """proxies.yaml `render:`: present, the gateway renders `render_js=true` requests; read at start."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # Debian's chromium-headless-shell: Chromium's headless-only build, ~4x less CPU per render than
    # the full browser in headless mode (bench/README.md). The binary itself, not /usr/bin's script,
    # which runs it as a child: only a process launched directly dies with the gateway. A browser
    # Playwright downloads cannot work on a closed network.
    executable: str = "/usr/lib/chromium/chromium-headless-shell"
    browsers: int = Field(1, ge=1, le=64)  # Chromium processes
    contexts: int = Field(4, ge=1, le=64)  # renders at once per browser, each in a context of its own
    # A sticky session keeps its context (cookies, storage) across renders; after this many pages
    # it starts afresh, so a long session cannot grow without bound.
    pages_per_context: int = Field(50, ge=1, le=100_000)
    session_idle: float = Field(300.0, gt=0, le=86_400)  # an unused session's context is closed after
    # A browser whose process tree holds more than this is replaced once its renders end.
    max_rss_mb: int = Field(1024, ge=128, le=1_000_000)
    # Resource types never fetched (answered as blocked): what a parser cannot see costs only time.
    block: tuple[Blockable, ...] = ("image", "font", "media")
    max_requests: int = Field(300, ge=1, le=100_000)  # requests one page may make; more are refused
    launch_timeout: float = Field(30.0, gt=0, le=600)
    # Chromium's own sandbox (docs/security.md): off by default, since it needs a non-root user and
    # unprivileged user namespaces, which containers often lack; the renderer's other walls stay.
    sandbox: bool = False


@dataclass(frozen=True, slots=True)
class RenderAsk:
    """How one page is rendered: until which load state, then until which selector is in the DOM."""

    wait_until: WaitUntil = "load"
    wait_for: str | None = None


def render_options(query: Mapping[str, str]) -> RenderAsk:
    """The render options of a request; ValueError saying what is wrong."""
    asked = query.get("wait_until", "load")
    wait_until = next((w for w in WAIT_STATES if w == asked), None)
    if wait_until is None:
        raise ValueError(f"wait_until={asked!r}: one of {', '.join(WAIT_STATES)}")
    wait_for = query.get("wait_for") or None
    if wait_for is not None:
        if len(wait_for) > 500:
            raise ValueError("wait_for: a CSS selector of at most 500 characters")
        css_to_xpath(wait_for)  # ValueError naming the selector
    return RenderAsk(wait_until, wait_for)
