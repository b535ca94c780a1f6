"""Recrawls on demand: stored pages made due and published, sitemaps read now."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from crawler.config import CrawlConfig
from crawler.frontier.client import Frontier
from crawler.names import LAYOUT_LABEL
from crawler.scheduler.running import scheduling
from crawler.service.domains import configured
from crawler.settings import Settings
from crawler.worker import wiring


@dataclass(frozen=True, slots=True)
class RecrawlView:
    """What a recrawl did per domain (the host layout's domains as one, `~layout`): pages published
    now, and pages still due (published later, as the domain's queue makes room: by
    crawler-scheduler, or the next recrawl)."""

    published: dict[str, int]
    due: dict[str, int]


@dataclass(frozen=True, slots=True)
class Recrawls:
    """What crawler-scheduler does on its rounds, asked for now."""

    settings: Settings
    config: CrawlConfig
    frontier: Frontier

    async def recrawl(self, domains: Sequence[str] | None = None, every: bool = False) -> RecrawlView:
        """Publish the stored pages due in `domains` (a domains file's past the line too; default:
        those that recrawl, and the host layout's, as one row), each domain within what it can fetch
        in the next minutes; with `every`, each stored page of them is made due first, recrawled or
        not (default: every configured domain, the domains file's in the host layout's row)."""
        config = self.config
        if domains:
            chosen = wiring.check_domains(config, domains)
        else:
            chosen = sorted(d for d, r in config.rules.items() if every or r.recrawls)
        layout = not domains and bool(config.layout_kinds if every else config.layout_recrawls)
        async with scheduling(self.settings, lambda: config, self.frontier.connection) as scheduler:
            if every:
                await scheduler.make_due(chosen if domains else [*chosen, *sorted(config.layout_domains)])
            await scheduler.read_sitemaps(chosen, every=True)  # ahead of the pages, in their queues
            published = await scheduler.publish_due(chosen)
            left = await scheduler.backlog(chosen)
            view = RecrawlView(
                {d: published.get(d, 0) for d in chosen}, {d: left[d].due if d in left else 0 for d in chosen}
            )
            if layout:
                view.published[LAYOUT_LABEL] = sum((await scheduler.publish_layout(every)).values())
                view.due[LAYOUT_LABEL] = (await scheduler.layout_backlog()).due
        return view

    async def read_sitemaps(self, domain: str) -> int:
        """Begin a round of reading `domain`'s sitemaps at each of its origins now; how many."""
        chosen = configured(self.config, domain, queued=False)  # a domains file's past the line too
        async with scheduling(self.settings, lambda: self.config, self.frontier.connection) as scheduler:
            return await scheduler.read_sitemaps(chosen, every=True)
