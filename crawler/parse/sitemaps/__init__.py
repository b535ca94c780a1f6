"""Sitemaps read as a stream: XML urlset and sitemapindex, RSS and Atom feeds, plain text, gzipped or
not, within sitemaps.org's limits. What reading them leads to (the crawl's part) is not here.

    reader = SitemapReader(url)
    for entry in reader.read(chunks):   # or reader.feed(chunk) as chunks come, then reader.close()
        ...entry.loc, entry.lastmod...
    reader.report                       # kind, counts, skipped and why, truncated and why, bytes
"""

from crawler.parse.sitemaps.limits import MAX_BYTES, MAX_DEPTH, MAX_URLS, within_depth
from crawler.parse.sitemaps.reader import SitemapReader
from crawler.parse.sitemaps.report import SitemapEntry, SitemapKind, SitemapReport

__all__ = [
    "MAX_BYTES",
    "MAX_DEPTH",
    "MAX_URLS",
    "SitemapEntry",
    "SitemapKind",
    "SitemapReader",
    "SitemapReport",
    "within_depth",
]
