"""The limits a sitemap is read within: sitemaps.org's per file, and how deep indexes may nest.

Depth counts the indexes above a sitemap: one named by robots.txt or domains.yaml is at depth 0, one
listed by an index at depth d is at depth d + 1. The protocol has one level (an index of sitemaps);
nested indexes occur in the wild, so a little more is allowed, and no more, against loops and fan-out.
"""

from __future__ import annotations

MAX_URLS = 50_000  # per file, a sitemap's URLs or an index's sitemaps (sitemaps.org)
MAX_BYTES = 50 * 1024 * 1024  # per file, uncompressed (sitemaps.org); also the gzip cap
MAX_DEPTH = 3
# Longer URLs are refused by the frontier anyway (crawler/frontier/urls.py, which parse cannot import).
MAX_URL_LENGTH = 2048


def within_depth(depth: int) -> bool:
    """Whether a sitemap at `depth` may be read (so an index at MAX_DEPTH has its children dropped)."""
    return 0 <= depth <= MAX_DEPTH
