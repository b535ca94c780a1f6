"""Telling the change feed of the versions a delivery stored, after its commit and before its ack."""

from __future__ import annotations

import asyncio
import logging
from functools import partial

from crawler.changes.feed import ChangeFeed
from crawler.errors import FeedError, SinkError
from crawler.frontier.concurrency import short_retries
from crawler.frontier.delivery import Delivery
from crawler.frontier.message import Refresh
from crawler.sink.groupcommit import GroupCommit
from crawler.sink.sql import PageRecord
from crawler.sink.versions import Version

log = logging.getLogger(__name__)


class Announcer:
    """Publishes a delivery's new version; on a redelivery, also those an earlier try left unannounced."""

    def __init__(self, feed: ChangeFeed, writes: GroupCommit, short_retry_wait: float) -> None:
        self._feed = feed
        self._writes = writes
        self._wait = short_retry_wait

    def start(
        self,
        message: Delivery,
        record: PageRecord,
        refresh: Refresh | None,
        made: Version | None,
    ) -> asyncio.Task[bool] | None:
        """Announce in the background (its confirm comes while the links are routed); None: nothing to."""
        if made is None and not (message.redelivered and record.history):
            return None
        return asyncio.ensure_future(self.announce(message, record, refresh, made))

    async def announce(
        self,
        message: Delivery,
        record: PageRecord,
        refresh: Refresh | None,
        made: Version | None,
    ) -> bool:
        """True once its versions (if any) are confirmed; False if the delivery went back to the broker."""
        todo = [made] if made is not None else []
        if message.redelivered and record.history:
            todo = await self._unannounced(record, refresh, made)
        try:
            for version in todo:
                await short_retries(FeedError, partial(self._feed.announce, version), self._wait)
        except FeedError as exc:
            # Returned, not parked: its redelivery (flagged redelivered) announces the versions again.
            log.warning("%s: %s; the page goes back to its queue", record.domain, exc)
            try:
                await message.nack(requeue=True)
            except Exception as nack_failed:  # the channel is gone: the broker redelivers anyway
                log.debug("%s: nack failed too (%r)", record.domain, nack_failed)
            return False
        return True

    async def _unannounced(
        self, record: PageRecord, refresh: Refresh | None, made: Version | None
    ) -> list[Version]:
        """What a consumer that died between a version's commit and its confirm may have left: a
        refresh knows its page's version when it was scheduled; a first fetch makes version 1."""
        since = (refresh.version or 0) if refresh is not None else 0
        if refresh is None and made is not None:
            return [made]
        after = self._writes.versions_after
        found = await short_retries(SinkError, lambda: after(record.url, since), self._wait)
        if refresh is None:
            return [v for v in found if v.version == 1]
        return found
