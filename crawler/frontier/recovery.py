"""Redis lost (restarted empty): rebuild a crawl's dedup store and quotas from the sink before anyone
routes again, restore the crawl bookkeeping the database keeps, and keep pages queued twice from
being fetched twice.

A claim that finds its store gone (crawler/dedup/store.py) calls a Recovery. One process per crawl
rebuilds, under a lock; every other claim of that crawl waits for it. The store is marked `rebuilt`:
from then on, a first delivery of one of the crawl's pages is taken once (a URL queued before the
loss may have been queued again, since the rebuilt store only knows pages already stored) and is
not fetched if the sink already holds it. Rate buckets start over with the back-offs the database
kept (crawler/worker/backoffs.py), the robots.txt cache simply starts over.
"""

from __future__ import annotations

import asyncio
import logging
import math
import secrets
import time
from collections.abc import Callable

from redis.asyncio import Redis

from crawler.dedup.store import SeenStore
from crawler.frontier.crawls import CrawlOptions
from crawler.frontier.urls import fingerprint
from crawler.names import DISCOVERED_LABEL, REBUILD_LOCK_TTL, Names
from crawler.sink.crawls import CrawlStore
from crawler.sink.database import Database
from crawler.sink.stored import StoredPages

log = logging.getLogger(__name__)

REBUILD_BATCH = 10_000  # rows read from the sink, and fingerprints written to Redis, per step
REBUILD_WAIT = 0.05  # seconds between looks of a claim waiting for another process's rebuild
REBUILT_READ_INTERVAL = 1.0  # how long a process trusts what it read of a store's `rebuilt` mark

