"""Sitemap tasks in the frontier: the messages that have an origin's sitemaps found, and each sitemap
file read, once per round of reading (a claim in the round's Redis hash), ahead of the pages.

A round starts with a find task per origin (its robots.txt), from a crawl's seeds, `crawler recrawl`
or the scheduler; the files it finds are tasks at depth 0, an index's sitemaps at its depth + 1.
"""

from __future__ import annotations

import secrets
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from aio_pika.abc import AbstractExchange
from redis.asyncio import Redis

from crawler.config import CrawlConfig
from crawler.dedup.store import CLAIM_LUA, release_claims
from crawler.errors import BadURL
from crawler.frontier.hosts import frontier_key
from crawler.frontier.message import CrawlMessage, SitemapTask
from crawler.frontier.publisher import Outgoing, Publisher
from crawler.frontier.router import PublishFailed
from crawler.frontier.scope import Scope
from crawler.frontier.urls import host_of
from crawler.names import MAX_PRIORITY, SITEMAP_ROUND_TTL, Names


def new_round() -> str:
    """A fresh round's id."""
    return secrets.token_hex(8)


def robots_url(origin: str) -> str:
    """Where a find task looks for an origin's sitemaps."""
    return f"{origin}/robots.txt"


def listed_by(host: str, sitemap_host: str) -> bool:
    """Whether a sitemap on `sitemap_host` may list a URL on `host`: its own host or a subdomain of
    it (sitemaps.org)."""
    return host == sitemap_host or host.endswith("." + sitemap_host)


def find_task(
    config: CrawlConfig, origin: str, round_: str, crawl: str | None, counted: bool = True
) -> Outgoing:
    """The task that has the sitemaps of `origin` (scheme://host[:port]) found, in round `round_`."""
    url = robots_url(origin)
    task = SitemapTask(round_, 0, find=True, counted=counted)
    return Outgoing(
        frontier_key(config, host_of(url), MAX_PRIORITY),
        CrawlMessage(url, crawl=crawl, sitemap=task).encode(),
        MAX_PRIORITY,
    )


@dataclass(slots=True)
class Tasked:
    """What became of sitemap tasks asked for: published per domain, or dropped by reason."""

    published: Counter[str] = field(default_factory=Counter)
    dropped: Counter[str] = field(default_factory=Counter)


# A sitemap file's task, once per round: claimed, in the round's hash, as a page's link is in its
# crawl's dedup store (crawler/dedup/store.py, the same rule): for its claimant (the task listing it),
# or its own again (that task redelivered); claimed first now, it opens work in the crawl's counts in
# the same step. Unlike a link's, the claim is never confirmed: the round's hash expires instead.
# KEYS: the round's hash of claims, the crawl's counts. ARGV: claimant, the round's TTL (s), 1 if
# counted, URLs. Returns, per URL, 0 (seen) or more (publish it).
_CLAIM = (
    CLAIM_LUA
    + """
local out = {}
for i = 4, #ARGV do
  out[#out + 1] = claim(KEYS[1], ARGV[i], ARGV[1])
end
redis.call('EXPIRE', KEYS[1], ARGV[2])
open_first(out, ARGV[3], KEYS[2])
return out
"""
)


class SitemapTasks:
    """Publishes the tasks of sitemap files, each once per round, with confirms."""

    def __init__(self, scope: Scope, exchange: AbstractExchange, redis: Redis, names: Names) -> None:
        self._scope = scope
        self._publisher = Publisher(exchange)
        self._redis = redis
        self._names = names
        self._claim_script = redis.register_script(_CLAIM)

    async def files(
        self,
        urls: Iterable[str],
        task: SitemapTask,
        crawl: str | None,
        claimant: str,
        listed_on: str | None = None,
    ) -> Tasked:
        """Have the sitemap files at `urls` read as `task` says, on behalf of `claimant` (the task
        listing them, by URL); with `listed_on` (the host of the index listing them), only those on
        that host or a subdomain of it."""
        tasked = Tasked()
        chosen: dict[str, str] = {}
        for raw in urls:
            try:
                url = self._scope.canonical(raw)
                domain = self._scope.domain(url)
            except BadURL:
                tasked.dropped["invalid" if "://" not in raw else "out_of_scope"] += 1
                continue
            if domain is None:
                tasked.dropped["out_of_scope"] += 1
                continue
            if listed_on is not None and not listed_by(host_of(url), listed_on):
                tasked.dropped["other_host"] += 1
                continue
            rules = self._scope.config.rules_for(domain)
            if rules.sitemaps is False:
                tasked.dropped["sitemaps_off"] += 1
                continue
            chosen.setdefault(url, domain)
        if not chosen:
            return tasked
        opened = self._names.crawl_counts_key(crawl) if crawl is not None and task.counted else None
        todo = await self._claim(task.round, list(chosen), claimant, opened)
        tasked.dropped["seen"] += len(chosen) - len(todo)
        outgoing = [
            Outgoing(
                frontier_key(self._scope.config, host_of(url), MAX_PRIORITY),
                CrawlMessage(url, crawl=crawl, sitemap=task).encode(),
                MAX_PRIORITY,
            )
            for url in todo
        ]
        try:
            outcomes = await self._publisher.publish(outgoing)
        except Exception as exc:  # nothing was sent (e.g. the channel is closed)
            outcomes = [exc] * len(todo)
        failed = [url for url, o in zip(todo, outcomes, strict=True) if o is not None]
        if failed:
            # Unclaimed, so the listing task, tried again, queues them then.
            await release_claims(self._redis, self._names.sitemap_round_key(task.round), opened, failed)
            first = next(o for o in outcomes if o is not None)
            raise PublishFailed(f"{len(failed)} of {len(todo)} sitemap tasks were not confirmed ({first!r})")
        tasked.published.update(chosen[url] for url in todo)
        return tasked

    async def _claim(self, round_: str, urls: list[str], claimant: str, opened: str | None) -> list[str]:
        """Those of `urls` this round has not queued yet, or queued for `claimant` (delivered again:
        its publishes may not have been confirmed), now claimed for it; those claimed first now open
        work in `opened` (a crawl's counts), in the same step."""
        key = self._names.sitemap_round_key(round_)
        counts = opened or key
        args = [claimant, SITEMAP_ROUND_TTL, 0 if opened is None else 1, *urls]
        claimed = await self._claim_script(keys=[key, counts], args=args)
        return [u for u, mine in zip(urls, claimed, strict=True) if mine]
