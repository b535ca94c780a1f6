"""Sink: the database the crawled pages are written to, and its migrations."""

# crawls: imported here so that the crawls table is in Base.metadata wherever the sink is.
from crawler.sink.crawls import CrawlStore
from crawler.sink.database import Database
from crawler.sink.groupcommit import GroupCommit
from crawler.sink.sql import PageRecord, Sink, migrate

__all__ = ["CrawlStore", "Database", "GroupCommit", "PageRecord", "Sink", "migrate"]
