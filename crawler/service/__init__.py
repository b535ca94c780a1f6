"""The one service layer under both the command line and the HTTP API: crawls, domains, recrawls,
stored pages, dead letters, the fleet. Each verb is written once here; `crawler.cli` and `crawler.api`
only translate to and from it.
"""

from crawler.service.control import Control
from crawler.service.crawls import CrawlsView, CrawlView, NewCrawl, SeriesView, check_crawl
from crawler.service.dead_letters import DeadGroup
from crawler.service.domains import DomainView
from crawler.service.fleet import FleetView
from crawler.service.pages import VersionsView
from crawler.service.recrawls import RecrawlView

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
