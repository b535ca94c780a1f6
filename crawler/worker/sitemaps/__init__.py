"""Sitemap tasks in a worker: finding an origin's sitemaps, reading each file, routing what it lists."""

from crawler.worker.sitemaps.done import SitemapDone
from crawler.worker.sitemaps.listing import Listing
from crawler.worker.sitemaps.reading import SitemapReading

__all__ = ["Listing", "SitemapDone", "SitemapReading"]
