"""Scope: where URLs may go under a crawl's configuration, and how they are spelled canonically."""

from __future__ import annotations

from crawler.config import CrawlConfig
from crawler.errors import BadURL
from crawler.frontier.hosts import follows
from crawler.frontier.urls import canonicalise, host_of


class Scope:
    """The canonical form of URLs and the configured domain owning them; `config` may be swapped live."""

    def __init__(self, config: CrawlConfig) -> None:
        self.config = config

    def canonical(self, url: str, base: str | None = None) -> str:
        """The canonical form of `url` (resolved against `base`); BadURL if it cannot be crawled."""
        return canonicalise(url, base, self.config.dropped_params)

    def domain(self, url: str, host: str | None = None) -> str | None:
        """The configured domain of a canonical URL (of `host`, if known), or a discovered host itself
        (`discover: follow: all`); BadURL if out of scope."""
        host = host_of(url) if host is None else host
        domain = self.config.domain_of(host)
        if domain is None and self.config.discovered(host):
            if follows(self.config, host):
                return host
            raise BadURL(f"{url}: host is out of discover's scope in domains.yaml")
        if domain is None and not self.config.follow_other_domains:
            raise BadURL(f"{url}: host is not in any configured domain of domains.yaml")
        return domain
