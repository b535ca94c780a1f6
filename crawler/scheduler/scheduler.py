"""The recrawl scheduler: publishes the stored pages that are due into their domain queues, no more
per domain than it can fetch in the next `ahead` seconds at its rate.

Each pass claims a domain's due pages in the sink with a lease (crawler/sink/schedule.py), so any
number of schedulers can run and none publishes a page another did; it publishes them with publisher
confirms. A page whose message is lost (a publish not confirmed, a queue purged) is due again when its
lease ends, and is published again then. A domain whose queue already holds its `ahead` seconds of
work gets nothing this pass: 1 million due pages of a site at 1 request/s stay in the database,
not in the broker.

The domains the host layout serves (a domains file's past the line, discovered hosts) have no queue
each: their due pages are claimed in one, into the layout's shards while those hold under `layout`
messages, the longest due first and no domain more than its rate for `ahead` seconds within any
`ahead` seconds (per scheduler).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from crawler.config import CrawlConfig, Recrawl
from crawler.frontier.client import Connection
from crawler.frontier.depths import queued, queued_in_layout
from crawler.frontier.publisher import Publisher
from crawler.frontier.recrawl import refresh_outgoing
from crawler.frontier.sitemaps import find_task, new_round
from crawler.names import LAYOUT_LABEL, Names
from crawler.scheduler.metrics import SchedulerMetrics
from crawler.sink.schedule import Backlog, Due, Schedule

log = logging.getLogger(__name__)
passes_log = logging.getLogger("crawler.scheduler.passes")  # a line per pass that published: verbose

AHEAD = 120.0  # seconds of each domain's rate kept queued
LEASE = 1800.0  # seconds a published page stays claimed: after it, a lost refresh is published again
BATCH = 1_000  # pages claimed and published at once
POLL = 1.0  # seconds between passes that published nothing
BACKLOG_EVERY = 15.0  # seconds between reads of the backlog (the due gauges)
SITEMAPS_EVERY = 60.0  # seconds between looks for origins whose sitemaps are due to be read again
# Refreshes the host layout's queues may hold before a pass adds more: every domain it serves shares
# them, so no domain's rate sizes them.
LAYOUT_QUEUED = 10_000


@dataclass(frozen=True, slots=True)
class Timing:
    """How far ahead a scheduler fills the queues, and how long its claims last."""

    ahead: float = AHEAD
    lease: float = LEASE
    batch: int = BATCH
    poll: float = POLL
    sitemaps: float = SITEMAPS_EVERY
    layout: int = LAYOUT_QUEUED


DEFAULT_TIMING = Timing()


class Scheduler:
    """Publishes due pages of the domains that recrawl, within each domain's room."""

    def __init__(
        self,
        config: Callable[[], CrawlConfig],
        names: Names,
        schedule: Schedule,
        connection: Connection,
        publisher: Publisher,
        *,
        timing: Timing = DEFAULT_TIMING,
        metrics: SchedulerMetrics | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self._config = config  # the live configuration: an edited rate or recrawl applies next pass
        self._names = names
        self._schedule = schedule
        self._connection = connection  # for the queue depths: a passive declare that fails ends its channel
        self._publisher = publisher
        self._timing = timing
        self._metrics = metrics or SchedulerMetrics()
        self._clock = clock
        self._pending = True  # until a pass found nothing left to publish
        # The host layout's domains given refreshes lately: domain -> (when its window began, how many)
        self._spread: dict[str, tuple[datetime, int]] = {}

    def recrawling(self) -> list[str]:
        """The configured domains that recrawl (some of their pages, at least)."""
        config = self._config()
        return sorted(d for d, rules in config.rules.items() if rules.recrawls)

    async def publish_due(self, domains: Sequence[str] | None = None) -> dict[str, int]:
        """One pass: publish what is due in `domains` (default: those that recrawl, and the host
        layout's), each within its room; how many were published per domain."""
        if domains is None:
            published = await self._publish_listed(self.recrawling())
            published.update(await self.publish_layout())
            return published
        layout = self._config().layout_domains
        published = await self._publish_listed([d for d in domains if d not in layout])
        published.update(await self._publish_layout_named([d for d in domains if d in layout]))
        return published

    async def _publish_listed(self, chosen: Sequence[str]) -> dict[str, int]:
        published: dict[str, int] = {}
        if not chosen:
            return published
        depths = await queued(self._connection, self._names, self._config().frontier, chosen)
        rooms = {d: self._room(d, depths[d]) for d in chosen}
        for domain, room in rooms.items():
            while room > 0:
                now = self._clock()
                lease = now + timedelta(seconds=self._timing.lease)
                due = await asyncio.to_thread(
                    self._schedule.claim, domain, min(room, self._timing.batch), now, lease
                )
                if not due:
                    break
                sent = await self._publish(domain, due)
                published[domain] = published.get(domain, 0) + len(sent)
                room -= len(due)
        return published

    async def publish_layout(self, every: bool = False) -> dict[str, int]:
        """Claim and publish a batch of the host layout's due pages, within its room and each
        domain's share; how many per domain. With `every` (`recrawl --all`), those of domains that
        do not recrawl too."""
        config = self._config()
        kinds = config.layout_kinds if every else config.layout_recrawls
        if not kinds:
            return {}
        room = await self._layout_room()
        if room <= 0:
            return {}
        now = self._clock()
        self._forget_windows(now)
        full = [d for d in self._spread if self._left(d) <= 0]
        due = await asyncio.to_thread(
            self._schedule.claim_spread,
            [*config.rules, *full],
            _share(min(k.rate for k in kinds), self._timing.ahead),
            min(room, self._timing.batch),
            now,
            now + timedelta(seconds=self._timing.lease),
        )
        return await self._publish_spread(due, now, every)

    async def _publish_layout_named(self, domains: Sequence[str]) -> dict[str, int]:
        """Claim and publish the due pages of some of the host layout's domains (a domains file's,
        named by `crawler recrawl --domain`), each within its share and all within the room."""
        room = await self._layout_room() if domains else 0
        now = self._clock()
        self._forget_windows(now)
        due: list[Due] = []
        for domain in domains:
            wanted = min(room - len(due), self._left(domain), self._timing.batch)
            lease = now + timedelta(seconds=self._timing.lease)
            due += await asyncio.to_thread(self._schedule.claim, domain, wanted, now, lease)
        return await self._publish_spread(due, now, every=True)

    async def _layout_room(self) -> int:
        """How many more refreshes the host layout's shard and wait queues may take now."""
        return self._timing.layout - await queued_in_layout(self._connection, self._names, self._config())

    def _forget_windows(self, now: datetime) -> None:
        """Forget the host layout's domains' windows that began `ahead` seconds ago or more."""
        ahead = self._timing.ahead
        self._spread = {d: w for d, w in self._spread.items() if (now - w[0]).total_seconds() < ahead}

    def _left(self, domain: str) -> int:
        """What is left of a host layout domain's share in its current window."""
        share = _share(self._config().rules_for(domain).rate, self._timing.ahead)
        return share - self._spread.get(domain, (None, 0))[1]

    async def _publish_spread(self, due: Sequence[Due], now: datetime, every: bool) -> dict[str, int]:
        """Publish claimed pages of the host layout's domains, counted in their windows; unless
        `every`, those of a domain whose recrawl was turned off are taken off the schedule instead."""
        config = self._config()
        wanted: list[Due] = []
        off: list[str] = []  # of a kind of domain whose recrawl was turned off since they were scheduled
        for d in due:
            if every or config.rules_for(d.domain).recrawls:
                wanted.append(d)
            else:
                off.append(d.url)
        if off:
            await asyncio.to_thread(self._schedule.unschedule, off)
        for d in wanted:
            began, n = self._spread.get(d.domain, (now, 0))
            self._spread[d.domain] = (began, n + 1)
        published: dict[str, int] = {}
        for d in await self._publish(LAYOUT_LABEL, wanted) if wanted else []:
            published[d.domain] = published.get(d.domain, 0) + 1
        return published

    def pending(self) -> bool:
        """Whether due pages may still be published: the last pass published some, or left some due."""
        return self._pending

    async def make_due(self, domains: Sequence[str]) -> int:
        """Make every stored page of `domains` due now, recrawled or not (`recrawl --all`); how many."""
        self._pending = True
        return await asyncio.to_thread(self._schedule.make_due, domains, self._clock())

    async def read_sitemaps(self, domains: Sequence[str] | None = None, *, every: bool = False) -> int:
        """Begin a round of reading the sitemaps of `domains` (default: those that recrawl, and a batch
        of the host layout's) at each origin due for one (its domain's recrawl `every` after the
        last), or at every origin of them with `every`: a find task per origin, ahead of the pages.
        How many rounds began."""
        config = self._config()
        began = 0
        for domain in domains or self.recrawling():
            rules = config.rules_for(domain)
            if rules.sitemaps is False:
                continue
            interval = None if every else (rules.recrawl or Recrawl()).every
            origins = await asyncio.to_thread(self._schedule.sitemap_rounds, domain, interval, self._clock())
            began += await self._begin_rounds(domain, origins)
        if domains is None:
            began += await self._read_layout_sitemaps()
        return began

    async def _read_layout_sitemaps(self) -> int:
        """Begin the rounds of the host layout's origins due for one, a batch at most, the longest
        due first; how many began."""
        config = self._config()
        intervals = [every for k in config.layout_recrawls if (every := k.sitemaps_every) is not None]
        if not intervals:
            return 0
        now = self._clock()
        claimed = await asyncio.to_thread(
            self._schedule.sitemap_rounds_outside,
            list(config.rules),
            lambda domain: config.rules_for(domain).sitemaps_every,
            now + timedelta(seconds=min(intervals)),
            self._timing.batch,
            now,
        )
        return await self._begin_rounds(LAYOUT_LABEL, [(origin, crawl) for origin, _, crawl in claimed])

    async def _begin_rounds(self, domain: str, origins: Sequence[tuple[str, str | None]]) -> int:
        """Publish a find task per origin (with the crawl its URLs join) of `domain` (a label, for
        the host layout's), in a new round; how many were confirmed."""
        if not origins:
            return 0
        config = self._config()
        round_ = new_round()
        # Not counted in the crawl: like a refresh, a round only adds the URLs it routes there.
        tasks = [find_task(config, origin, round_, crawl, counted=False) for origin, crawl in origins]
        outcomes = await self._publisher.publish(tasks)
        failed = sum(1 for o in outcomes if o is not None)
        if failed:
            log.warning(
                "%s: %d of %d sitemap rounds not confirmed by RabbitMQ: they begin again after "
                "the domain's recrawl interval, or at the next `crawler recrawl`",
                domain,
                failed,
                len(tasks),
            )
        return len(tasks) - failed

    async def run(
        self,
        stop: asyncio.Event,
        domains: Sequence[str] | None = None,
        on_pass: Callable[[], None] = lambda: None,
    ) -> None:
        """Publish what is due until `stop` is set: a pass, then another at once while it published.
        Each domain's sitemaps are read again first when its recrawl interval has passed."""
        backlog_at = sitemaps_at = -math.inf
        loop = asyncio.get_running_loop()
        while not stop.is_set():
            if loop.time() - sitemaps_at >= self._timing.sitemaps:
                await self.read_sitemaps(domains)
                sitemaps_at = loop.time()
            published = await self.publish_due(domains)
            on_pass()
            if published:
                passes_log.info(
                    "published %d due page(s): %s",
                    sum(published.values()),
                    ", ".join(f"{d} {n}" for d, n in sorted(published.items())),
                )
            due = 0
            if not published or loop.time() - backlog_at >= BACKLOG_EVERY:
                due = await self.read_backlog(domains)
                backlog_at = loop.time()
            self._pending = bool(published) or due > 0
            if not published:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), self._timing.poll)

    async def read_backlog(self, domains: Sequence[str] | None = None) -> int:
        """Read how many pages are due per domain (the host layout's under one label) into the
        gauges; how many are due in all."""
        chosen = list(domains or self.recrawling())
        now = self._clock()
        backlog = await self.backlog(chosen)
        config = self._config()
        if domains is None and config.layout_recrawls:
            chosen.append(LAYOUT_LABEL)
            backlog[LAYOUT_LABEL] = await self.layout_backlog()
        self._metrics.backlog(chosen, backlog, now)
        return sum(b.due for b in backlog.values())

    async def layout_backlog(self) -> Backlog:
        """The host layout's pages due now, of every domain it serves, in one."""
        listed = list(self._config().rules)
        return await asyncio.to_thread(self._schedule.backlog_outside, listed, self._clock())

    async def backlog(self, domains: Sequence[str]) -> dict[str, Backlog]:
        """Per domain of `domains` with pages due now: how many, and since when the oldest."""
        return await asyncio.to_thread(self._schedule.backlog, domains, self._clock())

    def _room(self, domain: str, queued: int) -> int:
        """How many more of `domain`'s pages to queue: its rate times `ahead`, less the `queued` ones."""
        rules = self._config().rules_for(domain)
        return max(0, _share(rules.rate, self._timing.ahead) - queued)

    async def _publish(self, domain: str, due: Sequence[Due]) -> list[Due]:
        """Publish claimed pages of `domain` (a label, for the host layout's); those confirmed.
        Those not stay leased, and are published again after it."""
        config = self._config()
        outgoing = [refresh_outgoing(d, config) for d in due]
        outcomes = await self._publisher.publish(outgoing)
        sent = [d for d, o in zip(due, outcomes, strict=True) if o is None]
        failed = len(due) - len(sent)
        if failed:
            log.warning(
                "%s: %d of %d refreshes not confirmed by RabbitMQ: published again when their lease "
                "ends (%gs)",
                domain,
                failed,
                len(due),
                self._timing.lease,
            )
        self._metrics.published(domain, len(sent))
        return sent


def _share(rate: float, ahead: float) -> int:
    """The refreshes a domain at `rate` pages/s is given within `ahead` seconds: at least one."""
    return max(1, math.ceil(rate * ahead))
