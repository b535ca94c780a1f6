"""Crawler traps: URLs that lead nowhere but on, spotted before they are routed."""

from __future__ import annotations

from functools import lru_cache
from urllib.parse import urlsplit

from crawler.config import Rules
from crawler.names import LINKS_REMEMBERED

MAX_SEGMENTS = 64


def trap(url: str, rules: Rules) -> str | None:
    """Why a canonical URL looks like a trap, or None if it does not."""
    if len(url) > rules.max_url_length:
        return f"URL longer than max_url_length {rules.max_url_length}"
    depth, run = _path_shape(url)
    if depth > MAX_SEGMENTS:
        return f"path deeper than {MAX_SEGMENTS} segments"
    if run > rules.max_path_repeats:
        return f"a run of path segments repeats {run} times (max_path_repeats {rules.max_path_repeats})"
    return None


@lru_cache(maxsize=LINKS_REMEMBERED)
def _path_shape(url: str) -> tuple[int, int]:
    # Remembered: the router checks every link of every page, and pages of a site share most links.
    segments = [s for s in urlsplit(url).path.split("/") if s]
    if len(segments) > MAX_SEGMENTS:
        return len(segments), 0
    return len(segments), repeated_run(segments)


def repeated_run(segments: list[str]) -> int:
    """The most times any run of segments repeats back to back: /a/b/a/b/a/b -> 3, /a/a -> 2."""
    best = 1
    n = len(segments)
    for width in range(1, n // 2 + 1):
        for start in range(n - 2 * width + 1):
            times = 1
            while (
                start + (times + 1) * width <= n
                and segments[start + times * width : start + (times + 1) * width]
                == segments[start : start + width]
            ):
                times += 1
            best = max(best, times)
    return best
