"""A delivery being handled (its page, its try, its crawl's options), and its line in the pages log."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from crawler.frontier.crawls import CrawlOptions
from crawler.frontier.delivery import Delivery
from crawler.frontier.message import CrawlMessage
from crawler.monitor import logs
from crawler.worker.page import Visit

pages_log = logging.getLogger("crawler.pages")  # one line per page outcome: verbose
ROBOTS = "robots"  # the skip reason (crawler_pages_skipped_total{reason}) of a page robots.txt keeps out


@dataclass(frozen=True, slots=True)
class Handling:
    """A delivery being handled: its queue's domain, its message and page, its try, its crawl's options."""

    domain: str
    message: Delivery
    crawl: CrawlMessage
    url: str
    attempts: int
    options: CrawlOptions
    first: bool  # its first try: the page counts against max_pages now

    def logged(self, kind: str, visit: Visit, **fields: Any) -> None:
        """The page's line in the pages log: how its visit went, and to what `kind` of end."""
        task, status, failure = visit.visited.task, visit.visited.answered.status_code, visit.failure
        logs.outcome(
            pages_log,
            kind,
            url=task.url,
            domain=task.domain,
            status=failure.status_code if kind == "retry" and failure else status,
            seconds=visit.fetched.seconds if visit.fetched else 0.0,
            attempt=self.attempts,
            depth=self.crawl.depth,
            error=failure.error if failure else None,
            **fields,
        )
