"""The one service layer under both the command line and the HTTP API: crawls, domains, stored pages,
dead letters, health, the fleet. Each verb is written once here; `crawler.cli` and `crawler.api` only
translate to and from it.
"""

from crawler.service.control import (
    Control,
    CrawlsView,
    CrawlView,
    DeadGroup,
    DomainView,
    FleetView,
    NewCrawl,
    RecrawlView,
    SeriesView,
    VersionsView,
    check_crawl,
)

__all__ = [
    "Control",
    "CrawlView",
    "CrawlsView",
    "DeadGroup",
    "DomainView",
    "FleetView",
    "NewCrawl",
    "RecrawlView",
    "SeriesView",
    "VersionsView",
    "check_crawl",
]
