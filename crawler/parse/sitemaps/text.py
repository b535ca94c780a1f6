"""Plain-text sitemaps: one URL per line, UTF-8 (sitemaps.org).

Blank lines are passed over, junk lines skipped and counted; but a body whose first line is no
http(s) URL is not a text sitemap at all (an HTML page, JSON, a bomb of zeros) and raises.
"""

from __future__ import annotations

from collections.abc import Iterator

from crawler.errors import SitemapError
from crawler.parse.sitemaps.limits import MAX_URL_LENGTH
from crawler.parse.sitemaps.locs import TOO_LONG
from crawler.parse.sitemaps.report import SitemapKind, SitemapReport

# A line is held at most this long: a longer one cannot be a URL to keep, and is dropped as it streams.
MAX_LINE = 2 * MAX_URL_LENGTH
NOT_UTF8 = "not UTF-8"
_URL_START = (b"http://", b"https://")


class TextLines:
    """Feeds text in, yields its lines that may be URLs (the reader checks them)."""

    def __init__(self, report: SitemapReport) -> None:
        self._report = report
        self._pending = b""  # the start of a line whose end has not come yet
        self._dropping = False  # inside a line too long to hold, until its end
        self._first = True

    def feed(self, data: bytes) -> Iterator[tuple[str, None]]:
        """The lines that end within `data`."""
        start = 0
        while (end := data.find(b"\n", start)) >= 0:
            line, start = data[start:end], end + 1
            if self._dropping:
                self._dropping = False
                continue
            line, self._pending = self._pending + line, b""
            yield from self._line(line)
        if self._dropping:
            return
        self._pending += data[start:]
        if len(self._pending) > MAX_LINE:
            self._too_long(self._pending)
            self._pending, self._dropping = b"", True

    def close(self) -> Iterator[tuple[str, None]]:
        """The last line, if the body does not end with a newline."""
        if self._pending and not self._dropping:
            yield from self._line(self._pending)

    def _line(self, line: bytes) -> Iterator[tuple[str, None]]:
        line = line.strip()
        if not line:
            return
        if len(line) > MAX_LINE:
            self._too_long(line)
            return
        self._sniff(line)
        try:
            yield line.decode("utf-8"), None
        except UnicodeDecodeError:
            self._report.skip(NOT_UTF8)

    def _too_long(self, line: bytes) -> None:
        self._sniff(line.lstrip())
        self._report.skip(TOO_LONG)

    def _sniff(self, line: bytes) -> None:
        if self._first:
            self._first = False
            if not line[:8].lower().startswith(_URL_START):
                shown = line[:60].decode("utf-8", "replace")
                raise SitemapError(
                    f"{self._report.url[:200]}: not a sitemap, neither XML nor a list of URLs "
                    f"(its first line begins {shown!r})"
                )
            self._report.kind = SitemapKind.TEXT
