"""What reading a sitemap yields: its entries, and a report of the kind, the counts and any truncation."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import NamedTuple


class SitemapKind(StrEnum):
    """The kinds of body read as a sitemap."""

    URLSET = "urlset"
    INDEX = "sitemapindex"  # its entries are sitemaps, to read in turn (see limits.within_depth)
    TEXT = "text"
    RSS = "rss"
    ATOM = "atom"


class SitemapEntry(NamedTuple):
    """A listed URL (absolute, http or https, not canonicalised) and when it last changed, in UTC."""

    loc: str
    lastmod: datetime | None


@dataclass(slots=True)
class SitemapReport:
    """How a reading went; complete once the entries are used up (or the reader closed)."""

    url: str
    kind: SitemapKind | None = None
    entries: int = 0  # yielded
    skipped: dict[str, int] = field(default_factory=dict)  # why -> how many entries
    truncated: str | None = None  # why the rest of the file was not read
    gzip: bool = False
    bytes_read: int = 0  # as fetched (compressed, if gzip)
    bytes_uncompressed: int = 0

    def skip(self, why: str) -> None:
        """Count an entry left out, and why."""
        self.skipped[why] = self.skipped.get(why, 0) + 1

    def truncate(self, why: str) -> None:
        """Note that reading stops here; the first reason stands."""
        if self.truncated is None:
            self.truncated = why

    def summary(self) -> str:
        """One line for logs and commands."""
        skipped = ", ".join(f"{n} {why}" for why, n in sorted(self.skipped.items())) or "none"
        size = f"{self.bytes_uncompressed} bytes" + (f" ({self.bytes_read} gzipped)" if self.gzip else "")
        cut = f"; truncated: {self.truncated}" if self.truncated else ""
        return f"{self.url}: {self.kind or 'unknown'}, {self.entries} entries, skipped {skipped}, {size}{cut}"
