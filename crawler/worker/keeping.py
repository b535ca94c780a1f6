"""A visited page kept: its row committed, its new version announced and its links (or redirect)
routed and confirmed, then its delivery acked and counted; so nothing is lost (pipeline.py)."""

from __future__ import annotations

import time

from crawler.config import Rules
from crawler.errors import SinkError
from crawler.frontier.concurrency import short_retries
from crawler.frontier.parking import Parking
from crawler.frontier.router import Routed
from crawler.frontier.settling import Done
from crawler.monitor.metrics import Metrics
from crawler.monitor.metrics.visits import OutcomeKind
from crawler.sink.groupcommit import GroupCommit
from crawler.sink.sql import PageRecord
from crawler.sink.versions import Version
from crawler.sink.visits import row_of
from crawler.worker.announce import Announcer
from crawler.worker.delivery_end import Endings
from crawler.worker.handling import ROBOTS, Handling
from crawler.worker.linking import Linking
from crawler.worker.page import Visit
from crawler.worker.refresh import Settled, settle


def kind_of(visit: Visit) -> OutcomeKind:
    """How a kept page's delivery ends: ok, failed, dead (its transient failure out of tries), or
    skipped (robots.txt now keeps a stored page out)."""
    if visit.disallowed:
        return "skipped"
    failure = visit.failure
    return "ok" if failure is None else "dead" if failure.transient else "failed"


class Keeping:
    """Keeps the pages a pipeline visited, and ends their deliveries."""

    def __init__(
        self,
        writes: GroupCommit,
        announcer: Announcer | None,
        linking: Linking,
        parking: Parking,
        ends: Endings,
        metrics: Metrics,
        short_retry_wait: float,
    ) -> None:
        self._writes = writes
        self._announcer = announcer  # None: no change feed (tests)
        self._linking = linking
        self._parking = parking
        self._ends = ends
        self._metrics = metrics
        self._wait = short_retry_wait

    async def keep(self, delivery: Handling, rules: Rules, visit: Visit) -> None:
        """Store the page's row, announce its version and route its links; then ack it, counted."""
        domain, message, crawl = delivery.domain, delivery.message, delivery.crawl
        settled = settle(visit, crawl.refresh, rules.recrawl_for(delivery.url))
        row = row_of(visit.visited, settled.scheduled)
        made = await short_retries(SinkError, lambda: self._writes.store(row), self._wait)
        committed = Done("commit", time.monotonic())
        if made is not None:
            self._metrics.observe_version(domain, made.kind)
        routed = await self._announced_and_routed(delivery, visit, settled, row, made)
        if routed is None:
            return  # back to the broker, to be announced again
        failure = visit.failure
        if failure is not None and failure.transient:
            await self._parking.dead(message, domain, delivery.attempts, failure)
        if crawl.refresh is not None:
            self._metrics.observe_refresh(domain, settled.how)
        kind = kind_of(visit)
        delivery.logged(kind, visit, links=len(visit.links) if settled.route else 0)
        await self._ends.done(
            message,
            domain,
            kind,
            visit.visited.answered.status_code,
            reason=ROBOTS,  # a skipped one's: the only skip a visit decides
            crawl=crawl.crawl,
            counts=self._counts(delivery, kind, visit, routed),
            confirms=[fp for r in routed for fp in r.unconfirmed],
            done_at=committed,
        )

    async def _announced_and_routed(
        self, delivery: Handling, visit: Visit, settled: Settled, row: PageRecord, made: Version | None
    ) -> list[Routed] | None:
        """Route the page's links while its new version is announced; None if the announcement failed
        and the delivery went back to the broker."""
        message, crawl = delivery.message, delivery.crawl
        announcing = self._announcer and self._announcer.start(message, row, crawl.refresh, made)
        try:
            routed = await self._linking.route(
                delivery.domain, delivery.url, crawl, delivery.options, visit, settled.route
            )
        except BaseException:
            if announcing:
                announcing.cancel()
            raise
        if announcing and not await announcing:
            return None
        return routed

    def _counts(
        self, delivery: Handling, kind: OutcomeKind, visit: Visit, routed: list[Routed]
    ) -> dict[tuple[str, str], int] | None:
        """The page's changes to its crawl's counts: its outcome, its data's checks, its links routed."""
        domain, crawl = delivery.domain, delivery.crawl
        counts = self._ends.changes(delivery.message, crawl, domain, kind)
        if counts is not None:
            if visit.verdict is not None and crawl.refresh is None:
                # With its outcome, in the one atomic step: a crawl's coverage is read from its counts.
                counts.update(visit.verdict.counts(domain))
            for r in routed:
                for d, n in r.by_domain.items():
                    counts[d, "routed"] = counts.get((d, "routed"), 0) + n
        return counts
