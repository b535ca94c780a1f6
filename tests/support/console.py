"""The web console in a real browser: Debian's Chromium driven by Playwright, every request it makes
recorded, screenshots kept as test artefacts."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from playwright.sync_api import Browser, Page, sync_playwright

from tests.support.browser import chromium

ARTEFACTS = Path(os.environ.get("CRAWLER_TEST_ARTEFACTS", Path(__file__).parents[2] / "artefacts"))
PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1280, "height": 800}
WIDTHS = (PHONE, DESKTOP)

# Each visible button of the page must be on screen, or in a table that scrolls sideways with its cue
# (the frame's shadow on that side) showing; no table may scroll without one, nor the page itself.
_OUT_OF_REACH = """() => {
  const width = document.documentElement.clientWidth;
  const cue = (frame, side) => {
    if (!frame || !frame.classList.contains("frame")) return false;
    // A table whose buttons are pinned at its right edge casts the shadow from their column.
    const pinned = side === "::after" && frame.querySelector("th.actions");
    const style = pinned ? getComputedStyle(pinned, "::before") : getComputedStyle(frame, side);
    return style.content !== "none" && style.opacity === "1";
  };
  const out = [];
  for (const b of document.querySelectorAll("main button")) {
    if (!b.offsetParent) continue;
    const r = b.getBoundingClientRect();
    if (r.left >= 0 && r.right <= width) continue;
    const scroller = b.closest(".scroll");
    const scrolls = scroller && scroller.scrollWidth > scroller.clientWidth;
    const side = r.left < 0 ? "::before" : "::after";
    if (!(scrolls && cue(scroller.parentElement, side))) {
      out.push(`${b.textContent} at x ${Math.round(r.left)}..${Math.round(r.right)} of ${width}, no cue`);
    }
  }
  for (const s of document.querySelectorAll(".scroll")) {
    if (!s.offsetParent || s.scrollWidth <= s.clientWidth + 1) continue;
    if (!cue(s.parentElement, "::before") && !cue(s.parentElement, "::after")) {
      out.push(`${s.querySelector("table").getAttribute("aria-label")} scrolls without a cue`);
    }
  }
  const page = document.documentElement.scrollWidth;
  if (page > width) out.push(`the page scrolls sideways: ${page} px wide in ${width}`);
  return out;
}"""


@dataclass
class Console:
    """A browser tab on the console, and every URL it asked for and every message it logged."""

    page: Page
    base: str
    requests: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def sign_in(self, token: str) -> None:
        """Enter `token` in the sign-in form."""
        self.page.get_by_label("API token").fill(token)
        self.page.get_by_role("button", name="Sign in").click()

    def go(self, section: str) -> None:
        """Open a section by its hash route (#crawls, #domains, #dead, #fleet)."""
        self.page.goto(f"{self.base}/#{section}")

    def screenshot(self, name: str) -> Path:
        """Save the whole page as artefacts/console/`name`.png; its path."""
        path = ARTEFACTS / "console" / f"{name}.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        self.page.screenshot(path=str(path), full_page=True)
        return path

    def out_of_reach(self) -> list[str]:
        """Visible buttons off screen with no cue that their table scrolls, and tables or a page that
        scroll sideways without one."""
        found: list[str] = self.page.evaluate(_OUT_OF_REACH)
        return found

    def outside(self) -> list[str]:
        """Requests that went anywhere but the API's own origin."""
        return [u for u in self.requests if not (u == self.base or u.startswith(self.base + "/"))]


@contextmanager
def browser() -> Iterator[Browser]:
    """Debian's headless Chromium, closed after."""
    with sync_playwright() as p:
        launched = p.chromium.launch(executable_path=chromium())
        try:
            yield launched
        finally:
            launched.close()


@contextmanager
def console(launched: Browser, base: str, viewport: dict[str, int] = DESKTOP) -> Iterator[Console]:
    """A fresh tab (its own session storage) on the console at `base`."""
    context = launched.new_context(viewport=viewport)  # type: ignore[arg-type]
    context.set_default_timeout(30_000)
    page = context.new_page()
    opened = Console(page, base)
    page.on("request", lambda r: opened.requests.append(r.url))
    page.on("console", lambda m: opened.errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: opened.errors.append(str(e)))
    try:
        page.goto(f"{base}/")
        yield opened
    finally:
        context.close()
