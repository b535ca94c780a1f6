"""What a worker's reading of sitemaps came to: each file's outcome, and each URL listed."""

from __future__ import annotations

from crawler.monitor.metrics.declared import Declarations


class SitemapMetrics:
    """Sitemap files read and the URLs they listed, by outcome."""

    def __init__(self, declared: Declarations) -> None:
        self.sitemap_files = declared.counter("crawler_sitemap_files")
        self.sitemap_urls = declared.counter("crawler_sitemap_urls")

    def observe_sitemap_file(self, domain: str, outcome: str) -> None:
        """A sitemap file's reading came to `outcome`."""
        self.sitemap_files.labels(domain, outcome).inc()

    def observe_sitemap_url(self, domain: str, outcome: str, reason: str, n: int = 1) -> None:
        """`n` URLs a sitemap listed came to `outcome` (for "dropped", because of `reason`)."""
        if n:
            self.sitemap_urls.labels(domain, outcome, reason).inc(n)
