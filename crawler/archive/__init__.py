"""The WARC archive: every answer of an archived domain, as WARC/1.1 files any WARC reader reads."""

from crawler.archive.exchange import Archived, Exchange
from crawler.archive.reader import Record, Stored, read, records
from crawler.archive.writer import Archive

__all__ = ["Archive", "Archived", "Exchange", "Record", "Stored", "read", "records"]
