"""Domains' back-offs kept in the database as well as in their Redis buckets: a Redis loss would
otherwise send a site that just answered 429 or 503 the full rate again, before its Retry-After.

Each worker writes the back-off its site's push-back set (a rare event), and reads the table every
KEPT_READ seconds into memory; its rate limiter hands a domain's kept back-off to each token, and a
bucket is never less cautious than it (crawler/fetch/ratelimit.py). So a bucket lost with Redis comes
back with the back-off and the pause the fleet last knew, however recently another worker set them.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time

from crawler.config import MAX_BACKOFF_RECOVERY
from crawler.errors import SinkError
from crawler.fetch.ratelimit import MIN_FACTOR, Kept
from crawler.sink.domains import DomainStore

log = logging.getLogger(__name__)

KEPT_READ = 2.0  # seconds a worker trusts what it read of the table
# A back-off older than this has recovered whatever the domain's settings: it doubles each recovery.
RECOVERED = math.log2(1 / MIN_FACTOR) * MAX_BACKOFF_RECOVERY


class KeptBackoffs:
    """The back-offs the database keeps, as this worker last read them, and its own writes of them."""

    def __init__(self, store: DomainStore, read_every: float = KEPT_READ) -> None:
        self._store = store
        self._read_every = read_every
        self._kept: dict[str, Kept] = {}
        self._read_at = -math.inf
        self._reading: asyncio.Task[None] | None = None

    def get(self, domain: str) -> Kept | None:
        """The domain's kept back-off, if any; reads the table again in the background when stale."""
        if self._reading is None and time.monotonic() - self._read_at > self._read_every:
            self._reading = asyncio.ensure_future(self._read())
        return self._kept.get(domain)

    async def pushed_back(self, domain: str, kept: Kept) -> None:
        """Keep the back-off a site's push-back just set (a failed write is logged: Redis has it)."""
        self._kept[domain] = kept
        try:
            await asyncio.to_thread(self._store.pushed_back, domain, kept)
        except SinkError as exc:
            log.warning(
                "%s: its back-off is not kept in the database (%s): a Redis loss would forget it", domain, exc
            )

    async def read(self) -> None:
        """Read the table now (a worker does before its first token: Redis may have lost them)."""
        await self._read()

    async def _read(self) -> None:
        try:
            found = await asyncio.to_thread(self._store.pushbacks)
        except SinkError as exc:
            log.debug("cannot read the kept back-offs (%s); keeping what was read", exc)
            return
        finally:
            self._read_at = time.monotonic()
            self._reading = None
        now = time.time()
        self._kept = {d: k for d, k in found.items() if k[2] > now or now - k[1] < RECOVERED}