# A counter rebuilt from the sink never goes down: pages taken since the loss were counted already.
# KEYS[1] the counter, ARGV[1] the sink's count.
_RAISE = """
local now = tonumber(redis.call('GET', KEYS[1]) or '0')
if now < tonumber(ARGV[1]) then redis.call('SET', KEYS[1], ARGV[1]) end
"""
# The same for a field of a hash. KEYS[1] the hash, ARGV[1] the field, ARGV[2] the sink's count.
_RAISE_FIELD = """
local now = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '0')
if now < tonumber(ARGV[2]) then redis.call('HSET', KEYS[1], ARGV[1], ARGV[2]) end
"""
# Release a lock only if it is still ours. KEYS[1] the lock, ARGV[1] our token.
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
"""


class Recovery:
    """Rebuilds lost dedup stores from the sink (SeenStore's `recover`), and spots pages queued twice."""

    def __init__(
        self,
        redis: Redis,
        names: Names,
        database: Database,
        *,
        batch: int = REBUILD_BATCH,
        clock: Callable[[], float] = time.monotonic,
        discovered: Callable[[str], bool] = lambda domain: False,
    ) -> None:
        """`discovered` tells a discovered host's pages, counted as DISCOVERED_LABEL's."""
        self._redis = redis
        self._names = names
        self._pages = StoredPages(database)
        self._crawls = CrawlStore(database)
        self._batch = batch
        self._clock = clock
        self._discovered = discovered
        self._raise = redis.register_script(_RAISE)
        self._raise_field = redis.register_script(_RAISE_FIELD)
        self._release = redis.register_script(_RELEASE)
        self._rebuilt: dict[str | None, tuple[float, bool]] = {}  # crawl -> (when read, rebuilt)
        self.rebuilds: list[tuple[str | None, int, float]] = []  # (crawl, rows, seconds) done here

    async def __call__(self, store: SeenStore, how: str) -> None:
        """Make `store` usable again: made afresh if its crawl stored no page yet, else rebuilt."""
        crawl = store.crawl
        if how != "rebuilding" and not await asyncio.to_thread(self._pages.any, crawl):
            await store.create()  # a crawl's first claim, or one that stored nothing: nothing to rebuild
            if how == "known":  # lost all the same: what was queued may be queued again
                await store.end_rebuild()
            return
        await self._restore_cancelled()
        if crawl is not None and not await self._restore_crawl(crawl):
            # Cancelled or deleted: no rebuild; its queued pages are acked unfetched from now on.
            await store.create()
            return
        names = self._names.for_crawl(crawl)
        token = secrets.token_hex(8)
        while True:
            if await self._redis.set(names.rebuild_lock_key, token, nx=True, ex=REBUILD_LOCK_TTL):
                try:
                    if not _usable(await store.state()):  # else another process finished meanwhile
                        await self._rebuild(store, names)
                finally:
                    await self._release(keys=[names.rebuild_lock_key], args=[token])
                break
            if _usable(await store.state()):
                break
            await asyncio.sleep(REBUILD_WAIT)  # another process rebuilds: its claims wait too
        self._rebuilt[crawl] = (self._clock(), True)

    async def _rebuild(self, store: SeenStore, names: Names) -> None:
        crawl = store.crawl
        log.warning(
            "the dedup store of crawl %s is gone (Redis lost it): rebuilding it from the sink",
            crawl or "(default)",
        )
        started = time.perf_counter()
        await store.begin_rebuild()
        rows = 0
        batch = await asyncio.to_thread(self._pages.urls, crawl, 0, self._batch)
        while batch:
            # The next batch is read from the sink while this one is written to Redis.
            following = asyncio.ensure_future(
                asyncio.to_thread(self._pages.urls, crawl, batch[-1][0], self._batch)
            )
            try:
                await store.restore([fingerprint(url) for _, url in batch])
                await self._redis.expire(names.rebuild_lock_key, REBUILD_LOCK_TTL)  # still at it
            except BaseException:
                following.cancel()
                raise
            rows, batch = rows + len(batch), await following
        await self._rebuild_counts(crawl, names)
        await store.end_rebuild()
        seconds = time.perf_counter() - started
        self.rebuilds.append((crawl, rows, seconds))
        log.warning(
            "rebuilt the dedup store of crawl %s from %d stored pages in %.1fs (%.0f rows/s)",
            crawl or "(default)",
            rows,
            seconds,
            rows / seconds if seconds > 0 else math.inf,
        )

    async def _rebuild_counts(self, crawl: str | None, names: Names) -> None:
        """Quota counters and a crawl's outcome counts, from the sink's counts of its pages."""
        tallies = await asyncio.to_thread(self._pages.tallies, crawl)
        for domain, t in tallies.items():
            await self._raise(keys=[names.pages_key(domain)], args=[t.ok + t.failed])
            if t.credits:
                # Credits are counted per domain across crawls: each rebuilt crawl adds its own.
                await self._redis.incrbyfloat(self._names.credits_key(domain), t.credits)
        if crawl is None:
            return
        total = sum(t.ok + t.failed for t in tallies.values())
        await self._raise(keys=[self._names.crawl_pages_key(crawl)], args=[total])
        counts = self._names.crawl_counts_key(crawl)
        found: dict[str, dict[str, int]] = {}
        for domain, t in tallies.items():
            # Stored pages were routed and came to an outcome; what was still queued when Redis was
            # lost is not known here, so `pending` leaves it out.
            into = found.setdefault(DISCOVERED_LABEL if self._discovered(domain) else domain, {})
            for kind, n in (("routed", t.ok + t.failed), ("ok", t.ok), ("failed", t.failed)):
                into[kind] = into.get(kind, 0) + n
        for domain, kinds in found.items():
            for kind, n in kinds.items():
                await self._raise_field(keys=[counts], args=[f"{domain} {kind}", n])

    async def _restore_cancelled(self) -> None:
        """Every cancelled crawl's flag, from the database: Redis lost all of them at once."""
        cancelled = [r.id for r in await asyncio.to_thread(self._crawls.list, "cancelled")]
        if cancelled:
            await self._redis.sadd(self._names.cancelled_key, *cancelled)

    async def _restore_crawl(self, crawl: str) -> bool:
        """Put back what Redis kept of a crawl from its database record; False unless it is running."""
        record = await asyncio.to_thread(self._crawls.get, crawl)
        if record is None or record.state == "cancelled":
            # A deleted crawl's id stays cancelled, as `crawls delete` left it.
            await self._redis.sadd(self._names.cancelled_key, crawl)
            return False
        options = CrawlOptions(
            tuple(record.options["domains"]) if record.options.get("domains") is not None else None,
            record.options.get("max_depth"),
            record.options.get("max_pages"),
            record.options.get("priority"),
        )
        await self._redis.set(self._names.crawl_options_key(crawl), options.encode(), nx=True)
        return True

    async def duplicate(self, store: SeenStore, url: str) -> bool:
        """Whether a first delivery of `url` (canonical) is a page taken or stored already.

        Only ever True in a crawl whose store was rebuilt; costs nothing until then but a look at
        the store's mark each REBUILT_READ_INTERVAL.
        """
        if not await self._was_rebuilt(store):
            return False
        if not await store.take(fingerprint(url), secrets.token_bytes(8)):
            return True
        return await asyncio.to_thread(self._pages.stored, url, store.crawl)

    async def _was_rebuilt(self, store: SeenStore) -> bool:
        read, rebuilt = self._rebuilt.get(store.crawl, (-math.inf, False))
        if self._clock() - read < REBUILT_READ_INTERVAL:
            return rebuilt
        rebuilt = "rebuilt" in await store.state()
        if len(self._rebuilt) > 4096:  # a long-lived worker sees crawl after crawl
            self._rebuilt.clear()
        self._rebuilt[store.crawl] = (self._clock(), rebuilt)
        return rebuilt


def _usable(state: dict[str, str]) -> bool:
    """A store claims can use: laid out, and not being rebuilt."""
    return "layout" in state and "rebuilding" not in state
