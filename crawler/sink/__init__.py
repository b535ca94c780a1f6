"""Sink: the database the crawled pages are written to, and its migrations."""

from crawler.sink.groupcommit import GroupCommit
from crawler.sink.sql import PageRecord, Sink, migrate

__all__ = ["GroupCommit", "PageRecord", "Sink", "migrate"]
