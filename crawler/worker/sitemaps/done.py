"""How a sitemap task ended: a failure to retry or keep, and its changes to its crawl's counts."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from crawler.frontier.message import SitemapTask
from crawler.frontier.retry import Failure
from crawler.frontier.sitemaps import Tasked


@dataclass(slots=True)
class SitemapDone:
    """How a task ended: a failure to retry (transient) or keep, and its changes to its crawl's counts."""

    failure: Failure | None = None
    counts: Counter[tuple[str, str]] = field(default_factory=Counter)

    def tasked(self, task: SitemapTask, tasked: Tasked) -> None:
        """Count the sitemap tasks `task` queued, if its round is counted in its crawl."""
        if task.counted:
            for d, n in tasked.published.items():
                self.counts[d, "sitemaps_queued"] += n
