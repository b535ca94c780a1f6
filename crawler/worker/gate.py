"""Whether a delivery may be fetched now: not a copy queued twice after Redis was lost, its crawl not
cancelled, its counts within max_pages and its domain within max_credits; its rate token asked for
in the same round trip where the checks allow (admission.py)."""

from __future__ import annotations

from dataclasses import dataclass

from crawler.config import Rules
from crawler.dedup.store import SeenStore
from crawler.frontier.crawls import CrawlOptions, CrawlState
from crawler.frontier.quota import PageQuota
from crawler.frontier.recovery import Recovery
from crawler.worker.admission import Admission, Checked
from crawler.worker.cost import Cost


@dataclass(frozen=True, slots=True)
class Verdict:
    """What the gate said: the crawl is cancelled; or skip it (a metric reason and a log line); or go,
    with what its admission found (None: the checks were asked one by one)."""

    cancelled: bool = False
    skip: tuple[str, str] | None = None
    checked: Checked | None = None


class Gate:
    """Asks a delivery's checks before its fetch."""

    def __init__(
        self,
        quota: PageQuota,
        cost: Cost,
        seen: SeenStore,
        crawls: CrawlState | None,
        recovery: Recovery | None,
        admission: Admission | None,
    ) -> None:
        self._quota = quota
        self._cost = cost
        self._seen = seen
        self._crawls = crawls  # None: crawl ids are carried but not checked (tests)
        self._recovery = recovery  # None: no check for pages queued twice after Redis was lost
        self._admission = admission  # None: the checks are asked one by one

    async def verdict(
        self, url: str, domain: str, crawl: str | None, options: CrawlOptions, rules: Rules, first: bool
    ) -> Verdict:
        """May `url` be fetched? `first`: its first try, which counts against max_pages."""
        if first and await self._queued_twice(crawl, url):
            return Verdict(skip=("duplicate", "queued again after Redis was lost and taken already"))
        checked = await self._admit(url, domain, crawl, options, rules, first)
        if checked is None:
            if await self.cancelled(crawl):
                return Verdict(cancelled=True)
            return Verdict(skip=await self._held_back(domain, crawl, options, rules, first))
        if checked.held == "cancelled":
            return Verdict(cancelled=True)
        return Verdict(skip=_held(checked, rules, options), checked=checked)

    async def cancelled(self, crawl: str | None) -> bool:
        """Whether `crawl` was cancelled (its pages are acked unfetched)."""
        return crawl is not None and self._crawls is not None and await self._crawls.cancelled(crawl)

    async def _admit(
        self, url: str, domain: str, crawl: str | None, options: CrawlOptions, rules: Rules, first: bool
    ) -> Checked | None:
        """The checks before the fetch in one round trip; None if they are to be asked one by one."""
        if self._admission is None:
            return None
        return await self._admission.check(
            url,
            domain,
            rules,
            crawl=crawl,
            cancellable=self._crawls is not None,
            count=first,
            crawl_max_pages=options.max_pages,
        )

    async def _held_back(
        self, domain: str, crawl: str | None, options: CrawlOptions, rules: Rules, first: bool
    ) -> tuple[str, str] | None:
        """Why policy keeps a page from being fetched (its metric reason and a log line), or None."""
        if first and not await self._quota.take(domain, rules.max_pages, crawl):
            return "max_pages", f"max_pages {rules.max_pages} reached"
        if (
            first
            and crawl is not None
            and options.max_pages is not None
            and not await self._quota.take_crawl(crawl, options.max_pages)
        ):
            return "max_pages", f"the crawl's max_pages {options.max_pages} reached"
        if not await self._cost.allows(domain, rules):
            return "max_credits", f"max_credits {rules.max_credits or 0:g} reached"
        return None

    async def _queued_twice(self, crawl: str | None, url: str) -> bool:
        """A page queued again after Redis lost the dedup store, whose first copy was taken already."""
        if self._recovery is None:
            return False
        return await self._recovery.duplicate(self._seen.for_crawl(crawl), url)


def _held(checked: Checked, rules: Rules, options: CrawlOptions) -> tuple[str, str] | None:
    """Why the admission held a page back (its metric reason and a log line), or None."""
    if checked.held == "max_pages":
        return "max_pages", f"max_pages {rules.max_pages} reached"
    if checked.held == "crawl_max_pages":
        return "max_pages", f"the crawl's max_pages {options.max_pages} reached"
    return None
