"""The sitemap reader: chunks of a fetched body in, entries out, within sitemaps.org's limits.

It tells the kind by the body's first bytes (after gunzipping and a byte order mark or whitespace):
`<` is XML (a sitemap, an index or a feed, by its root), anything else a text sitemap.
"""

from __future__ import annotations

from collections.abc import Generator, Iterable, Iterator

from crawler.errors import SitemapError
from crawler.parse.sitemaps.body import Body
from crawler.parse.sitemaps.lastmod import parse_lastmod
from crawler.parse.sitemaps.limits import MAX_BYTES, MAX_URLS
from crawler.parse.sitemaps.locs import check_loc
from crawler.parse.sitemaps.report import SitemapEntry, SitemapReport
from crawler.parse.sitemaps.text import TextLines
from crawler.parse.sitemaps.xml import XmlEntries

_BOM = b"\xef\xbb\xbf"
_UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")  # lxml reads UTF-16 XML; a text sitemap is UTF-8
_BLANK = b" \t\r\n"


class SitemapReader:
    """Reads one sitemap file from `url`: its chunks to `read` (or pushed to `feed`, then `close`), the
    entries as they come, then `report`. SitemapError for no sitemap; a limit or a break truncates."""

    def __init__(self, url: str, *, max_urls: int = MAX_URLS, max_bytes: int = MAX_BYTES) -> None:
        self.report = SitemapReport(url=url)
        self._max_urls = max_urls
        self._body = Body(self.report, max_bytes)
        self._parser: XmlEntries | TextLines | None = None
        self._lead = b""  # the body's first bytes, until there are enough to tell a byte order mark
        self._at_start = True
        self._base: str | None = None  # what relative locations resolve against (XML only)
        self._closed = False

    @property
    def done(self) -> bool:
        """True once nothing more will be read: the caller can stop fetching the body."""
        return self._closed or self.report.truncated is not None

    def read(self, chunks: Iterable[bytes]) -> Generator[SitemapEntry, None, None]:
        """The entries of the body in `chunks`, then the reader is closed."""
        for chunk in chunks:
            yield from self.feed(chunk)
            if self.done:
                break
        yield from self.close()

    def feed(self, chunk: bytes) -> Iterator[SitemapEntry]:
        """The entries that end within the next `chunk` of the body; use them all before feeding on."""
        if self.done:
            return
        for piece in self._body.feed(chunk):
            yield from self._parse(piece)
            if self.done:
                return
        self._check_started()

    def close(self) -> Iterator[SitemapEntry]:
        """The last entries, once the body has ended; SitemapError if it was none of the kinds."""
        if self._closed:
            return
        if self.report.truncated is None:
            for piece in self._body.close():
                yield from self._parse(piece)
            if self._parser is None:
                yield from self._parse(b"", final=True)
        self._check_started()
        if self._parser is None:
            raise SitemapError(f"{self.report.url[:200]}: not a sitemap, the body is empty")
        if self.report.truncated is None:
            yield from self._entries(self._parser.close())
        self._closed = True

    def _check_started(self) -> None:
        # Cut before its kind was known (a corrupt gzip, a cap in leading whitespace): no sitemap.
        if self._parser is None and self.report.truncated is not None:
            raise SitemapError(f"{self.report.url[:200]}: not a sitemap, {self.report.truncated}")

    def _parse(self, piece: bytes, final: bool = False) -> Iterator[SitemapEntry]:
        if self._parser is None:
            piece = self._sniff(piece, final)
            if self._parser is None:
                return
        yield from self._entries(self._parser.feed(piece))

    def _sniff(self, piece: bytes, final: bool) -> bytes:
        """Chooses the parser by the body's first bytes; returns what of them it is to read."""
        lead, self._lead = self._lead + piece, b""
        if self._at_start:
            if len(lead) < len(_BOM) and not final:
                self._lead = lead
                return b""
            self._at_start = False
            if lead.startswith(_UTF16_BOMS):
                self._parser = XmlEntries(self.report)
                return lead
            lead = lead.removeprefix(_BOM)
        # Leading whitespace goes: sites (and plugins) put some before `<?xml`, which libxml2 refuses.
        lead = lead.lstrip(_BLANK)
        if lead.startswith(b"<"):
            self._parser = XmlEntries(self.report)
            self._base = self.report.url
        elif lead:
            self._parser = TextLines(self.report)
        return lead

    def _entries(self, found: Iterator[tuple[str, str | None]]) -> Iterator[SitemapEntry]:
        report = self.report
        for loc, lastmod in found:
            url, refused = check_loc(loc, self._base)
            if refused is not None:
                report.skip(refused)
                continue
            if report.entries >= self._max_urls:
                report.truncate(f"more than {self._max_urls} URLs")
                return
            report.entries += 1
            yield SitemapEntry(url, parse_lastmod(lastmod))
