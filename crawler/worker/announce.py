"""Telling the change feed of the version a delivery stored, after its commit and before its ack."""

from __future__ import annotations

import logging

from aio_pika.abc import AbstractIncomingMessage

from crawler.changes.feed import ChangeFeed
from crawler.errors import FeedError, SinkError
from crawler.sink.groupcommit import GroupCommit
from crawler.sink.sql import PageRecord
from crawler.sink.versions import Version
from crawler.worker.concurrency import short_retries

log = logging.getLogger(__name__)


class Announcer:
    """Publishes a delivery's new version; on a redelivery, its page's latest version again."""

    def __init__(self, feed: ChangeFeed, writes: GroupCommit, short_retry_wait: float) -> None:
        self._feed = feed
        self._writes = writes
        self._wait = short_retry_wait

    async def announce(
        self, message: AbstractIncomingMessage, record: PageRecord, made: Version | None
    ) -> bool:
        """True once the version (if any) is confirmed; False if the delivery went back to the broker."""
        version = made
        if version is None and message.redelivered and record.history:
            # A consumer that died between a version's commit and its confirm left it unannounced:
            # its redelivery writes no version again, so it announces the latest (same message_id).
            version = await short_retries(
                SinkError, lambda: self._writes.latest_version(record.url), self._wait
            )
        if version is None:
            return True
        try:
            await short_retries(FeedError, lambda: self._feed.announce(version), self._wait)
        except FeedError as exc:
            # Returned, not parked: its redelivery (flagged redelivered) announces the version again.
            log.warning("%s: %s; the page goes back to its queue", record.domain, exc)
            try:
                await message.nack(requeue=True)
            except Exception as nack_failed:  # the channel is gone: the broker redelivers anyway
                log.debug("%s: nack failed too (%r)", record.domain, nack_failed)
            return False
        return True
